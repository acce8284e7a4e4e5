// 1-bit sign + per-block scale codec; see onebit_codec.h for the message layout.
// OpenMP loops with static schedules; each block is summed by one thread in a fixed order, so bytes are deterministic.
#include "train/async/onebit_codec.h"

#include <cmath>
#include <cstring>

#include "core/error.h"

namespace ember {
namespace {

// Below this many values a parallel region costs more than it saves (same threshold as the CPU backend's loops).
constexpr size_t kMinParallelWork = size_t(1) << 15;

size_t ceil_div(size_t a, size_t b) { return a / b + (a % b != 0); }

const uint8_t* signs_of(const uint8_t* msg, size_t n, size_t block_size) {
  return msg + onebit_block_count(n, block_size) * sizeof(float);
}

// Calls f(i, value) for every decoded value i of a message; parallel over blocks, so f must only touch index i.
template <typename F>
void for_each_decoded(const uint8_t* in, size_t n, size_t block_size, F&& f) {
  const size_t nblocks = onebit_block_count(n, block_size);
  const uint8_t* signs = signs_of(in, n, block_size);
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
  for (size_t b = 0; b < nblocks; ++b) {
    float scale;
    std::memcpy(&scale, in + b * sizeof(float), sizeof(float));
    const size_t end = b * block_size + block_size < n ? b * block_size + block_size : n;
    for (size_t i = b * block_size; i < end; ++i) f(i, (signs[i >> 3] >> (i & 7)) & 1u ? scale : -scale);
  }
}

}  // namespace

size_t onebit_block_count(size_t n, size_t block_size) {
  EMBER_ASSERT(block_size >= 1, "onebit codec: block_size must be >= 1");
  return ceil_div(n, block_size);
}

size_t onebit_packed_bytes(size_t n, size_t block_size) {
  return onebit_block_count(n, block_size) * sizeof(float) + ceil_div(n, 8);
}

void onebit_pack(const float* x, size_t n, size_t block_size, uint8_t* out) {
  const size_t nblocks = onebit_block_count(n, block_size), nbytes = ceil_div(n, 8);
  // Scales: the block's |x| summed in float64 then rounded once, so the scale is the correctly rounded mean for any
  // practical block size (an fp32 sum of K = 2^16 terms would be off by up to ~K eps relative).
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
  for (size_t b = 0; b < nblocks; ++b) {
    const size_t begin = b * block_size, end = begin + block_size < n ? begin + block_size : n;
    double sum = 0.0;
    for (size_t i = begin; i < end; ++i) sum += std::fabs(double(x[i]));
    const float scale = float(sum / double(end - begin));
    std::memcpy(out + b * sizeof(float), &scale, sizeof(float));
  }
  // Signs: one byte per iteration, since a block of K % 8 != 0 values shares its edge bytes with its neighbours.
  uint8_t* signs = out + nblocks * sizeof(float);
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
  for (size_t j = 0; j < nbytes; ++j) {
    const size_t begin = 8 * j, end = begin + 8 < n ? begin + 8 : n;
    unsigned byte = 0;
    for (size_t i = begin; i < end; ++i) byte |= unsigned(x[i] >= 0.0f) << (i - begin);
    signs[j] = uint8_t(byte);
  }
}

void onebit_unpack(const uint8_t* in, size_t n, size_t block_size, float* out) {
  for_each_decoded(in, n, block_size, [out](size_t i, float v) { out[i] = v; });
}

void onebit_unpack_add(const uint8_t* in, size_t n, size_t block_size, float* out, float factor) {
  for_each_decoded(in, n, block_size, [out, factor](size_t i, float v) { out[i] += factor * v; });
}

}  // namespace ember
