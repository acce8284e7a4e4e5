// What the model tests share (tests/unit/model/test_*.cpp): the tiny model they build and its random batches.
#pragma once

#include <cstdint>
#include <vector>

#include "core/philox.h"
#include "model/model_config.h"

namespace ember {

// The tiny config of configs/tiny.ini, with a smaller vocabulary so every embedding row gets gradient.
inline ModelConfig tiny_config() {
  ModelConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  c.block_size = 32;
  c.vocab_size = 48;
  return c;
}

// n token ids uniform in [0, V), drawn from the test stream `step`.
inline std::vector<int32_t> random_tokens(size_t n, int V, uint32_t step) {
  Philox rng(7, 0, step, RNG_PURPOSE_TEST);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(rng.below(uint64_t(V)));
  return t;
}

}  // namespace ember
