// CPU KV-cache inference ops (cpu_kv_cache.cpp) against the float64 reference, over steps that mix several sequences
// in different slots, prefill and decode rows; and attention over the cache against attention_forward of the sequence.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "backend/attention_layer.h"
#include "core/rope.h"
#include "ops_test_util.h"

namespace ember {
namespace {

using test::ref_attention_kv;
using test::ref_encoder_positions;
using test::ref_kv_cache_write;

// (C, NH, max_T): head sizes 15, 5 and 64 (none but 64 a multiple of 16), max_T odd and up to 150.
struct KvShape {
  int C, NH, max_T;
};
std::string kv_shape_name(const testing::TestParamInfo<KvShape>& info) {
  const KvShape& s = info.param;
  return "C" + std::to_string(s.C) + "_NH" + std::to_string(s.NH) + "_maxT" + std::to_string(s.max_T);
}

class OpsKvCache : public testing::TestWithParam<KvShape> {
 protected:
  std::unique_ptr<Backend> be = make_cpu_backend();
  uint32_t stream(uint32_t op) const {
    const KvShape& s = GetParam();
    return op * 1000003u + uint32_t(s.C * 31 + s.NH * 7919 + s.max_T * 104729);
  }
};

struct Row {
  int slot, pos;
};

// Rows `slot`, positions first..last: one sequence's prefill.
void append_prefill(std::vector<Row>& rows, int slot, int first, int last) {
  for (int t = first; t <= last; ++t) rows.push_back({slot, t});
}

constexpr int kSlots = 3, kVocab = 50;
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// Three steps over three slots, as an engine runs them: (1) the prefill of slot 2 up to max_T - 2 beside that of
// slot 0 (positions 0..2); (2) decode rows of slots 0 and 2 (slot 2 at max_T - 1, the cache's last row) around the
// whole prefill of slot 1 (from position 0); (3) decode rows of slots 1 and 0, out of slot order. The caches start as
// NaN, so a read of a row that was never written (past a row's position, or another slot's) shows in the output.
// Each step checks the embedding (one fp32 add, so at most half an ulp, 2^-24 |ref|, from the exact sum; rtol eps
// allows twice that), the attention (each output sums up to max_T probability-weighted values after HS-term score dot
// products: fp32_tol with K = max_T + HS) and, at the end, the caches (copies: bitwise).
TEST_P(OpsKvCache, StepsMatchTheReference) {
  const auto [C, NH, max_T] = GetParam();
  const int HS = C / NH;
  Rng rng(stream(1));
  std::vector<std::vector<Row>> steps(3);
  append_prefill(steps[0], 2, 0, max_T - 2);
  append_prefill(steps[0], 0, 0, 2);
  steps[1].push_back({0, 3});
  append_prefill(steps[1], 1, 0, 4);
  steps[1].push_back({2, max_T - 1});
  steps[2] = {{1, 5}, {0, 4}};

  const size_t cache_size = size_t(kSlots) * max_T * C;
  const std::vector<float> nan_cache(cache_size, kNaN);
  Floats d_k(*be, nan_cache), d_v(*be, nan_cache);
  Vec k_ref(cache_size, double(kNaN)), v_ref(cache_size, double(kNaN));
  const auto wte = rng.normal(size_t(kVocab) * C), wpe = rng.normal(size_t(max_T) * C);
  Floats d_wte(*be, wte), d_wpe(*be, wpe);
  for (size_t step = 0; step < steps.size(); ++step) {
    const std::string tag = "step " + std::to_string(step) + " ";
    const int N = int(steps[step].size());
    std::vector<int32_t> slot, pos;
    for (const Row& r : steps[step]) slot.push_back(r.slot), pos.push_back(r.pos);
    const auto inp = rng.tokens(size_t(N), kVocab);
    const auto qkv = rng.normal(size_t(N) * 3 * C, 1.5f);  // scores ~N(0, 1.5^2), as the attention test's
    Ints d_inp(*be, inp), d_pos(*be, pos), d_slot(*be, slot);
    Floats d_emb(*be, size_t(N) * C), d_qkv(*be, qkv), d_out(*be, size_t(N) * C);

    be->encoder_forward_positions(d_emb.get(), d_inp.get(), d_pos.get(), d_wte.get(), d_wpe.get(), N, C);
    const Vec emb = ref_encoder_positions(inp, pos, to_double(wte), to_double(wpe), N, C);
    expect_close(tag + "encoder_forward_positions", d_emb.host(), emb, Tol{0.0, kEps});

    be->kv_cache_write(d_k.get(), d_v.get(), d_qkv.get(), d_slot.get(), d_pos.get(), N, C, max_T);
    be->attention_kv_forward(d_out.get(), d_qkv.get(), d_k.get(), d_v.get(), d_slot.get(), d_pos.get(), N, C, NH,
                             max_T);
    const Vec qd = to_double(qkv);
    ref_kv_cache_write(k_ref, v_ref, qd, slot, pos, N, C, max_T);
    const Vec out = ref_attention_kv(qd, k_ref, v_ref, slot, pos, N, C, NH, max_T);
    expect_close(tag + "attention_kv_forward", d_out.host(), out, fp32_tol(max_T + HS, out));
  }
  const std::vector<float> k_want(k_ref.begin(), k_ref.end()), v_want(v_ref.begin(), v_ref.end());
  expect_bitwise("k_cache", d_k.host(), k_want);
  expect_bitwise("v_cache", d_v.host(), v_want);
}

// The property the KV engine relies on: a sequence's rows 0..T-1 attended through the cache (the first half as one
// prefill call, then one decode row per call, in slot 1 beside a NaN slot 0) give attention_forward's output over
// (1, T). Both are fp32 CPU implementations of the same sums in different orders (attention_forward tiles its keys),
// each within fp32_tol(T + HS) of the exact result, so they agree within that too (tolerance.h: two such
// implementations differ by ~2 sqrt(K) eps rms, and the rule allows 8).
TEST_P(OpsKvCache, WholeSequenceMatchesAttentionForward) {
  const auto [C, NH, max_T] = GetParam();
  const int HS = C / NH, slot = 1;
  for (const int T : {max_T, max_T / 2 + 1, 1}) {
    const std::string tag = "T " + std::to_string(T) + " ";
    Rng rng(stream(2) + uint32_t(T));
    const auto qkv = rng.normal(size_t(T) * 3 * C, 1.5f);
    Floats d_qkv(*be, qkv), d_full(*be, size_t(T) * C), d_lse(*be, size_t(NH) * T), d_out(*be, size_t(T) * C);
    be->attention_forward(d_full.get(), d_lse.get(), d_qkv.get(), 1, T, C, NH);
    const auto full = d_full.host();

    const std::vector<float> nan_cache(size_t(2) * max_T * C, kNaN);
    Floats d_k(*be, nan_cache), d_v(*be, nan_cache);
    std::vector<int32_t> pos(static_cast<size_t>(T)), slots(static_cast<size_t>(T), slot);
    for (int t = 0; t < T; ++t) pos[size_t(t)] = t;
    Ints d_pos(*be, pos), d_slot(*be, slots);
    // Rows [first, first + n) in one call: their keys and values first, then their queries.
    auto run = [&](int first, int n) {
      const size_t row = size_t(first);
      be->kv_cache_write(d_k.get(), d_v.get(), d_qkv.get() + row * 3 * C, d_slot.get() + row, d_pos.get() + row, n, C,
                         max_T);
      be->attention_kv_forward(d_out.get() + row * C, d_qkv.get() + row * 3 * C, d_k.get(), d_v.get(),
                               d_slot.get() + row, d_pos.get() + row, n, C, NH, max_T);
    };
    const int prefill = (T + 1) / 2;
    run(0, prefill);
    for (int t = prefill; t < T; ++t) run(t, 1);
    expect_close(tag + "attention_kv_forward vs attention_forward", d_out.host(), full, fp32_tol(T + HS, full));
  }
}

// The same property with a layer's schedule and caches that are rings (Backend::KvAttention): a sequence of T tokens,
// longer than the ring, prefilled in chunks of `rows` past the window and its last five rows decoded a row per call,
// attends through the ring as attention_forward does over (1, T) with the window the ring keeps, the ALiBi bias and the
// rotation. The ring holds the window and one chunk (ring = window + rows), the smallest that keeps every key a chunk's
// rows read; a ring one row shorter lets a chunk overwrite keys its earlier rows still read, and the outputs then
// differ (where the lost key's weight is not negligible).
TEST_P(OpsKvCache, RingsWithAScheduleMatchAttentionForward) {
  const auto [C, NH, max_T] = GetParam();
  const int HS = C / NH, T = 2 * max_T + 3, rows = 4;
  const AttentionLayer layers[] = {{5, 0.5f, 0.0f}, {1, 0.0f, 0.0f}, {max_T - 1, 0.25f, 0.0f}, {9, 0.0f, 10000.0f}};
  for (const AttentionLayer& layer : layers) {
    if (layer.rope_theta != 0.0f && HS % 2 != 0) continue;  // rope rotates pairs: even head sizes only
    const std::string tag = "window " + std::to_string(layer.window) + " slope " + std::to_string(layer.alibi_slope) +
                            " theta " + std::to_string(layer.rope_theta) + " ";
    Rng rng(stream(3) + uint32_t(layer.window));
    const auto qkv = rng.normal(size_t(T) * 3 * C, 1.5f);
    Floats d_qkv(*be, qkv), d_full(*be, size_t(T) * C), d_lse(*be, size_t(NH) * T), d_out(*be, size_t(T) * C);
    be->attention_forward(d_full.get(), d_lse.get(), d_qkv.get(), 1, T, C, NH, layer);
    const auto full = d_full.host();
    for (const int shorter : {0, 1}) {
      Backend::KvAttention a;
      a.ring = layer.window + rows - shorter, a.window = layer.window, a.alibi_slope = layer.alibi_slope;
      const int half = HS / 2;
      std::vector<float> cos(size_t(T) * half), sin(size_t(T) * half);
      if (layer.rope_theta != 0.0f) rope_table(layer.rope_theta, half, 0, T, cos.data(), sin.data());
      Floats d_cos(*be, cos), d_sin(*be, sin);
      const std::vector<float> nan_cache(size_t(2) * a.ring * C, kNaN);
      Floats d_k(*be, nan_cache), d_v(*be, nan_cache);
      std::vector<int32_t> pos(static_cast<size_t>(T)), slots(static_cast<size_t>(T), 1);
      for (int t = 0; t < T; ++t) pos[size_t(t)] = t;
      Ints d_pos(*be, pos), d_slot(*be, slots);
      auto run = [&](int first, int n) {
        const size_t row = size_t(first);
        if (layer.rope_theta != 0.0f) a.rope_cos = d_cos.get() + row * half, a.rope_sin = d_sin.get() + row * half;
        be->kv_cache_write(d_k.get(), d_v.get(), d_qkv.get() + row * 3 * C, d_slot.get() + row, d_pos.get() + row, n, C,
                           NH, a);
        be->attention_kv_forward(d_out.get() + row * C, d_qkv.get() + row * 3 * C, d_k.get(), d_v.get(),
                                 d_slot.get() + row, d_pos.get() + row, n, C, NH, a);
      };
      int t = 0;
      for (; t + rows <= T - 5; t += rows) run(t, rows);
      for (; t < T; ++t) run(t, 1);
      if (shorter == 0) {
        expect_close(tag + "through the ring vs attention_forward", d_out.host(), full, fp32_tol(T + HS, full));
        continue;
      }
      // The key a short ring loses is the window's farthest: under a bias of slope * window >= 10 its weight is below
      // e^-10 of the nearest key's, too little to show.
      if (layer.alibi_slope * float(layer.window) >= 10.0f) continue;
      const auto got = d_out.host();
      double worst = 0.0;
      for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, double(std::fabs(got[i] - full[i])));
      EXPECT_GT(worst, 1e-3) << tag << "a ring one row short gave attention_forward's output";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, OpsKvCache,
                         testing::Values(KvShape{60, 4, 37}, KvShape{20, 4, 9}, KvShape{128, 2, 150}), kv_shape_name);

}  // namespace
}  // namespace ember
