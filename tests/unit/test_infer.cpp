// The inference engine on the CPU backend: KV-cache logits against GPT::forward's full recomputation, token by token;
// batched sequences against the same sequences alone; the sampler's choices and distribution; streaming text with
// stop sequences and UTF-8; and the engine's scheduling (queue, chunked prefill, context, cancel, timeout, shutdown).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/philox.h"
#include "infer/engine.h"
#include "infer/kv_model.h"
#include "infer/sampler.h"
#include "infer/text_stream.h"
#include "model/gpt.h"

namespace ember {
namespace {

// Head size 16 (not a multiple of the CPU attention's 16-lane padding would also do; 3 heads of 16 keep it small).
ModelConfig infer_config() {
  ModelConfig c;
  c.n_layer = 2;
  c.n_head = 3;
  c.n_embd = 48;
  c.block_size = 40;
  c.vocab_size = 256;
  return c;
}

std::vector<int32_t> random_tokens(size_t n, int V, uint32_t step) {
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

float max_abs_diff(const float* a, const float* b, size_t n) {
  float d = 0.0f;
  for (size_t i = 0; i < n; ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}
float max_abs(const std::vector<float>& a) {
  float m = 0.0f;
  for (float x : a) m = std::max(m, std::fabs(x));
  return m;
}

// The cached path and full recomputation run the same ops but for attention (a per-row kernel against the blocked
// flash kernel) and GEMMs of other row counts (OpenBLAS may block them differently): only summation orders differ.
// Over 2 layers of sums of at most 4C = 192 products, fp32 reorderings move a logit by a few ulp of the largest
// magnitudes involved; 2e-5 relative to the largest logit is about 170 ulp, and a wrong position, slot or mask moves
// logits by whole units.
constexpr float kRelTol = 2e-5f;

TEST(KvModel, PrefillThenDecodeEqualsFullRecomputation) {
  Fixture f;
  const int V = f.config.vocab_size, T = f.config.block_size, P = 9;
  auto kv = f.kv(KvModelShape{1, T, T, T});
  const std::vector<int32_t> tokens = random_tokens(size_t(T), V, 1);
  // Prefill P tokens in one step, asking for the logits of every row.
  std::vector<int32_t> slots(static_cast<size_t>(P), 0), pos(static_cast<size_t>(P));
  std::vector<int> rows(static_cast<size_t>(P));
  for (int i = 0; i < P; ++i) pos[size_t(i)] = rows[size_t(i)] = i;
  std::vector<float> logits(size_t(P) * V);
  kv->forward(tokens.data(), slots.data(), pos.data(), P, rows.data(), P, logits.data());
  float worst = 0.0f;
  for (int i = 0; i < P; ++i) {
    const std::vector<float> ref = f.full_logits(tokens, i + 1);
    const float d = max_abs_diff(logits.data() + size_t(i) * V, ref.data(), size_t(V));
    EXPECT_LE(d, kRelTol * max_abs(ref)) << "prefill row " << i;
    worst = std::max(worst, d / max_abs(ref));
  }
  // Then one token per step up to the end of the context.
  for (int t = P; t < T; ++t) {
    const int32_t slot = 0, p = t;
    const int row = 0;
    kv->forward(&tokens[size_t(t)], &slot, &p, 1, &row, 1, logits.data());
    const std::vector<float> ref = f.full_logits(tokens, t + 1);
    const float d = max_abs_diff(logits.data(), ref.data(), size_t(V));
    EXPECT_LE(d, kRelTol * max_abs(ref)) << "decode position " << t;
    worst = std::max(worst, d / max_abs(ref));
  }
  RecordProperty("worst_relative_diff", std::to_string(worst));
  printf("KV cache vs full recomputation: worst |diff| / max|logit| = %.3g (tolerance %.1g)\n", worst, kRelTol);
}

TEST(KvModel, SequencesInOneStepEqualEachAlone) {
  // Three sequences in slots 2, 0, 1 of a 3-slot cache, advanced together with uneven prefill chunks, against each
  // run alone in slot 0 of its own cache.
  Fixture f;
  const int V = f.config.vocab_size, T = f.config.block_size;
  const std::vector<std::vector<int32_t>> seqs = {random_tokens(30, V, 2), random_tokens(25, V, 3),
                                                  random_tokens(35, V, 4)};
  const int slot_of[3] = {2, 0, 1};
  auto together = f.kv(KvModelShape{3, 3 * T, 3, T});
  std::vector<int> done(3, 0);
  std::map<std::pair<int, int>, std::vector<float>> batched;  // (sequence, position) -> logits
  const int chunk[3] = {7, 1, 12};
  while (done[0] < 30 || done[1] < 25 || done[2] < 35) {
    std::vector<int32_t> tok, slot, pos;
    std::vector<int> rows;
    std::vector<std::pair<int, int>> keys;
    for (int s = 0; s < 3; ++s) {
      const int n = std::min(chunk[s], int(seqs[s].size()) - done[s]);
      for (int k = 0; k < n; ++k) {
        tok.push_back(seqs[s][size_t(done[s] + k)]);
        slot.push_back(slot_of[s]);
        pos.push_back(done[s] + k);
      }
      if (n > 0) {
        rows.push_back(int(tok.size()) - 1);
        keys.emplace_back(s, done[s] + n - 1);
      }
      done[s] += n;
    }
    std::vector<float> logits(rows.size() * V);
    together->forward(tok.data(), slot.data(), pos.data(), int(tok.size()), rows.data(), int(rows.size()),
                      logits.data());
    for (size_t j = 0; j < keys.size(); ++j)
      batched[keys[j]].assign(logits.begin() + ptrdiff_t(j * V), logits.begin() + ptrdiff_t((j + 1) * V));
  }
  for (int s = 0; s < 3; ++s) {
    auto alone = f.kv(KvModelShape{1, T, 1, T});
    std::vector<float> logits(static_cast<size_t>(V));
    for (int t = 0; t < int(seqs[s].size()); ++t) {
      const int32_t slot = 0, p = t;
      const int row = 0;
      alone->forward(&seqs[s][size_t(t)], &slot, &p, 1, &row, 1, logits.data());
      auto it = batched.find({s, t});
      if (it == batched.end()) continue;  // a position inside a prefill chunk: no logits asked for
      EXPECT_LE(max_abs_diff(it->second.data(), logits.data(), size_t(V)), kRelTol * max_abs(logits))
          << "sequence " << s << " position " << t;
    }
  }
}

TEST(KvModel, Bf16DecodeEqualsBf16PrefillAndStaysNearFp32) {
  // Under matmul precision bf16, decoding one row per step (the CPU backend's streaming bf16 kernels) and prefilling
  // all 40 rows in one step (its general GEMM path) round the same GEMM inputs to bf16 and differ only in summation
  // order: kRelTol again. Against fp32 they differ by bf16 rounding, 2^-9 relative per GEMM input: at GPT-2's weight
  // scale that moves logits by about 0.2% of the largest, so 2% allows for 10x that, while a weight left uncast or a
  // wrong row moves them by their own size.
  Fixture f;
  f.gpt.init_weights(5);  // GPT-2's own scale: the 8x weights amplify any rounding (0.37 for GPT's own bf16 forward)
  const int V = f.config.vocab_size, T = f.config.block_size;
  const std::vector<int32_t> tokens = random_tokens(size_t(T), V, 9);
  std::vector<int32_t> slots(static_cast<size_t>(T), 0), pos(static_cast<size_t>(T));
  std::vector<int> rows(static_cast<size_t>(T));
  for (int i = 0; i < T; ++i) pos[size_t(i)] = rows[size_t(i)] = i;
  auto fp32 = f.kv(KvModelShape{1, T, T, T});
  std::vector<float> ref(size_t(T) * V), prefill(size_t(T) * V), decode(size_t(T) * V);
  fp32->forward(tokens.data(), slots.data(), pos.data(), T, rows.data(), T, ref.data());
  f.backend->set_matmul_precision(MatmulPrecision::bf16);
  auto bf16 = f.kv(KvModelShape{1, T, T, T});
  ASSERT_TRUE(bf16->bf16_storage());
  bf16->forward(tokens.data(), slots.data(), pos.data(), T, rows.data(), T, prefill.data());
  for (int t = 0; t < T; ++t) {
    const int row = 0;
    bf16->forward(&tokens[size_t(t)], &slots[0], &pos[size_t(t)], 1, &row, 1, decode.data() + size_t(t) * V);
  }
  f.backend->set_matmul_precision(MatmulPrecision::fp32);
  const float scale = max_abs(ref);
  float to_prefill = 0.0f, to_fp32 = 0.0f;
  for (int t = 0; t < T; ++t) {
    to_prefill =
        std::max(to_prefill, max_abs_diff(decode.data() + size_t(t) * V, prefill.data() + size_t(t) * V, size_t(V)));
    to_fp32 = std::max(to_fp32, max_abs_diff(decode.data() + size_t(t) * V, ref.data() + size_t(t) * V, size_t(V)));
  }
  EXPECT_LE(to_prefill, kRelTol * scale);
  EXPECT_LE(to_fp32, 0.02f * scale);
  EXPECT_GT(to_fp32, 0.0f);  // bf16 did round something
  printf("bf16 KV decode vs bf16 prefill: %.3g, vs fp32: %.3g of the largest logit\n", to_prefill / scale,
         to_fp32 / scale);
}

TEST(Sampler, GreedyTopKAndTopPChooseTheMostLikely) {
  Sampler s;
  const std::vector<float> logits = {0.5f, 2.0f, 2.0f, -1.0f, 1.0f};
  SamplingParams greedy{0.0f, 0, 1.0f, 1};
  EXPECT_EQ(s.sample(logits.data(), 5, greedy, 0), 1);  // ties go to the lower id
  EXPECT_EQ(s.sample(logits.data(), 1, greedy, 0), 0);  // only the first candidate
  for (uint64_t i = 0; i < 50; ++i) {
    EXPECT_EQ(s.sample(logits.data(), 5, SamplingParams{1.0f, 1, 1.0f, i}, i), 1);
    EXPECT_EQ(s.sample(logits.data(), 5, SamplingParams{1.0f, 0, 1e-6f, i}, i), 1);
    const int32_t t = s.sample(logits.data(), 5, SamplingParams{1.0f, 2, 1.0f, i}, i);
    EXPECT_TRUE(t == 1 || t == 2);
  }
}

TEST(Sampler, FrequenciesFollowTheDistribution) {
  // p = (0.5, 0.3, 0.15, 0.05). Plain sampling, top_k = 2 (renormalised 0.625, 0.375) and top_p = 0.9 (the first
  // three, renormalised over 0.95). 20000 draws: a frequency's standard deviation is at most 0.0036, so 0.015 is
  // over 4 sigma.
  Sampler s;
  const std::vector<double> p = {0.5, 0.3, 0.15, 0.05};
  std::vector<float> logits;
  for (double x : p) logits.push_back(float(std::log(x)));
  auto freq = [&](SamplingParams params) {
    std::vector<double> f(4, 0.0);
    for (uint64_t i = 0; i < 20000; ++i) f[size_t(s.sample(logits.data(), 4, params, i))] += 1.0 / 20000;
    return f;
  };
  const std::vector<double> plain = freq(SamplingParams{1.0f, 0, 1.0f, 3});
  for (int j = 0; j < 4; ++j) EXPECT_NEAR(plain[size_t(j)], p[size_t(j)], 0.015) << j;
  const std::vector<double> topk = freq(SamplingParams{1.0f, 2, 1.0f, 4});
  EXPECT_NEAR(topk[0], 0.625, 0.015);
  EXPECT_NEAR(topk[1], 0.375, 0.015);
  EXPECT_EQ(topk[2] + topk[3], 0.0);
  const std::vector<double> topp = freq(SamplingParams{1.0f, 0, 0.9f, 5});
  for (int j = 0; j < 3; ++j) EXPECT_NEAR(topp[size_t(j)], p[size_t(j)] / 0.95, 0.015) << j;
  EXPECT_EQ(topp[3], 0.0);
  // Temperature 0.5 squares the odds: p^2 normalised.
  const std::vector<double> cold = freq(SamplingParams{0.5f, 0, 1.0f, 6});
  double z = 0.0;
  for (double x : p) z += x * x;
  for (int j = 0; j < 4; ++j) EXPECT_NEAR(cold[size_t(j)], p[size_t(j)] * p[size_t(j)] / z, 0.015) << j;
  // The same seed and index give the same token; the seed matters.
  std::vector<int32_t> a, b, c;
  for (uint64_t i = 0; i < 64; ++i) {
    a.push_back(s.sample(logits.data(), 4, SamplingParams{1.0f, 0, 1.0f, 7}, i));
    b.push_back(s.sample(logits.data(), 4, SamplingParams{1.0f, 0, 1.0f, 7}, i));
    c.push_back(s.sample(logits.data(), 4, SamplingParams{1.0f, 0, 1.0f, 8}, i));
  }
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

std::string stream_bytes(const std::string& bytes, std::vector<std::string> stop, bool* stopped = nullptr) {
  ByteTokenizer bytes_tok;
  TextStream ts(bytes_tok, std::move(stop));
  std::string out;
  for (unsigned char ch : bytes) {
    const std::string piece = ts.push(int32_t(ch));
    // Everything released is whole UTF-8 at once: no piece ends inside a character.
    if (!piece.empty()) EXPECT_LT(static_cast<unsigned char>(piece.back()) & 0xC0, 0xC0) << "piece ends in a lead byte";
    out += piece;
    if (ts.stopped()) break;
  }
  if (stopped) *stopped = ts.stopped();
  return out + ts.finish();
}

TEST(TextStream, StopSequencesAcrossTokens) {
  bool stopped = false;
  EXPECT_EQ(stream_bytes("hello world\nend", {"\n"}, &stopped), "hello world");
  EXPECT_TRUE(stopped);
  EXPECT_EQ(stream_bytes("abcabd", {"abd"}, &stopped), "abc");  // "ab" held, then released when "c" follows
  EXPECT_TRUE(stopped);
  EXPECT_EQ(stream_bytes("one two three", {"xyz", "two"}, &stopped), "one ");
  EXPECT_EQ(stream_bytes("ab", {"abc"}, &stopped), "ab");  // a held prefix comes out at the end
  EXPECT_FALSE(stopped);
  EXPECT_EQ(stream_bytes("plain", {}, &stopped), "plain");
}

TEST(TextStream, Utf8IsReleasedWholeAndRepairedAsPythonDoes) {
  EXPECT_EQ(stream_bytes("caf\xC3\xA9 \xF0\x9F\x98\x80!", {}), "caf\xC3\xA9 \xF0\x9F\x98\x80!");
  // Ill-formed bytes become U+FFFD, one per maximal subpart (bytes.decode("utf-8", "replace")).
  EXPECT_EQ(stream_bytes("a\xFF"
                         "b",
                         {}),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(stream_bytes("a\xE2\x82", {}), "a\xEF\xBF\xBD");  // truncated at the end: one
  EXPECT_EQ(stream_bytes("\xE2\x82"
                         "A",
                         {}),
            "\xEF\xBF\xBD"
            "A");                                                                       // cut short by "A": one
  EXPECT_EQ(stream_bytes("\xED\xA0\x80", {}), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate: three
  EXPECT_EQ(stream_bytes("\xC0\xAF", {}), "\xEF\xBF\xBD\xEF\xBF\xBD");                  // overlong: two
}

// The engine over a KvModel of the fixture's weights, with `slots` slots and steps of `step_tokens` rows.
struct EngineFixture : Fixture {
  ByteTokenizer tokenizer;
  std::unique_ptr<KvModel> model;
  std::unique_ptr<Engine> engine;
  EngineFixture(int slots, int step_tokens, int max_queue = 64) {
    model = kv(KvModelShape{slots, step_tokens, slots, 0});
    engine = std::make_unique<Engine>(*model, tokenizer, EngineOptions{max_queue, step_tokens});
  }
};

struct Outcome {
  std::vector<int32_t> tokens;
  std::string text;
  bool done = false;
  FinishReason reason = FinishReason::stop;
  int prompt_tokens = 0, completion_tokens = 0, events_after_done = 0;
};

GenerationRequest request_for(Outcome& out, std::vector<int32_t> prompt, int max_tokens, SamplingParams sp = {}) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling = sp;
  r.on_event = [&out](const GenerationEvent& e) {
    if (out.done) out.events_after_done++;
    if (e.token >= 0) out.tokens.push_back(e.token);
    out.text += e.text;
    out.done = e.done;
    out.reason = e.reason;
    out.prompt_tokens = e.prompt_tokens;
    out.completion_tokens = e.completion_tokens;
    return true;
  };
  return r;
}

void run_until_idle(Engine& e) {
  while (e.step()) {
  }
}

TEST(Engine, ConcurrentRequestsGiveTheTokensEachGetsAlone) {
  // Seven requests with prompts up to 30 tokens and 2 slots, 8 rows a step: they queue, prefill in chunks beside
  // others' decoding, and finish at different times. Greedy and seeded sampling alike must give each request the
  // tokens it gets alone on a 1-slot engine.
  const int V = 256;
  std::vector<std::vector<int32_t>> prompts;
  for (uint32_t i = 0; i < 7; ++i) prompts.push_back(random_tokens(3 + 4 * i, V, 20 + i));
  auto params = [](size_t i) { return SamplingParams{i % 2 ? 0.9f : 0.0f, int(i % 3) * 5, 0.95f, 100 + i}; };
  std::vector<Outcome> alone(prompts.size()), together(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    EngineFixture f(1, 40);
    ASSERT_EQ(f.engine->submit(request_for(alone[i], prompts[i], 6 + int(i), params(i))), Engine::Submit::accepted);
    run_until_idle(*f.engine);
  }
  EngineFixture f(2, 8);
  for (size_t i = 0; i < prompts.size(); ++i)
    ASSERT_EQ(f.engine->submit(request_for(together[i], prompts[i], 6 + int(i), params(i))), Engine::Submit::accepted);
  run_until_idle(*f.engine);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_TRUE(together[i].done) << i;
    EXPECT_EQ(together[i].reason, FinishReason::length) << i;
    EXPECT_EQ(together[i].tokens, alone[i].tokens) << "request " << i;
    EXPECT_EQ(together[i].completion_tokens, 6 + int(i));
    EXPECT_EQ(together[i].prompt_tokens, int(prompts[i].size()));
    EXPECT_EQ(together[i].events_after_done, 0);
  }
  const Engine::Stats st = f.engine->stats();
  EXPECT_EQ(st.requests_finished, prompts.size());
  EXPECT_EQ(st.running, 0);
  EXPECT_EQ(st.queued, 0);
}

TEST(Engine, GreedyTokensEqualFullRecomputation) {
  EngineFixture f(1, 40);
  const std::vector<int32_t> prompt = random_tokens(5, 256, 40);
  Outcome out;
  f.engine->submit(request_for(out, prompt, 20, SamplingParams{0.0f, 0, 1.0f, 0}));
  run_until_idle(*f.engine);
  std::vector<int32_t> seq = prompt;
  for (int32_t t : out.tokens) {
    const std::vector<float> ref = f.full_logits(seq, int(seq.size()));
    EXPECT_EQ(t, int32_t(std::max_element(ref.begin(), ref.end()) - ref.begin()));
    seq.push_back(t);
  }
  EXPECT_EQ(out.tokens.size(), 20u);
}

TEST(Engine, ContextLengthEndsOrShifts) {
  EngineFixture f(1, 40);
  const int T = f.config.block_size;
  Outcome ends, shifts, none, full;
  f.engine->submit(request_for(ends, random_tokens(size_t(T - 3), 256, 50), 100));
  GenerationRequest r = request_for(shifts, random_tokens(size_t(T + 7), 256, 51), 3 * T);
  r.context_shift = true;
  f.engine->submit(std::move(r));
  f.engine->submit(request_for(none, random_tokens(4, 256, 52), 0));
  f.engine->submit(request_for(full, random_tokens(size_t(T), 256, 53), 10));
  run_until_idle(*f.engine);
  EXPECT_EQ(ends.reason, FinishReason::length);
  EXPECT_EQ(ends.completion_tokens, 3);  // prompt + completion fill the context, as transformers counts it
  EXPECT_EQ(shifts.reason, FinishReason::length);
  EXPECT_EQ(shifts.completion_tokens, 3 * T);
  EXPECT_EQ(none.completion_tokens, 0);
  EXPECT_TRUE(none.done);
  EXPECT_EQ(full.completion_tokens, 0);
  EXPECT_EQ(full.reason, FinishReason::length);
  // Without context_shift a prompt longer than the context is refused up front.
  Outcome refused;
  EXPECT_THROW(f.engine->submit(request_for(refused, random_tokens(size_t(T + 1), 256, 54), 1)), Error);
  EXPECT_THROW(f.engine->submit(request_for(refused, {}, 1)), Error);
  EXPECT_THROW(f.engine->submit(request_for(refused, {256}, 1)), Error);
  EXPECT_THROW(f.engine->submit(request_for(refused, {1}, -1)), Error);
}

TEST(Engine, StopSequenceEndsTheText) {
  // Find what greedy decoding writes, then stop on a piece of it.
  EngineFixture f(1, 40);
  const std::vector<int32_t> prompt = random_tokens(6, 128, 60);  // ASCII
  Outcome first;
  f.engine->submit(request_for(first, prompt, 12, SamplingParams{0.0f, 0, 1.0f, 0}));
  run_until_idle(*f.engine);
  ByteTokenizer bytes;
  const std::string all = bytes.decode(first.tokens);
  ASSERT_GE(all.size(), 8u);
  const std::string stop = all.substr(5, 2);
  Outcome second;
  GenerationRequest r = request_for(second, prompt, 12, SamplingParams{0.0f, 0, 1.0f, 0});
  r.stop = {stop};
  f.engine->submit(std::move(r));
  run_until_idle(*f.engine);
  EXPECT_EQ(second.reason, FinishReason::stop);
  // The text before the stop sequence, as TextStream repairs any ill-formed UTF-8 of the model's bytes.
  TextStream plain(bytes, {});
  std::string expected;
  for (unsigned char ch : all.substr(0, all.find(stop))) expected += plain.push(ch);
  EXPECT_EQ(second.text, expected + plain.finish());
}

TEST(Engine, QueueLimitCancelTimeoutAndShutdown) {
  EngineFixture f(1, 40, /*max_queue=*/2);
  Outcome a, b, c, cancelled, late;
  EXPECT_EQ(f.engine->submit(request_for(a, {1, 2, 3}, 5)), Engine::Submit::accepted);
  EXPECT_EQ(f.engine->submit(request_for(b, {1, 2, 3}, 5)), Engine::Submit::accepted);
  EXPECT_EQ(f.engine->submit(request_for(c, {1, 2, 3}, 5)), Engine::Submit::queue_full);
  run_until_idle(*f.engine);
  EXPECT_TRUE(a.done && b.done);
  // A consumer that goes away after two tokens frees its slot for the next request.
  GenerationRequest r = request_for(cancelled, {4, 5}, 30);
  int seen = 0;
  r.on_event = [&](const GenerationEvent&) { return ++seen < 2; };
  f.engine->submit(std::move(r));
  f.engine->submit(request_for(c, {1, 2, 3}, 4));
  run_until_idle(*f.engine);
  EXPECT_EQ(seen, 2);
  EXPECT_TRUE(c.done);
  EXPECT_EQ(c.completion_tokens, 4);
  // A deadline already passed.
  GenerationRequest t = request_for(late, {7}, 5);
  t.deadline = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  f.engine->submit(std::move(t));
  run_until_idle(*f.engine);
  EXPECT_EQ(late.reason, FinishReason::timeout);
  // stop without draining ends what runs and what waits; nothing is taken afterwards.
  Outcome running, waiting, after;
  f.engine->submit(request_for(running, {1, 2}, 30));
  f.engine->submit(request_for(waiting, {3, 4}, 30));
  f.engine->step();
  f.engine->stop(/*drain=*/false);
  EXPECT_EQ(f.engine->submit(request_for(after, {1}, 1)), Engine::Submit::stopping);
  f.engine->run();  // returns once everything has ended
  EXPECT_EQ(running.reason, FinishReason::shutdown);
  EXPECT_EQ(waiting.reason, FinishReason::shutdown);
  EXPECT_TRUE(running.done && waiting.done);
  EXPECT_EQ(running.completion_tokens, 1);
}

TEST(Engine, CancelFlagAndAllOrNothingSubmit) {
  EngineFixture f(1, 40, /*max_queue=*/3);
  // A request whose flag is set while it runs ends at the next step without another event; one whose flag is set
  // while it waits never takes a slot; the request behind them runs.
  auto flag = std::make_shared<std::atomic<bool>>(false);
  Outcome running, waiting, after;
  int running_events = 0, waiting_events = 0;
  GenerationRequest a = request_for(running, {1, 2}, 30);
  a.cancelled = flag;
  a.on_event = [&](const GenerationEvent&) {
    ++running_events;
    return true;
  };
  GenerationRequest b = request_for(waiting, {3}, 30);
  b.cancelled = flag;
  b.on_event = [&](const GenerationEvent&) {
    ++waiting_events;
    return true;
  };
  ASSERT_EQ(f.engine->submit(std::move(a)), Engine::Submit::accepted);
  ASSERT_EQ(f.engine->submit(std::move(b)), Engine::Submit::accepted);
  ASSERT_EQ(f.engine->submit(request_for(after, {4, 5}, 3)), Engine::Submit::accepted);
  f.engine->step();
  f.engine->step();
  EXPECT_EQ(running_events, 2);
  flag->store(true);
  run_until_idle(*f.engine);
  EXPECT_EQ(running_events, 2);
  EXPECT_EQ(waiting_events, 0);
  EXPECT_TRUE(after.done);
  EXPECT_EQ(after.completion_tokens, 3);
  EXPECT_EQ(f.engine->stats().requests_finished, 3u);
  // Three choices do not fit beside two queued requests in a queue of three: none is queued.
  Outcome q1, q2, c1, c2, c3;
  f.engine->submit(request_for(q1, {1}, 1));
  f.engine->submit(request_for(q2, {1}, 1));
  std::vector<GenerationRequest> choices;
  for (Outcome* o : {&c1, &c2, &c3}) choices.push_back(request_for(*o, {2}, 1));
  EXPECT_EQ(f.engine->submit_all(std::move(choices)), Engine::Submit::queue_full);
  EXPECT_EQ(f.engine->stats().queued, 2);
  run_until_idle(*f.engine);
  EXPECT_TRUE(q1.done && q2.done);
  EXPECT_FALSE(c1.done || c2.done || c3.done);
}

TEST(Engine, DrainingStopFinishesEverything) {
  EngineFixture f(2, 8);
  std::vector<Outcome> outs(5);
  for (auto& o : outs) f.engine->submit(request_for(o, {1, 2, 3}, 7));
  f.engine->stop(/*drain=*/true);
  f.engine->run();
  for (const auto& o : outs) {
    EXPECT_TRUE(o.done);
    EXPECT_EQ(o.reason, FinishReason::length);
    EXPECT_EQ(o.completion_tokens, 7);
  }
}

}  // namespace
}  // namespace ember
