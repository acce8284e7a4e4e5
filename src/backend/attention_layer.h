// One transformer layer's attention schedule: which earlier keys each query sees (a causal window), the ALiBi bias
// on the scores, and rotary position embeddings of q and k. The default is GPT-2's: every earlier key, no bias, no
// rotation (positions come from the learned wpe table instead).
#pragma once

#include <algorithm>

namespace ember {

struct AttentionLayer {
  // 0: every key 0..i (full causal). w > 0: query i sees keys i - w .. i, itself and the w tokens before it (as
  // FlashAttention's window_size = (w, 0)), so the work per query is bounded by w + 1 keys.
  int window = 0;
  // The score of key j for query i gets -alibi_slope * (i - j) added after the 1/sqrt(HS) scaling (0: no bias).
  float alibi_slope = 0.0f;
  // 0: no rotation. Otherwise q and k are rotated by position before the product: the pairs (d, d + HS/2) of a head
  // (the rotate-half convention of GPT-NeoX and Llama) by the angle pos * rope_theta^(-2d/HS).
  float rope_theta = 0.0f;

  bool is_full() const { return window == 0 && alibi_slope == 0.0f && rope_theta == 0.0f; }
  // The first key query i sees.
  int first_key(int i) const { return window > 0 ? std::max(0, i - window) : 0; }
  bool operator==(const AttentionLayer& o) const {  // spelled out: nvcc compiles this header as C++17
    return window == o.window && alibi_slope == o.alibi_slope && rope_theta == o.rope_theta;
  }
};

}  // namespace ember
