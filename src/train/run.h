// One invocation of `ember train`: its limits, its result, and the entry that runs the configured kind of training
// (training.mode) on every rank. What every kind shares lives in the run_* files beside this one.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "parallel/world.h"
#include "train/run_config.h"

namespace ember {

// Limits of one invocation; the learning-rate schedule still spans training.steps.
struct TrainLimits {
  int stop_after = 0;      // optimizer steps in this invocation (0: no limit)
  double max_runtime = 0;  // seconds of wall clock (0: no limit)
  // Called on every rank (collective) once set-up has succeeded, before the metrics or a checkpoint is written, with
  // the step the run starts at (0 for a fresh start): the run folder's start (train/run_folder.h).
  std::function<void(int64_t step)> on_start;
};

struct TrainResult {
  int64_t step = 0;  // optimizer steps completed (in total, counting a resumed run's earlier steps)
  double last_loss = 0.0;
  double last_val_loss = -1.0;  // -1 when never evaluated
  std::string last_checkpoint;  // "" when none was written
  bool stopped_early = false;   // a signal or --max-runtime stopped the run (after a checkpoint)
};

// Runs one invocation on every rank of `world`: sync training (sync_trainer.h) or async training (async/run.h).
// Collective. config_ini is the resolved configuration as INI text (printed and stored in checkpoints).
TrainResult run_training(const World& world, const RunConfig& config, const std::string& config_ini,
                         TrainLimits limits);

}  // namespace ember
