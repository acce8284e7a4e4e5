// The training entry (implementation): picks the kind of run from training.mode.
#include "train/run.h"

#include "train/async/run.h"
#include "train/sync_trainer.h"

namespace ember {

TrainResult run_training(const World& world, const RunConfig& config, const std::string& config_ini,
                         TrainLimits limits) {
  if (config.training.mode == TrainingMode::async) return run_async(world, config, config_ini, limits);
  return SyncTrainer(world, config, config_ini, limits).run();
}

}  // namespace ember
