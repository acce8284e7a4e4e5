// KV-cache decoding of models with an attention schedule (windows, ALiBi, rotary positions) against full
// recomputation by GPT::forward, position by position: prefill chunks and decoded rows, within the context and, under
// rotary positions, past it (the rolling context), where the recomputation is the same weights under a longer block
// size with each full-attention layer's window at max_T - 1 keys, which is what the rolling caches keep.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "infer/kv_model.h"
#include "infer_test_util.h"
#include "model/gpt.h"

namespace ember {
namespace {

// The logits of every position of `tokens` by full recomputation under `config`, with weights `params` (host).
std::vector<float> recomputed_logits(Backend& be, const ModelConfig& config, const std::vector<float>& params,
                                     const std::vector<int32_t>& tokens) {
  const int T = int(tokens.size()), V = config.vocab_size, Vp = config.padded_vocab_size();
  GPT gpt(config, be, 1, T, /*with_grads=*/false);
  EXPECT_EQ(gpt.table().total_numel(), params.size());
  be.copy_to_device(gpt.params(), params.data(), params.size() * sizeof(float));
  gpt.forward(tokens.data(), nullptr, 1, T);
  std::vector<float> padded(size_t(T) * Vp), out(size_t(T) * V);
  be.copy_to_host(padded.data(), gpt.logits().f32(), padded.size() * sizeof(float));
  for (int t = 0; t < T; ++t)
    std::copy(padded.begin() + ptrdiff_t(t) * Vp, padded.begin() + ptrdiff_t(t) * Vp + V,
              out.begin() + ptrdiff_t(t) * V);
  return out;
}

// Runs `tokens` through a one-slot KvModel of `config` and `shape`: chunks of shape.max_rows rows up to `prefill`
// tokens, then a row per step, every row's logits kept; compares each position with `want` (kRelTol, as
// test_kv_model.cpp's, of the position's largest logit). Returns the worst relative difference.
float decode_against(Backend& be, const ModelConfig& config, KvModelShape shape, const std::vector<float>& params,
                     const std::vector<int32_t>& tokens, int prefill, const std::vector<float>& want) {
  const int V = config.vocab_size, T = int(tokens.size());
  KvModel kv(config, be, shape);
  be.copy_to_device(kv.params(), params.data(), params.size() * sizeof(float));
  std::vector<float> logits(size_t(shape.max_rows) * V);
  float worst = 0.0f;
  for (int t = 0; t < T;) {
    const int n = t < prefill ? std::min(shape.max_rows, prefill - t) : 1;
    std::vector<int32_t> slots(static_cast<size_t>(n), 0), pos(static_cast<size_t>(n));
    std::vector<int> rows(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) pos[size_t(i)] = t + i, rows[size_t(i)] = i;
    kv.forward(&tokens[size_t(t)], slots.data(), pos.data(), n, rows.data(), n, logits.data());
    for (int i = 0; i < n; ++i) {
      const std::vector<float> ref(want.begin() + ptrdiff_t(t + i) * V, want.begin() + ptrdiff_t(t + i + 1) * V);
      const float d = max_abs_diff(logits.data() + size_t(i) * V, ref.data(), size_t(V));
      EXPECT_LE(d, kRelTol * max_abs(ref)) << "position " << t + i;
      worst = std::max(worst, d / max_abs(ref));
    }
    t += n;
  }
  return worst;
}

// GPT-2's initialisation scaled by 8 (infer_test_util.h's Fixture: logits over several nats), on the host.
std::vector<float> scaled_weights(Backend& be, const ModelConfig& config) {
  GPT gpt(config, be, 1, 1, /*with_grads=*/false);
  gpt.init_weights(5);
  std::vector<float> host(gpt.table().total_numel());
  be.copy_to_host(host.data(), gpt.params(), host.size() * sizeof(float));
  for (float& x : host) x *= 8.0f;
  return host;
}

// Learned positions with a window of 3 and ALiBi in the first layer: within the context, chunks of four rows.
TEST(KvModelSchedule, WindowsAndAlibiEqualFullRecomputation) {
  auto be = make_cpu_backend();
  ModelConfig c = infer_config();
  c.attention_windows = {3, 0}, c.alibi_slopes = {0.5f, 0.0f};
  const std::vector<float> params = scaled_weights(*be, c);
  const std::vector<int32_t> tokens = random_tokens(size_t(c.block_size), c.vocab_size, 3);
  const std::vector<float> want = recomputed_logits(*be, c, params, tokens);
  const float worst = decode_against(*be, c, KvModelShape{1, 4, 4, 0}, params, tokens, 12, want);
  printf("windows and ALiBi, KV cache vs full recomputation: worst %.3g (tolerance %.1g)\n", worst, kRelTol);
}

// Rotary positions, a window of 3 then full attention with ALiBi, block size 16, decoded to position 49: chunks of
// four rows cross max_T, then single rows run to three times it. The recomputation is the same weights at block size
// 64 (a rope model's weights do not depend on it) with the full layer's window at 15.
TEST(KvModelSchedule, RopePastTheContextEqualsRecomputationWithTheRollingWindow) {
  auto be = make_cpu_backend();
  ModelConfig c = infer_config();
  c.block_size = 16, c.position = PositionEncoding::rope, c.rope_theta = 500000.0f;
  c.attention_windows = {3, 0}, c.alibi_slopes = {0.0f, 0.25f};
  ModelConfig longer = c;
  longer.block_size = 64, longer.attention_windows = {3, c.block_size - 1};
  const std::vector<float> params = scaled_weights(*be, c);
  const std::vector<int32_t> tokens = random_tokens(50, c.vocab_size, 4);
  const std::vector<float> want = recomputed_logits(*be, longer, params, tokens);
  KvModel probe(c, *be, KvModelShape{1, 4, 4, 0});
  EXPECT_TRUE(probe.rolling_context());
  EXPECT_EQ(probe.layer_attention(0).ring, 3 + 4);   // the window and a step's rows
  EXPECT_EQ(probe.layer_attention(1).ring, 15 + 4);  // max_T - 1 keys and a step's rows
  const float worst = decode_against(*be, c, KvModelShape{1, 4, 4, 0}, params, tokens, 24, want);
  printf("rope past the context, KV cache vs recomputation: worst %.3g (tolerance %.1g)\n", worst, kRelTol);
}

// Learned positions do not roll: their caches keep max_T rows (a window's ring is shorter) and positions stay below
// max_T, as before.
TEST(KvModelSchedule, LearnedPositionsKeepTheirCaches) {
  auto be = make_cpu_backend();
  ModelConfig c = infer_config();
  c.attention_windows = {3, 0};
  KvModel kv(c, *be, KvModelShape{2, 8, 2, 0});
  EXPECT_FALSE(kv.rolling_context());
  EXPECT_EQ(kv.layer_attention(0).ring, 3 + 8);
  EXPECT_EQ(kv.layer_attention(1).ring, c.block_size);
  EXPECT_EQ(kv.layer_attention(1).window, 0);
  // The windowed layer's two caches hold its ring, not the context: what the memory checks (serve's capacity) count.
  ModelConfig full = c;
  full.attention_windows.clear();
  const KvModelShape shape{2, 8, 2, 0};
  const size_t saved = 2 * size_t(2) * size_t(c.block_size - (3 + 8)) * size_t(c.n_embd) * sizeof(float);
  EXPECT_EQ(KvModel::footprint_bytes(full, shape, MatmulPrecision::fp32) -
                KvModel::footprint_bytes(c, shape, MatmulPrecision::fp32),
            saved);
}

}  // namespace
}  // namespace ember
