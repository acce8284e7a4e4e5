// The inference engine's scheduling over a KV model: concurrent requests against each alone, greedy tokens against
// full recomputation, the context limit, stop sequences, the queue limit, cancel, timeout, shutdown and draining.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "infer/engine.h"
#include "infer_test_util.h"
#include "model/gpt.h"
#include "tokenizer/tokenizer.h"

namespace ember {
namespace {

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

// Under rotary positions the context rolls (KvModel::rolling_context): a prompt longer than the context and three
// contexts of greedy tokens run on without recomputing, each token the argmax of a recomputation with every layer's
// window at max_T - 1 keys (the same weights at a longer block size).
TEST(Engine, RopeContextRollsOnWithoutRecomputing) {
  auto be = make_cpu_backend();
  ModelConfig c = infer_config();
  c.block_size = 16, c.position = PositionEncoding::rope;
  ModelConfig longer = c;
  longer.block_size = 128, longer.attention_windows = {c.block_size - 1, c.block_size - 1};
  GPT gpt(longer, *be, 1, longer.block_size, /*with_grads=*/false);
  gpt.init_weights(5);
  std::vector<float> params(gpt.table().total_numel());
  be->copy_to_host(params.data(), gpt.params(), params.size() * sizeof(float));
  for (float& x : params) x *= 8.0f;  // logits over several nats, as the Fixture's
  be->copy_to_device(gpt.params(), params.data(), params.size() * sizeof(float));
  KvModel kv(c, *be, KvModelShape{1, 8, 1, 0});
  be->copy_to_device(kv.params(), params.data(), params.size() * sizeof(float));
  ByteTokenizer tokenizer;
  Engine engine(kv, tokenizer, EngineOptions{4, 8});
  const std::vector<int32_t> prompt = random_tokens(size_t(c.block_size + 7), 256, 60);
  Outcome out;
  GenerationRequest r = request_for(out, prompt, 3 * c.block_size, SamplingParams{0.0f, 0, 1.0f, 0});
  r.context_shift = true;
  engine.submit(std::move(r));
  run_until_idle(engine);
  ASSERT_EQ(out.tokens.size(), size_t(3 * c.block_size));
  std::vector<int32_t> seq = prompt;
  seq.insert(seq.end(), out.tokens.begin(), out.tokens.end() - 1);
  gpt.forward(seq.data(), nullptr, 1, int(seq.size()));
  const int Vp = longer.padded_vocab_size();
  std::vector<float> logits(seq.size() * size_t(Vp));
  be->copy_to_host(logits.data(), gpt.logits().f32(), logits.size() * sizeof(float));
  for (size_t k = 0; k < out.tokens.size(); ++k) {
    const float* row = logits.data() + (prompt.size() - 1 + k) * size_t(Vp);
    EXPECT_EQ(out.tokens[k], int32_t(std::max_element(row, row + 256) - row)) << "generated token " << k;
  }
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

// abandon() (after a failed run) releases every queued and running request with what its callback holds, and
// delivers no event: the server relies on it to free connections before its event loop ends.
TEST(Engine, AbandonReleasesEveryRequestWithoutAnEvent) {
  EngineFixture f(1, 40);
  auto held = std::make_shared<int>(0);
  int events = 0;
  auto request = [&] {
    GenerationRequest r;
    r.prompt = {1, 2, 3};
    r.max_tokens = 50;
    r.on_event = [held, &events](const GenerationEvent&) {
      ++events;
      return true;
    };
    return r;
  };
  for (int i = 0; i < 3; ++i) ASSERT_EQ(f.engine->submit(request()), Engine::Submit::accepted);
  f.engine->step();  // one running, two queued
  const int before = events;
  EXPECT_EQ(held.use_count(), 4);
  f.engine->abandon();
  EXPECT_EQ(held.use_count(), 1);
  EXPECT_EQ(events, before);
  EXPECT_EQ(f.engine->submit(request()), Engine::Submit::stopping);
}

}  // namespace
}  // namespace ember
