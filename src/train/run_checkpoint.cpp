// Checkpoints as every kind of training run uses them (implementation).
#include "train/run_checkpoint.h"

#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "dist/host_collectives.h"

namespace ember {

std::string choose_resume(const World& world, const RunConfig& config) {
  std::string resume;
  if (world.rank == 0) resume = resolve_resume(config.checkpoint_folder(), config.checkpoint.resume);
  return broadcast_string(world, resume, 0);
}

void check_resumable(const std::string& path, const CheckpointMeta& meta, const RunConfig& config) {
  if (!(meta.model == config.model))
    throw_error("checkpoint " + path + ": model config differs from the run's [model] section",
                "use the [model] settings the checkpoint was written with (see `ember inspect`) or start fresh");
  if (meta.step >= config.training.steps)
    throw_error("checkpoint " + path + ": already at step " + std::to_string(meta.step) +
                    " of training.steps = " + std::to_string(config.training.steps),
                "raise training.steps to train further");
}

CheckpointMeta run_checkpoint_meta(const RunConfig& config, const std::string& config_ini) {
  CheckpointMeta meta;
  meta.config_ini = config_ini;
  meta.model = config.model;
  meta.beta1 = config.optimizer.beta1;
  meta.beta2 = config.optimizer.beta2;
  meta.eps = config.optimizer.eps;
  meta.weight_decay = config.optimizer.weight_decay;
  return meta;
}

std::string save_run_checkpoint(const RunConfig& config, const CheckpointMeta& meta, const ParamTable& table,
                                const CheckpointContents& contents, const World& world) {
  const double t0 = now_seconds();
  const std::string path =
      save_checkpoint(config.checkpoint_folder(), meta, table, contents, config.checkpoint.keep_latest_k, world);
  log_info("checkpoint %s (%.0f ms)", path.c_str(), 1e3 * (now_seconds() - t0));
  return path;
}

}  // namespace ember
