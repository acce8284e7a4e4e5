// The GPT model's sizes and attention schedule: the one source of truth; everything else (head size, parameter count)
// is derived.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/attention_layer.h"

namespace ember {

// Where a token's position enters the model: GPT-2's learned table (wpe) added to the embedding, or rotary embeddings
// of q and k in every layer (no wpe tensor at all).
enum class PositionEncoding { learned, rope };

struct ModelConfig {
  int n_layer = 2;
  int n_head = 2;
  int n_embd = 32;
  int block_size = 64;   // maximum sequence length (rows of wpe)
  int vocab_size = 256;  // rows of wte; the byte tokenizer needs 256
  PositionEncoding position = PositionEncoding::learned;
  float rope_theta = 10000.0f;  // the rotary base, read only with position = rope
  // Per layer (n_layer entries), or empty: 0 is full causal attention, w > 0 a window of w earlier tokens
  // (AttentionLayer). Kept empty rather than all zero, and slopes likewise, so that equal schedules compare equal.
  std::vector<int> attention_windows;
  std::vector<float> alibi_slopes;  // per layer (n_layer entries), or empty: no ALiBi bias

  int head_dim() const { return n_embd / n_head; }
  // The vocabulary rounded up to a multiple of 128 (GPT-2's 50257 to 50304), as the lm_head's GEMMs see it: rows and
  // leading dimensions that keep bf16 tiles 16-byte aligned. The padding rows of wte are zero, and no token id, loss,
  // sample, checkpoint or export ever reaches them (ParamTable, GPT).
  int padded_vocab_size() const { return (vocab_size + kVocabPad - 1) / kVocabPad * kVocabPad; }
  static constexpr int kVocabPad = 128;
  bool has_wpe() const { return position == PositionEncoding::learned; }
  // Layer l's attention as the backends take it.
  AttentionLayer attention(int l) const {
    AttentionLayer a;
    if (!attention_windows.empty()) a.window = attention_windows[size_t(l)];
    if (!alibi_slopes.empty()) a.alibi_slope = alibi_slopes[size_t(l)];
    if (position == PositionEncoding::rope) a.rope_theta = rope_theta;
    return a;
  }
  // GPT-2's own attention and positions, which every GPT-2 tool reads: learned positions, full attention, no bias.
  bool is_gpt2() const { return has_wpe() && attention_windows.empty() && alibi_slopes.empty(); }
  // rope_theta counts only under rope: a learned-position model is the same model whatever the key says.
  bool operator==(const ModelConfig& o) const {
    return n_layer == o.n_layer && n_head == o.n_head && n_embd == o.n_embd && block_size == o.block_size &&
           vocab_size == o.vocab_size && position == o.position &&
           (position == PositionEncoding::learned || rope_theta == o.rope_theta) &&
           attention_windows == o.attention_windows && alibi_slopes == o.alibi_slopes;
  }
};

}  // namespace ember
