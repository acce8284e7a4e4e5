// Sync training (training.mode = sync): data parallel over the ranks of a World. Its own policy is the gradient
// exchange: bucketed all-reduce overlapped with backward, or ZeRO-1 (reduce-scatter, a sharded AdamW, all-gather),
// and which share of each tensor a rank writes to a checkpoint. The rest of a step is the shared run skeleton.
#pragma once

#include <memory>
#include <string>

#include "parallel/world.h"
#include "train/run.h"
#include "train/run_config.h"

namespace ember {

class SyncTrainer {
 public:
  // Checks every input (data, the resume checkpoint, loaded in full) before anything is written. Collective.
  SyncTrainer(const World& world, const RunConfig& config, std::string config_ini, TrainLimits limits = {});
  ~SyncTrainer();
  TrainResult run();

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace ember
