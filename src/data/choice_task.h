// Multiple-choice tasks (`ember eval --task`, eval.task in training): items of a context and choices, one the answer,
// read from JSONL and tokenized with the model's tokenizer, and their scores (train/choice_score.h scores them with a
// GPT, infer/choice_score_kv.h with a KvModel). Two formats: hellaswag, the dataset's own release (ctx,
// endings, label; each ending scored after a space, as llm.c's script does), and choice, the generic one (context,
// choices, answer; each choice scored as written). docs/eval.md describes both.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace ember {

enum class TaskFormat { hellaswag, choice };
inline constexpr TaskFormat kTaskFormats[] = {TaskFormat::hellaswag, TaskFormat::choice};
const char* task_format_name(TaskFormat f);  // "hellaswag", "choice"
std::optional<TaskFormat> parse_task_format(const std::string& name);

struct ChoiceItem {
  int line = 0;                               // 1-based, in its file
  std::vector<int32_t> context;               // the context's tokens (never empty)
  std::vector<std::vector<int32_t>> choices;  // each choice's tokens (never empty), as scored after the context
  int answer = 0;                             // index into choices
};

// An item's scores, as llm.c's HellaSwag script and lm-evaluation-harness define them: each choice's log-likelihood
// given the context, summed over the choice's tokens; the prediction is the choice of the highest sum (acc), or of
// the highest mean per token (acc_norm, llm.c's normalisation; the harness divides by the length in bytes instead).
struct ChoiceScore {
  std::vector<double> logprob;  // per choice: the summed log-likelihood of its tokens (nats)
  std::vector<int> tokens;      // per choice: its tokens
  int pred = 0, pred_norm = 0;  // the choice of the highest sum, of the highest mean per token (first of equals)
  void decide();                // sets pred and pred_norm from logprob and tokens
};

// Counts over scored items; doubles, so that ranks sum them in one all-reduce.
struct ChoiceTally {
  double items = 0, correct = 0, correct_norm = 0;
  void add(const ChoiceItem& item, const ChoiceScore& score);
  double acc() const { return items > 0 ? correct / items : 0.0; }
  double acc_norm() const { return items > 0 ? correct_norm / items : 0.0; }
};

// Reads the task file `path` of `format`: one JSON object per line (blank lines skipped), at most `limit` items
// (0: all). Each choice must fit in `window` tokens (the model's context, into which a long context is cut from the
// left). Bad input (a malformed line, a missing or mistyped field, an answer out of range, an empty context or choice,
// an item of the other format, a file without items) throws ember::Error naming the file, the line and the field, with
// a hint.
std::vector<ChoiceItem> read_choice_task(const std::string& path, TaskFormat format, const Tokenizer& tokenizer,
                                         int window, int64_t limit = 0);

}  // namespace ember
