// Float64 reference ops (reference_ops.cpp): the plain definitions of the ops of backend.h that the op tests check
// the backends against, in double, on the same row-major layouts as the backends.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/attention_layer.h"

namespace ember::test {

using ember::AttentionLayer;

using Vec = std::vector<double>;

// out (B, T, C) = wte[inp] + wpe[t].
Vec ref_encoder(const std::vector<int32_t>& inp, const Vec& wte, const Vec& wpe, int B, int T, int C);

// Layernorm over rows of x (N, C) with eps 1e-5; optionally returns the row means and reciprocal deviations (N).
Vec ref_layernorm(const Vec& x, const Vec& w, const Vec& b, int N, int C, Vec* mean = nullptr, Vec* rstd = nullptr);
// The layernorm's gradients for dout (N, C): dx (N, C), dw and db (C), each overwritten.
void ref_layernorm_backward(const Vec& dout, const Vec& x, const Vec& w, int N, int C, Vec& dx, Vec& dw, Vec& db);

// out (N, OC) = inp (N, IC) @ w (+ bias); w is (IC, OC), or (OC, IC) when w_transposed (the tied lm_head).
Vec ref_matmul(const Vec& inp, const Vec& w, const Vec* bias, int N, int IC, int OC, bool w_transposed = false);

// Causal attention on (B, T, 3C) qkv into (B, T, C); optionally returns lse (B, NH, T). `layer` adds a window, an
// ALiBi bias and rotary positions (backend/attention_layer.h), here from their definitions in double.
Vec ref_attention(const Vec& qkv, int B, int T, int C, int NH, Vec* lse = nullptr, const AttentionLayer& layer = {});
// dqkv (B, T, 3C) for dout (B, T, C).
Vec ref_attention_backward(const Vec& dout, const Vec& qkv, int B, int T, int C, int NH,
                           const AttentionLayer& layer = {});

// KV-cache inference (backend.h): row i is the token at position pos[i] of the sequence in cache slot slot[i]; the
// caches are (S, max_T, C). out (N, C) = wte[inp[i]] + wpe[pos[i]].
Vec ref_encoder_positions(const std::vector<int32_t>& inp, const std::vector<int32_t>& pos, const Vec& wte,
                          const Vec& wpe, int N, int C);
// Copies the keys and values of qkv (N, 3C) to the caches at (slot[i], pos[i]).
void ref_kv_cache_write(Vec& k_cache, Vec& v_cache, const Vec& qkv, const std::vector<int32_t>& slot,
                        const std::vector<int32_t>& pos, int N, int C, int max_T);
// Attention of each row's query (qkv (N, 3C)) over its slot's cached keys and values at 0..pos[i]: out (N, C).
Vec ref_attention_kv(const Vec& qkv, const Vec& k_cache, const Vec& v_cache, const std::vector<int32_t>& slot,
                     const std::vector<int32_t>& pos, int N, int C, int NH, int max_T);

// GELU, tanh approximation, and its derivative.
double ref_gelu(double x);
double ref_gelu_grad(double x);

// Per-row softmax of x (N, V) / temperature.
Vec ref_softmax(const Vec& x, int N, int V, double temperature = 1.0);
// Per-row cross-entropy losses (N) of logits (N, V) against targets (N).
Vec ref_crossentropy(const Vec& logits, const std::vector<int32_t>& targets, int N, int V);

}  // namespace ember::test
