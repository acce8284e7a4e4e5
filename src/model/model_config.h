// The GPT model's sizes: the one source of truth; everything else (head size, parameter count) is derived.
#pragma once

#include <cstdint>

namespace ember {

struct ModelConfig {
  int n_layer = 2;
  int n_head = 2;
  int n_embd = 32;
  int block_size = 64;   // maximum sequence length (rows of wpe)
  int vocab_size = 256;  // rows of wte; the byte tokenizer needs 256

  int head_dim() const { return n_embd / n_head; }
  bool operator==(const ModelConfig&) const = default;
};

}  // namespace ember
