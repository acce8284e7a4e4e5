// What the inference tests share (tests/unit/infer/test_*.cpp): a small model whose logits spread over several nats,
// KV models over its weights, full recomputation to check them against, and the tolerance of that comparison.
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "core/philox.h"
#include "infer/kv_model.h"
#include "model/gpt.h"

namespace ember {

// Head size 16 (not a multiple of the CPU attention's 16-lane padding would also do; 3 heads of 16 keep it small).
inline ModelConfig infer_config() {
  ModelConfig c;
  c.n_layer = 2;
  c.n_head = 3;
  c.n_embd = 48;
  c.block_size = 40;
  c.vocab_size = 256;
  return c;
}

inline std::vector<int32_t> random_tokens(size_t n, int V, uint32_t step) {
  Philox rng(11, 0, step, RNG_PURPOSE_TEST);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(rng.below(uint64_t(V)));
  return t;
}

// GPT-2's initialisation with every weight scaled by 8, so that logits spread over several nats: at std 0.02 they are
// all within a few hundredths of each other and greedy choices would hinge on rounding.
struct Fixture {
  std::unique_ptr<Backend> backend = make_cpu_backend();
  ModelConfig config = infer_config();
  GPT gpt{config, *backend, 1, config.block_size, /*with_grads=*/false};
  Fixture() {
    gpt.init_weights(5);
    std::vector<float> host(gpt.table().total_numel());
    backend->copy_to_host(host.data(), gpt.params(), host.size() * sizeof(float));
    for (float& x : host) x *= 8.0f;
    backend->copy_to_device(gpt.params(), host.data(), host.size() * sizeof(float));
  }
  std::unique_ptr<KvModel> kv(KvModelShape shape) {
    auto m = std::make_unique<KvModel>(config, *backend, shape);
    backend->copy(m->params(), gpt.params(), gpt.table().total_numel() * sizeof(float));
    return m;
  }
  // Logits of the last position of tokens[0..n) by full recomputation.
  std::vector<float> full_logits(const std::vector<int32_t>& tokens, int n) {
    gpt.forward(tokens.data(), nullptr, 1, n);
    std::vector<float> out(size_t(config.vocab_size));
    backend->copy_to_host(out.data(), gpt.logits().at(size_t(n - 1) * config.vocab_size).f32(),
                          out.size() * sizeof(float));
    return out;
  }
};

inline float max_abs_diff(const float* a, const float* b, size_t n) {
  float d = 0.0f;
  for (size_t i = 0; i < n; ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}
inline float max_abs(const std::vector<float>& a) {
  float m = 0.0f;
  for (float x : a) m = std::max(m, std::fabs(x));
  return m;
}

// The cached path and full recomputation run the same ops but for attention (a per-row kernel against the blocked
// flash kernel) and GEMMs of other row counts (OpenBLAS may block them differently, and takes a one-row product as a
// GEMV): only summation orders differ. Over 2 layers of sums of at most 4C = 192 products, with weights 8 times GPT-2's
// scale, fp32 reorderings move a logit by tens to hundreds of ulp of the largest logit: measured up to 1.1e-5 of it
// on an AMD EPYC (AVX2 kernels) and 3.4e-5 on an Intel Xeon (AVX-512 kernels, which fuse multiply-adds in other
// orders). 1e-4 relative (about 840 ulp) leaves three times that; a wrong position, slot or mask moves logits by
// whole units, over 100 times the tolerance.
constexpr float kRelTol = 1e-4f;

}  // namespace ember
