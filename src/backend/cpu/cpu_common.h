// Helpers shared by the CPU op families: how work is split across OpenMP threads, per-ISA kernel clones, and
// a vectorisable exp. Every parallel loop splits work statically by thread id, so results are reproducible.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/cpu_clones.h"  // EMBER_CPU_CLONES

namespace ember::cpu {

// Below this many elements an OpenMP fork/join (~1-2 us on 2 cores) costs more than the loop, so loops stay serial.
constexpr size_t kMinParallelWork = size_t(1) << 15;

// The half-open range [begin, end) of the n items that thread `tid` of `nthreads` owns. Items are dealt out in
// blocks of `align` so that neighbouring threads never write the same 64-byte cache line when align = 16 floats.
struct Span {
  size_t begin, end;
};
inline Span thread_span(size_t n, int tid, int nthreads, size_t align = 1) {
  const size_t blocks = (n + align - 1) / align;
  const size_t per = blocks / size_t(nthreads), extra = blocks % size_t(nthreads), t = size_t(tid);
  const size_t b0 = t * per + std::min(t, extra), b1 = b0 + per + (t < extra ? 1 : 0);
  return {std::min(n, b0 * align), std::min(n, b1 * align)};
}

// A thread's scratch of at least n floats, kept between calls and padded by a cache line on each side. Buffers that
// both threads allocated afresh inside each parallel region ended up sharing cache lines, and writes to them made the
// two-thread decode kernels slower than one thread. The pointer stays valid until the thread's next call.
inline float* thread_scratch(size_t n) {
  thread_local std::vector<float> buf;
  if (buf.size() < n + 32) buf.resize(n + 32);
  return buf.data() + 16;
}

// Max by value. std::max returns a reference, which GCC 12 at -O2 fails to if-convert, and that blocks the
// vectorisation of any loop using it.
inline float max_value(float a, float b) { return b > a ? b : a; }

// Clamps x to [lo, hi] with integer min/max on an order-preserving integer image of the float. A float clamp
// (x < lo ? lo : x) is a branch GCC's PRE pass specialises per constant, which again blocks vectorisation.
inline float clamp_value(float x, float lo, float hi) {
  const auto to_ordered = [](float f) {
    const int32_t i = std::bit_cast<int32_t>(f);
    return i ^ ((i >> 31) & 0x7fffffff);  // negative floats: flip magnitude bits so larger float = larger int
  };
  int32_t o = to_ordered(x);
  const int32_t olo = to_ordered(lo), ohi = to_ordered(hi);
  o = o < ohi ? o : ohi;
  o = o > olo ? o : olo;
  return std::bit_cast<float>(o ^ ((o >> 31) & 0x7fffffff));  // the map is its own inverse
}

// e^x in fp32 within 2.5e-7 relative error (about 4 ulp), in plain arithmetic so that `omp simd` loops calling it
// vectorise (glibc's expf is a scalar call at -O2 without -ffast-math, and softmax, attention and GELU are
// exp-bound). x = n ln2 + r with |r| <= ln2/2; e^r by its degree-6 Taylor polynomial; 2^n built in the exponent
// bits. x is clamped to [-87, 88]: below, the result is e^-87 = 1.6e-38 rather than a denormal (those cost ~100
// cycles each, and it is negligible wherever a softmax sum is >= 1); above, it stays finite (1.65e38).
inline float exp_approx(float x) {
  x = clamp_value(x, -87.0f, 88.0f);
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer held in the low mantissa bits
  const float shifted = x * 1.44269504088896341f + kRound;
  const float n = shifted - kRound;
  const int32_t ni = std::bit_cast<int32_t>(shifted) - std::bit_cast<int32_t>(kRound);
  // ln2 split in two (Cody-Waite) so n * ln2_hi is exact for |n| <= 127 and r keeps its low bits.
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  return p * std::bit_cast<float>((ni + 127) << 23);
}

}  // namespace ember::cpu
