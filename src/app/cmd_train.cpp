// `ember train`: resolves the one Config (defaults < INI < command line), prints it, and runs the Trainer.
#include <cstdio>
#include <iostream>

#include "app/commands.h"
#include "app/options.h"
#include "core/log.h"
#include "train/trainer.h"

namespace ember {

int cmd_train(int argc, char** argv) {
  ParsedRun parsed = parse_train_args(argc, argv);
  if (parsed.help) {
    std::cout << "usage: ember train --config FILE [--section.key=value ...] [--resume auto|PATH] [--stop-after N]\n\n"
              << config_help() << "\n";
    return EXIT_CODE_OK;
  }
  log_info("ember %s | resolved config:\n%s", EMBER_VERSION, parsed.config_ini.c_str());
  Trainer trainer(parsed.config, parsed.config_ini, parsed.stop_after);
  const TrainResult r = trainer.run();
  log_info("done at step %lld | loss %.4f%s%s", (long long)r.step, r.last_loss,
           r.last_checkpoint.empty() ? "" : " | checkpoint ", r.last_checkpoint.c_str());
  return EXIT_CODE_OK;
}

}  // namespace ember
