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
  // The vocabulary rounded up to a multiple of 128 (GPT-2's 50257 to 50304), as the lm_head's GEMMs see it: rows and
  // leading dimensions that keep bf16 tiles 16-byte aligned. The padding rows of wte are zero, and no token id, loss,
  // sample, checkpoint or export ever reaches them (ParamTable, GPT).
  int padded_vocab_size() const { return (vocab_size + kVocabPad - 1) / kVocabPad * kVocabPad; }
  static constexpr int kVocabPad = 128;
  bool operator==(const ModelConfig&) const = default;
};

}  // namespace ember
