// Philox4x32-10 counter-based RNG (Salmon et al., SC'11). A stream is keyed by (seed, rank, step, purpose),
// so any draw can be recomputed from its counters alone: nothing but the counters needs saving in a checkpoint.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

// philox4x32 is also device code where nvcc compiles it (the CUDA backend's dithered rounding draws the same words).
#ifdef __CUDACC__
#define EMBER_HOST_DEVICE __host__ __device__
#else
#define EMBER_HOST_DEVICE
#endif

namespace ember {

enum RngPurpose : uint32_t {
  RNG_PURPOSE_INIT = 1,    // parameter initialisation
  RNG_PURPOSE_DATA = 2,    // data-order shuffling
  RNG_PURPOSE_SAMPLE = 3,  // token sampling in generate
  RNG_PURPOSE_TEST = 4,    // test inputs
  RNG_PURPOSE_DITHER = 5,  // stochastic rounding of int8 gradients (core/int8_quant.h)
};

// One Philox4x32-10 block: 128-bit counter, 64-bit key -> 4 x uint32.
EMBER_HOST_DEVICE inline std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key) {
  constexpr uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = uint64_t(M0) * ctr[0];
    uint64_t p1 = uint64_t(M1) * ctr[2];
    ctr = {uint32_t(p1 >> 32) ^ ctr[1] ^ key[0], uint32_t(p1), uint32_t(p0 >> 32) ^ ctr[3] ^ key[1], uint32_t(p0)};
    key[0] += W0;
    key[1] += W1;
  }
  return ctr;
}

// A stream of random numbers keyed by (seed, rank, step, purpose); `offset` counts 4-word blocks consumed.
class Philox {
 public:
  Philox(uint64_t seed, uint32_t rank, uint32_t step, uint32_t purpose, uint64_t offset = 0)
      : key_{uint32_t(seed), uint32_t(seed >> 32)}, hi_{rank ^ (purpose << 24), step}, offset_(offset) {}

  uint32_t next_u32() {
    if (pos_ == 4) refill();
    return buf_[pos_++];
  }
  // Uniform in [0, 1) with 24 bits of resolution (exactly representable in fp32).
  float uniform() { return float(next_u32() >> 8) * (1.0f / 16777216.0f); }
  double uniform_double() {
    uint64_t a = next_u32() >> 5, b = next_u32() >> 6;  // 53 bits
    return double(a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
  }
  // Standard normal by Box-Muller from two uniforms in (0, 1].
  float normal() {
    double u1 = 1.0 - uniform_double(), u2 = uniform_double();
    return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
  // Uniform integer in [0, n) (n > 0), by rejection so it is unbiased.
  uint64_t below(uint64_t n) {
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    for (;;) {
      uint64_t x = (uint64_t(next_u32()) << 32) | next_u32();
      if (x < limit) return x % n;
    }
  }
  uint64_t offset() const { return offset_; }

 private:
  void refill() {
    buf_ = philox4x32({uint32_t(offset_), uint32_t(offset_ >> 32), hi_[0], hi_[1]}, key_);
    ++offset_;
    pos_ = 0;
  }
  std::array<uint32_t, 2> key_;
  std::array<uint32_t, 2> hi_;
  uint64_t offset_;
  std::array<uint32_t, 4> buf_{};
  int pos_ = 4;
};

}  // namespace ember
