// `ember train`: resolves the one Config (defaults < INI < command line), checks the world (a power of two), prints
// the config, takes the run folder (train/run_folder.h: lock, earlier results, probes, run state) and runs the
// training (train/run.h). Exit code 3 means "stopped early after a checkpoint; requeue to continue".
#include <iostream>

#include "app/commands.h"
#include "app/options.h"
#include "core/error.h"
#include "core/log.h"
#include "parallel/world.h"
#include "train/run.h"
#include "train/run_folder.h"

namespace ember {

int cmd_train(int argc, char** argv) {
  ParsedRun parsed = parse_train_args(argc, argv);
  if (parsed.help) {
    std::cout << "usage: ember train --config FILE [--section.key=value ...] [--resume auto|PATH] [--stop-after N]\n"
                 "                   [--init-from F.h5] [--max-runtime SECONDS] [--overwrite] [--log-all-ranks]\n\n"
              << config_help() << "\n";
    return EXIT_CODE_OK;
  }
  const World world = make_world();
  require_same_config(world, parsed.config_ini);  // before anything else: a mismatch stops every rank alike
  log_set_rank(world.rank, parsed.log_all_ranks);
  const bool async = parsed.config.training.mode == TrainingMode::async;
  if (!async) require_power_of_two(world);  // async: a center and any number of workers
  log_info("ember %s | %d rank(s), rank 0 on %s | resolved config:\n%s", EMBER_VERSION, world.size, world.host.c_str(),
           parsed.config_ini.c_str());
  if (!async && parsed.config.async.join)
    throw_error("config: async.join = true applies to training.mode = async only",
                "set training.mode = async (the job to join must run in async mode too)");
  if (async && parsed.config.async.join) {  // the running job holds the run folder: this start only adds workers
    const TrainResult r = run_training(world, parsed.config, parsed.config_ini,
                                       TrainLimits{parsed.stop_after, parsed.max_runtime, nullptr});
    log_info("%s at step %lld | loss %.4f (joined the job in %s)", r.stopped_early ? "stopped" : "done",
             (long long)r.step, r.last_loss, parsed.config.run.dir.c_str());
    return r.stopped_early ? EXIT_CODE_REQUEUE : EXIT_CODE_OK;
  }
  RunFolder folder(world, parsed.config, parsed.overwrite);
  const TrainLimits limits{parsed.stop_after, parsed.max_runtime, [&folder](int64_t step) { folder.start(step); }};
  TrainResult r;
  try {
    r = run_training(world, parsed.config, parsed.config_ini, limits);
  } catch (const std::exception& e) {
    folder.fail(e.what());
    throw;
  }
  folder.finish(r);
  log_info("%s at step %lld | loss %.4f%s%s", r.stopped_early ? "stopped" : "done", (long long)r.step, r.last_loss,
           r.last_checkpoint.empty() ? "" : " | checkpoint ", r.last_checkpoint.c_str());
  return r.stopped_early ? EXIT_CODE_REQUEUE : EXIT_CODE_OK;
}

}  // namespace ember
