// The continuous-batching engine (implementation). A sequence's window of tokens is split into the part already in
// its slot's cache and the part still to run: one token while decoding, the prompt while prefilling. Every step runs
// the decoding sequences first, one row each, then prefill chunks in arrival order up to the step's row budget, so a
// long prompt never stalls the tokens of the others for more than one step's worth of rows.
#include "infer/engine.h"

#include <algorithm>

#include "core/error.h"

namespace ember {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::stop:
      return "stop";
    case FinishReason::length:
      return "length";
    case FinishReason::cancelled:
      return "cancelled";
    case FinishReason::timeout:
      return "timeout";
    case FinishReason::shutdown:
      return "shutdown";
  }
  return "?";
}

struct Engine::Sequence {
  Sequence(GenerationRequest r, const Tokenizer& tokenizer, int slot_index, uint64_t seq_id)
      : request(std::move(r)), text(tokenizer, request.stop), slot(slot_index), id(seq_id) {
    window = request.prompt;
    prompt_tokens = int(request.prompt.size());
  }
  GenerationRequest request;
  TextStream text;
  int slot;
  uint64_t id;                  // arrival order
  std::vector<int32_t> window;  // the tokens the model sees, at positions base..base+size()-1
  int base = 0;                 // under a rolling context (KvModel::rolling_context) the position of window[0]
  int cached = 0;               // window[0..cached) are in the slot's cache
  int prompt_tokens = 0, generated = 0;
  int ran = 0;  // rows run for it in the current step
};

Engine::Engine(KvModel& model, const Tokenizer& tokenizer, EngineOptions options)
    : model_(model), tokenizer_(tokenizer), options_(options), slots_(size_t(model.shape().max_slots)) {
  const KvModelShape& s = model.shape();
  EMBER_ASSERT(options_.max_queue >= 0, "max_queue must not be negative");
  EMBER_ASSERT(options_.max_step_tokens >= s.max_slots && options_.max_step_tokens <= s.max_rows,
               "max_step_tokens must be in [max_slots, the model's max_rows]");
  EMBER_ASSERT(s.max_logit_rows >= s.max_slots, "the model must compute logits for every slot in one step");
  EMBER_ASSERT(tokenizer.vocab_size() <= model.config().vocab_size, "the tokenizer has more ids than the model");
}

Engine::~Engine() = default;

void Engine::check(const GenerationRequest& request) const {
  const int T = max_T(), V = tokenizer_.vocab_size();
  if (request.prompt.empty())
    throw_error("generation request: the prompt has no tokens", "an empty text starts a document: pass end-of-text");
  if (!request.context_shift && int64_t(request.prompt.size()) > T)
    throw_error("generation request: the prompt has " + std::to_string(request.prompt.size()) +
                    " tokens, more than the context of " + std::to_string(T),
                "shorten the prompt");
  for (int32_t t : request.prompt)
    if (t < 0 || t >= V)
      throw_error("generation request: prompt token " + std::to_string(t) + " is not in [0, " + std::to_string(V) + ")",
                  "encode prompts with the model's tokenizer");
  if (request.max_tokens < 0)
    throw_error("generation request: max_tokens " + std::to_string(request.max_tokens) + " is negative",
                "ask for 0 or more tokens");
  EMBER_ASSERT(bool(request.on_event), "a generation request needs an on_event callback");
}

Engine::Submit Engine::submit(GenerationRequest request) {
  std::vector<GenerationRequest> one;
  one.push_back(std::move(request));
  return submit_all(std::move(one));
}

Engine::Submit Engine::submit_all(std::vector<GenerationRequest> requests) {
  for (const GenerationRequest& r : requests) check(r);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return Submit::stopping;
    if (queue_.size() + requests.size() > size_t(options_.max_queue)) return Submit::queue_full;
    for (GenerationRequest& r : requests) queue_.push_back(std::move(r));
    stats_.queued = int(queue_.size());
  }
  wake_.notify_one();
  return Submit::accepted;
}

void Engine::stop(bool drain) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    drain_ = drain_ && drain;
  }
  wake_.notify_all();
}

void Engine::abandon() {
  std::deque<GenerationRequest> queued;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    queued.swap(queue_);
  }
  for (auto& slot : slots_) slot.reset();
}

Engine::Stats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

bool Engine::deliver(Sequence& seq, const GenerationEvent& e) {
  if (seq.request.on_event(e)) return true;
  finish(seq, FinishReason::cancelled);
  return false;
}

void Engine::finish(Sequence& seq, FinishReason reason) {
  if (reason != FinishReason::cancelled) {
    GenerationEvent e;
    e.text = seq.text.finish();
    e.done = true;
    e.reason = reason;
    e.prompt_tokens = seq.prompt_tokens;
    e.completion_tokens = seq.generated;
    seq.request.on_event(e);  // the last event: the consumer's answer changes nothing
  }
  const int slot = seq.slot;
  slots_[size_t(slot)].reset();  // seq is gone from here on
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.running--;
  stats_.requests_finished++;
}

// Where a window has outgrown the context (more than max_T tokens): with learned positions, keep its last half and
// run it again from position 0; under a rolling context only its cached tokens beyond the last max_T are let go, and
// its positions go on (the caches hold what attention still reads).
void Engine::shift_window(Sequence& s) const {
  const int T = max_T();
  if (model_.rolling_context()) {
    const int drop = std::min(int(s.window.size()) - T, s.cached);
    s.window.erase(s.window.begin(), s.window.begin() + drop);
    s.base += drop, s.cached -= drop;
    return;
  }
  const size_t keep = size_t(std::max(1, T / 2));
  s.window.erase(s.window.begin(), s.window.end() - ptrdiff_t(keep));
  s.cached = 0;
}

void Engine::admit() {
  const auto now = std::chrono::steady_clock::now();
  const int T = max_T();
  for (;;) {
    int slot = 0;
    while (slot < int(slots_.size()) && slots_[size_t(slot)]) ++slot;
    GenerationRequest request;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_ && !drain_) break;
      if (queue_.empty() || slot == int(slots_.size())) break;
      request = std::move(queue_.front());
      queue_.pop_front();
      stats_.queued = int(queue_.size());
      stats_.running++;
    }
    if (request.cancelled && request.cancelled->load()) {  // gone before it started: no slot, no event
      std::lock_guard<std::mutex> lock(mutex_);
      stats_.running--;
      stats_.requests_finished++;
      continue;
    }
    slots_[size_t(slot)] = std::make_unique<Sequence>(std::move(request), tokenizer_, slot, admitted_++);
    Sequence& s = *slots_[size_t(slot)];
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stats_.prompt_tokens += uint64_t(s.prompt_tokens);
    }
    // A request that can have no token ends here, and its slot goes to the next one at once.
    if (now > s.request.deadline)
      finish(s, FinishReason::timeout);
    else if (s.request.max_tokens == 0 || (!s.request.context_shift && int(s.window.size()) >= T))
      finish(s, FinishReason::length);
    else if (int(s.window.size()) > T)
      shift_window(s);
  }
  std::deque<GenerationRequest> dropped;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!(stopping_ && !drain_)) return;
    dropped.swap(queue_);
    stats_.queued = 0;
    stats_.requests_finished += dropped.size();
  }
  // Stopping without draining: nothing more runs, every request ends now.
  for (GenerationRequest& r : dropped)
    r.on_event(GenerationEvent{{}, -1, true, FinishReason::shutdown, int(r.prompt.size()), 0});
  for (auto& s : slots_)
    if (s) finish(*s, FinishReason::shutdown);
}

bool Engine::step() {
  // Sequences that end without running free their slots first, for the queue to take this step.
  const auto now = std::chrono::steady_clock::now();
  for (auto& s : slots_) {
    if (s && s->request.cancelled && s->request.cancelled->load())
      finish(*s, FinishReason::cancelled);
    else if (s && now > s->request.deadline)
      finish(*s, FinishReason::timeout);
  }
  admit();

  // This step's rows: decoding sequences first, then prefill chunks in arrival order.
  std::vector<Sequence*> order;
  for (auto& s : slots_)
    if (s) order.push_back(s.get());
  std::sort(order.begin(), order.end(), [](const Sequence* a, const Sequence* b) {
    const bool da = a->window.size() - size_t(a->cached) == 1, db = b->window.size() - size_t(b->cached) == 1;
    return da != db ? da : a->id < b->id;
  });
  row_tokens_.clear();
  row_slots_.clear();
  row_pos_.clear();
  logit_rows_.clear();
  logit_slots_.clear();
  int budget = options_.max_step_tokens;
  for (Sequence* s : order) {
    const int pending = int(s->window.size()) - s->cached;
    s->ran = std::min(pending, budget);
    for (int k = 0; k < s->ran; ++k) {
      row_tokens_.push_back(s->window[size_t(s->cached + k)]);
      row_slots_.push_back(s->slot);
      row_pos_.push_back(s->base + s->cached + k);
    }
    budget -= s->ran;
    if (s->ran == pending) {  // the window is all cached after this step: its next token is sampled
      logit_rows_.push_back(int(row_tokens_.size()) - 1);
      logit_slots_.push_back(s->slot);
    }
  }
  if (row_tokens_.empty()) return false;

  const int V = model_.config().vocab_size, m = int(logit_rows_.size());
  logits_.resize(size_t(m) * V);
  model_.forward(row_tokens_.data(), row_slots_.data(), row_pos_.data(), int(row_tokens_.size()), logit_rows_.data(), m,
                 logits_.data());
  for (Sequence* s : order) s->cached += s->ran;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.steps++;
    stats_.generated_tokens += uint64_t(m);
  }

  const std::optional<int32_t> eot = tokenizer_.eot_id();
  const int T = max_T();
  for (int j = 0; j < m; ++j) {
    Sequence& s = *slots_[size_t(logit_slots_[size_t(j)])];
    const int32_t token = sampler_.sample(logits_.data() + size_t(j) * V, tokenizer_.vocab_size(), s.request.sampling,
                                          uint64_t(s.generated));
    s.generated++;
    if (s.request.stop_at_eot && eot && token == *eot) {
      finish(s, FinishReason::stop);
      continue;
    }
    GenerationEvent e;
    e.text = s.text.push(token);
    e.token = token;
    e.prompt_tokens = s.prompt_tokens;
    e.completion_tokens = s.generated;
    if (!deliver(s, e)) continue;
    s.window.push_back(token);
    if (s.text.stopped())
      finish(s, FinishReason::stop);
    else if (s.generated >= s.request.max_tokens)
      finish(s, FinishReason::length);
    else if (!s.request.context_shift && int(s.window.size()) >= T)
      finish(s, FinishReason::length);
    else if (int(s.window.size()) > T)
      shift_window(s);
  }
  return true;
}

void Engine::run() {
  try {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stopping_ || !queue_.empty() || stats_.running > 0; });
        if (stopping_ && drain_ && queue_.empty() && stats_.running == 0) return;
      }
      step();
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_ && !drain_ && queue_.empty() && stats_.running == 0) return;
    }
  } catch (...) {
    // A failed step (a backend error) ends every request, so that no consumer waits for events that never come.
    stop(false);
    try {
      step();
    } catch (...) {
    }
    throw;
  }
}

}  // namespace ember
