// Random test inputs from a seeded Philox stream (RNG_PURPOSE_TEST): normal floats and token ids, so every op test
// draws fresh, reproducible inputs of its own from (seed, stream).
#pragma once

#include <cstdint>
#include <vector>

#include "core/philox.h"

namespace ember::test {

struct Rng {
  Philox philox;
  Rng(uint64_t seed, uint32_t stream) : philox(seed, 0, stream, RNG_PURPOSE_TEST) {}
  // n draws of shift + scale N(0, 1).
  std::vector<float> normal(size_t n, float scale = 1.0f, float shift = 0.0f) {
    std::vector<float> v(n);
    for (float& x : v) x = shift + scale * philox.normal();
    return v;
  }
  // n token ids uniform in [0, V).
  std::vector<int32_t> tokens(size_t n, int V) {
    std::vector<int32_t> v(n);
    for (int32_t& x : v) x = int32_t(philox.below(uint64_t(V)));
    return v;
  }
};

}  // namespace ember::test
