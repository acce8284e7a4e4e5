// eval.task during training: a multiple-choice task's items, read and tokenized at start-up (so bad input stops the
// run before any work), scored with the training model every eval.task_every steps and at the end.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/choice_task.h"
#include "model/gpt.h"
#include "tokenizer/tokenizer.h"
#include "train/choice_score.h"
#include "train/run_config.h"

namespace ember {

class TaskEval {
 public:
  // Reads eval.task_data (its first eval.task_limit items, or all), for passes of training.batch_size rows of at most
  // training.seq_len tokens. `config.eval.task` must be set.
  TaskEval(const RunConfig& config, const Tokenizer& tokenizer);

  const char* name() const { return task_format_name(format_); }
  size_t items() const { return items_.size(); }
  // Whether the task is scored after optimizer step `step`: every eval.task_every steps, and after the last.
  bool due(int64_t step, bool last) const { return last || (every_ > 0 && step % every_ == 0); }
  // The tally of items rank, rank + ranks, ... (the ranks' tallies add up to the whole).
  ChoiceTally score(GPT& model, int rank, int ranks) const;

 private:
  TaskFormat format_;
  int every_, batch_, window_;
  std::vector<ChoiceItem> items_;
};

// The task's fields of a metrics record ("task", "task_acc", "task_acc_norm", "task_items"), and its log line.
void add_task_record(nlohmann::json& record, const char* name, const ChoiceTally& tally);
void log_task(int64_t step, const char* name, const ChoiceTally& tally);

}  // namespace ember
