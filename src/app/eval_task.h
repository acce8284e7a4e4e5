// `ember eval --task`: the options cmd_eval parsed for a multiple-choice task (app/cmd_eval_task.cpp).
#pragma once

#include <cstdint>
#include <string>

namespace ember {

struct EvalTaskArgs {
  std::string checkpoint, task, data, device, items_out;
  int batch_size = 8, seq_len = 0;
  int64_t limit = 0;
  bool json = false, overwrite = false;
};

// Scores the checkpoint on the task file and prints acc and acc_norm (text, or one JSON object); returns the exit code.
int eval_task(const EvalTaskArgs& args);

}  // namespace ember
