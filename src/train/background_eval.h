// Validation in a thread of its own, on a snapshot of the parameters: the async center goes on taking and serving
// the workers' messages while it evaluates (evaluating in its loop held every worker's exchange for that long).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <thread>

#include "backend/backend.h"
#include "model/gpt.h"
#include "train/evaluate.h"
#include "train/run_config.h"
#include "train/task_eval.h"

namespace ember {

class BackgroundEval {
 public:
  // What one evaluation measured, and of which parameters.
  struct Result {
    int64_t step = 0;
    uint64_t tokens_seen = 0;
    double elapsed_s = 0.0;  // when the snapshot was taken, from the caller's start
    double loss = 0.0;
    double bits_per_byte = 0.0;
    std::optional<ChoiceTally> task;  // eval.task, where start() asked for it
    double ms = 0.0;                  // the evaluation's own time
  };

  // The model is the evaluation's alone: its parameters hold the snapshot. `task`: eval.task's items, or null.
  BackgroundEval(const RunConfig& config, const Tokenizer& tokenizer, const TaskEval* task, GPT& model,
                 Backend& backend);
  ~BackgroundEval();
  BackgroundEval(const BackgroundEval&) = delete;
  BackgroundEval& operator=(const BackgroundEval&) = delete;

  bool running() const { return thread_.joinable(); }

  // Copies the n parameters at `params` (host) into the model and evaluates them in the background; one at a time.
  // With `with_task`, eval.task is scored too.
  void start(const float* params, size_t n, int64_t step, uint64_t tokens_seen, double elapsed_s,
             bool with_task = false);

  // The result once the evaluation has ended, else nothing; an error in the evaluation is thrown here.
  std::optional<Result> poll();

  // Waits for the evaluation in progress, if any; an error in it is thrown here.
  std::optional<Result> wait();

 private:
  Result finish();

  Evaluator evaluator_;
  const TaskEval* task_;
  bool with_task_ = false;
  GPT& model_;
  Backend& backend_;
  std::thread thread_;
  std::atomic<bool> done_{false};
  std::exception_ptr error_;
  Result result_;
  double t0_ = 0.0;
};

}  // namespace ember
