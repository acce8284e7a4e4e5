// What the model tests share (tests/unit/model/test_*.cpp): the tiny model they build.
#pragma once

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

}  // namespace ember
