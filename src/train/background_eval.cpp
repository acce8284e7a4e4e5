// Validation in a thread of its own (implementation).
#include "train/background_eval.h"

#include <utility>

#include "core/error.h"
#include "core/timer.h"

namespace ember {

BackgroundEval::BackgroundEval(const RunConfig& config, const Tokenizer& tokenizer, const TaskEval* task, GPT& model,
                               Backend& backend)
    : evaluator_(config, tokenizer), task_(task), model_(model), backend_(backend) {}

BackgroundEval::~BackgroundEval() {
  if (thread_.joinable()) thread_.join();  // bounded: an evaluation of eval.batches batches
}

void BackgroundEval::start(const float* params, size_t n, int64_t step, uint64_t tokens_seen, double elapsed_s,
                           bool with_task) {
  EMBER_ASSERT(!running(), "BackgroundEval::start while an evaluation runs");
  backend_.copy_to_device(model_.params(), params, n * sizeof(float));
  result_ = Result{};
  result_.step = step, result_.tokens_seen = tokens_seen, result_.elapsed_s = elapsed_s;
  with_task_ = with_task && task_;
  done_.store(false, std::memory_order_relaxed);
  t0_ = now_seconds();
  thread_ = std::thread([this] {
    try {
      backend_.bind_thread();
      result_.loss = evaluator_.loss_sum(model_, 0, 1) / evaluator_.batches();
      result_.bits_per_byte = evaluator_.bits_per_byte(result_.loss);
      if (with_task_) result_.task = task_->score(model_, 0, 1);
      backend_.synchronize();
      result_.ms = 1e3 * (now_seconds() - t0_);  // the evaluation's own time, not when the caller polled
    } catch (...) {
      error_ = std::current_exception();
    }
    done_.store(true, std::memory_order_release);
  });
}

std::optional<BackgroundEval::Result> BackgroundEval::poll() {
  if (!running() || !done_.load(std::memory_order_acquire)) return std::nullopt;
  return finish();
}

std::optional<BackgroundEval::Result> BackgroundEval::wait() {
  if (!running()) return std::nullopt;
  return finish();
}

BackgroundEval::Result BackgroundEval::finish() {
  thread_.join();
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  return result_;
}

}  // namespace ember
