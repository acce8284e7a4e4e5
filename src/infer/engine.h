// The inference engine that `generate` and `serve` share: a queue of generation requests served by continuous
// batching over one KvModel. Each step runs one forward pass over every running sequence: one row for each that is
// decoding, and chunks of prompts being prefilled up to a budget of rows; a sequence joins as soon as a cache slot is
// free and leaves as soon as it finishes, without waiting for the others.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "infer/kv_model.h"
#include "infer/sampler.h"
#include "infer/text_stream.h"
#include "tokenizer/tokenizer.h"

namespace ember {

// Why a sequence ended, named as the OpenAI API names the first two: a stop sequence or the end-of-text token
// (stop), max_tokens or the context length (length), its consumer gone (cancelled), its deadline passed (timeout),
// the engine stopped without draining (shutdown).
enum class FinishReason { stop, length, cancelled, timeout, shutdown };
const char* finish_reason_name(FinishReason reason);  // "stop", "length", "cancelled", "timeout", "shutdown"

// What the engine tells a request's consumer after each of its tokens, and once at the end (done).
struct GenerationEvent {
  std::string text;    // text released by this token (TextStream); at the end, what was held back
  int32_t token = -1;  // the token sampled, or -1 in the final event
  bool done = false;
  FinishReason reason = FinishReason::stop;  // when done
  int prompt_tokens = 0, completion_tokens = 0;
};

struct GenerationRequest {
  std::vector<int32_t> prompt;  // 1 to max_T tokens, each below the tokenizer's vocab_size
  int max_tokens = 16;          // at most this many tokens are generated (0: finish at once, reason length)
  SamplingParams sampling;
  std::vector<std::string> stop;  // stop sequences: the text ends before the first to appear
  bool stop_at_eot = true;        // the tokenizer's end-of-text token ends the sequence (reason stop)
  // When the sequence fills the context (max_T positions): false ends it (reason length); true keeps its last max_T / 2
  // tokens, prefills them again from position 0 and goes on, as generate does for long outputs.
  bool context_shift = false;
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  // When set, the consumer may set it true at any time (from any thread) to end the request at the engine's next step,
  // queued or running, without more events: a client that went away before any token of its request.
  std::shared_ptr<const std::atomic<bool>> cancelled;
  // Called on the engine's thread after each token and once with done; must not block. Returning false cancels the
  // request (its consumer has gone): no more events, its slot is freed.
  std::function<bool(const GenerationEvent&)> on_event;
};

struct EngineOptions {
  int max_queue = 256;  // requests waiting for a slot, beyond which submit() refuses
  // Rows of one forward pass (prefill chunks plus decoded tokens), at least the model's max_slots. The KvModel's
  // shape must allow this many rows and max_slots logit rows.
  int max_step_tokens = 512;
};

class Engine {
 public:
  Engine(KvModel& model, const Tokenizer& tokenizer, EngineOptions options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  enum class Submit { accepted, queue_full, stopping };
  // Thread-safe. Queues a request (its prompt checked as GenerationRequest says: an ember::Error otherwise).
  Submit submit(GenerationRequest request);
  // Thread-safe. Queues all of them or, when they do not all fit in the queue, none (the choices of one API request).
  Submit submit_all(std::vector<GenerationRequest> requests);

  // Runs one forward pass over the queued and running sequences and delivers their events; false when there was
  // nothing to do. Called from one thread at a time (run() or a caller that drives the engine itself).
  bool step();
  // Steps until stop() has been called and its condition holds; sleeps while there is nothing to do.
  void run();
  // Thread-safe. From now on submit() refuses. drain = true: run() returns once every queued and running request has
  // finished; false: run() ends every one with reason shutdown at its next step and returns.
  void stop(bool drain);
  // After run() has ended (by an error): drops every queued and running request without an event, releasing what
  // their callbacks hold, so nothing outlives the consumers that run() left waiting.
  void abandon();

  struct Stats {
    int queued = 0, running = 0;
    uint64_t steps = 0, prompt_tokens = 0, generated_tokens = 0, requests_finished = 0;
  };
  Stats stats() const;  // thread-safe
  int max_T() const { return model_.shape().max_T; }
  int max_slots() const { return model_.shape().max_slots; }

 private:
  struct Sequence;
  void admit();                                           // queued requests into free slots
  void finish(Sequence& seq, FinishReason reason);        // the final event; frees the slot
  void check(const GenerationRequest& request) const;     // GenerationRequest's rules, as an ember::Error
  bool deliver(Sequence& seq, const GenerationEvent& e);  // on_event, cancelling on false
  void shift_window(Sequence& seq) const;                 // a window past max_T tokens, under context_shift

  KvModel& model_;
  const Tokenizer& tokenizer_;
  EngineOptions options_;
  Sampler sampler_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<GenerationRequest> queue_;           // guarded by mutex_
  bool stopping_ = false, drain_ = true;          // guarded by mutex_
  Stats stats_;                                   // guarded by mutex_
  std::vector<std::unique_ptr<Sequence>> slots_;  // engine thread only; null where free
  uint64_t admitted_ = 0;
  // One step's rows and logits, kept between steps.
  std::vector<int32_t> row_tokens_, row_slots_, row_pos_;
  std::vector<int> logit_rows_, logit_slots_;
  std::vector<float> logits_;
};

}  // namespace ember
