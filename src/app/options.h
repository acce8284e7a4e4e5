// Option definitions: every RunConfig field bound to its "section.key" name once, for the INI file, the command
// line, range checks and rendering back to INI text. Defaults < INI file < command line. The strict parsing of values
// that every subcommand shares is in app/option_values.h.
#pragma once

#include <boost/program_options.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "app/option_values.h"
#include "core/error.h"
#include "train/run_config.h"

namespace ember {

struct ParsedRun {
  RunConfig config;
  std::string config_ini;  // the resolved configuration rendered as INI text
  bool help = false;
  int stop_after = 0;      // --stop-after: optimizer steps in this invocation (0 = not given: until training.steps)
  double max_runtime = 0;  // --max-runtime: seconds of wall clock for this invocation (0 = not given: no limit)
  bool log_all_ranks = false;
  bool overwrite = false;  // --overwrite: a fresh start may replace earlier results (moved aside; train/run_folder.h)
};

// Parses `ember train` arguments (argv[0] is "train"): --config FILE, --section.key=value overrides,
// --resume auto|PATH, --stop-after N, --help. Unknown options, stray arguments and a second --config throw
// UsageError; wrong types and out-of-range values throw ember::Error naming the key (and the file) with a hint.
ParsedRun parse_train_args(int argc, char** argv);

// Renders a config as INI text, one [section] per struct, every key present.
std::string render_config_ini(const RunConfig& config);

// The help text of every config key, grouped by section.
std::string config_help();

// docs/config.md: every config key with its default, what it may be and what it does, a table per section.
std::string config_reference_markdown();

}  // namespace ember
