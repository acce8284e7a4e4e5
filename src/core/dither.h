// The draws of dithered (stochastic) rounding, shared by the CPU's quantization (core/int8_quant.h) and the CUDA
// backend's kernels, which must draw the same words: header-only, host and device code alike.
#pragma once

#include <array>
#include <cstdint>

#include "core/philox.h"

namespace ember {

// What a dithered quantization is keyed by. `stream` names the tensor within the step (the caller's layer, operand
// and micro-batch), below 2^24; the uniform for element i of that tensor is word i % 4 of Philox block
// (stream << 40) | i / 4 under key seed and counter (rank, step).
struct DitherKey {
  uint64_t seed = 0;
  uint32_t rank = 0, step = 0, stream = 0;
};
inline constexpr uint32_t kDitherStreams = 1u << 24;
inline constexpr uint64_t kDitherBlocksPerStream = uint64_t(1) << 40;

// Philox block b of a dither stream: the uniforms of elements 4b .. 4b + 3.
EMBER_HOST_DEVICE inline std::array<uint32_t, 4> dither_block(const DitherKey& key, uint64_t b) {
  const uint64_t counter = (uint64_t(key.stream) << 40) | b;
  return philox4x32(
      {uint32_t(counter), uint32_t(counter >> 32), key.rank ^ (uint32_t(RNG_PURPOSE_DITHER) << 24), key.step},
      {uint32_t(key.seed), uint32_t(key.seed >> 32)});
}

// A word of a block as a uniform in [0, 1) with 24 bits (exact in fp32).
EMBER_HOST_DEVICE inline float dither_word_uniform(uint32_t word) { return float(word >> 8) * (1.0f / 16777216.0f); }

}  // namespace ember
