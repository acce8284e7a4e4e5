// eval.task during training (implementation).
#include "train/task_eval.h"

#include "core/log.h"

namespace ember {

TaskEval::TaskEval(const RunConfig& c, const Tokenizer& tokenizer)
    : format_(c.eval.task.value()),
      every_(c.eval.task_every),
      batch_(c.training.batch_size),
      window_(c.training.seq_len),
      items_(read_choice_task(c.eval.task_data, format_, tokenizer, window_, c.eval.task_limit)) {}

ChoiceTally TaskEval::score(GPT& model, int rank, int ranks) const {
  std::vector<size_t> mine;
  for (size_t i = size_t(rank); i < items_.size(); i += size_t(ranks)) mine.push_back(i);
  const std::vector<ChoiceScore> scores = score_choices(model, batch_, window_, items_, mine);
  ChoiceTally tally;
  for (size_t k = 0; k < mine.size(); ++k) tally.add(items_[mine[k]], scores[k]);
  return tally;
}

void add_task_record(nlohmann::json& record, const char* name, const ChoiceTally& tally) {
  record["task"] = name;
  record["task_acc"] = tally.acc();
  record["task_acc_norm"] = tally.acc_norm();
  record["task_items"] = int64_t(tally.items);
}

void log_task(int64_t step, const char* name, const ChoiceTally& tally) {
  log_info("step %lld | %s acc %.4f | acc_norm %.4f | %lld items", (long long)step, name, tally.acc(), tally.acc_norm(),
           (long long)tally.items);
}

}  // namespace ember
