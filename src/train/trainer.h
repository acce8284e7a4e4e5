// The Trainer: one training run from a resolved RunConfig. It validates every input (data, resume checkpoint)
// before writing anything, then loops micro-batches, AdamW steps, logging, validation and checkpoints.
#pragma once

#include <memory>
#include <string>

#include "train/run_config.h"

namespace ember {

struct TrainResult {
  int64_t step = 0;              // optimizer steps completed (in total, counting a resumed run's earlier steps)
  double last_loss = 0.0;
  double last_val_loss = -1.0;   // -1 when never evaluated
  std::string last_checkpoint;   // "" when none was written
};

class Trainer {
 public:
  // config_ini is the resolved configuration as INI text (printed and stored in checkpoints).
  // stop_after > 0 stops this invocation after that many optimizer steps, writing a checkpoint, as a time limit
  // would; the schedule still spans training.steps.
  Trainer(const RunConfig& config, std::string config_ini, int stop_after = 0);
  ~Trainer();
  TrainResult run();

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace ember
