// Option definitions: every RunConfig field bound to its "section.key" name once, for the INI file, the command
// line, range checks and rendering back to INI text. Defaults < INI file < command line. Also the strict parsing of
// numeric options that every subcommand shares: a value is read whole, in its type, and checked against its domain.
#pragma once

#include <boost/program_options.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "train/run_config.h"

namespace ember {

// A command line that is not what the command accepts: an unknown option, an argument that is no option, an option
// given twice where one is allowed. main() exits with EXIT_CODE_USAGE (2) for it, 1 for every other Error.
class UsageError : public Error {
 public:
  using Error::Error;
};

// The largest config file `--config` reads: a full config is about 2 KiB; anything near this is not a config.
constexpr uintmax_t kMaxConfigFileBytes = 1 << 20;

// Reads a config file after checking that it is a regular file of at most kMaxConfigFileBytes (a directory, a device
// such as /dev/zero or a FIFO is refused before it is opened). Throws ember::Error naming the file.
std::string read_config_file(const std::string& path);

// The domain of a numeric option: [lo, hi], either end open. Floats must also be finite.
template <class T>
struct Domain {
  T lo, hi;
  bool lo_open = false, hi_open = false;
};

// Numeric options of one command, declared to Boost as text and parsed here, strictly: the whole text in the
// option's type (no sign for an unsigned value, no trailing characters), finite, and inside its domain.
class NumericOptions {
 public:
  NumericOptions();
  ~NumericOptions();
  // Declares --name (default: *field) to desc.
  void add(boost::program_options::options_description& desc, const char* name, int* field, Domain<int> domain,
           const char* help);
  void add(boost::program_options::options_description& desc, const char* name, uint64_t* field,
           Domain<uint64_t> domain, const char* help);
  void add(boost::program_options::options_description& desc, const char* name, float* field, Domain<float> domain,
           const char* help);
  void add(boost::program_options::options_description& desc, const char* name, double* field, Domain<double> domain,
           const char* help);
  // Parses every declared option's text (after po::notify) into its field; a bad value throws ember::Error
  // "PREFIX--name = VALUE must be ..." with `hint`.
  void parse(const std::string& prefix, const std::string& hint) const;

  struct Entry;  // one option: its name, its text and its parser (options.cpp)

 private:
  std::vector<std::unique_ptr<Entry>> entries_;
};

// "must be an integer in [1, 65536]" / "must be a finite number in (0, 10)": what a value of the domain is.
std::string describe_domain(const Domain<int>& d);
std::string describe_domain(const Domain<uint64_t>& d);
std::string describe_domain(const Domain<float>& d);
std::string describe_domain(const Domain<double>& d);

// Parses argv (argv[0] is the command) against desc: unknown options, arguments that are no option (beyond
// `positional`, when given), missing values and repeated options throw UsageError naming them; a value of the wrong
// type throws ember::Error. `command` names the command in messages ("ember eval").
boost::program_options::variables_map parse_command_line(
    int argc, char** argv, const boost::program_options::options_description& desc, const std::string& command,
    const boost::program_options::positional_options_description* positional = nullptr);

// The upper bound of training.threads: more OpenMP threads than 4x the hardware threads only time-slice the same
// cores, and every parallel region's barrier then waits on preempted threads (10000 threads ran 30x slower).
int max_training_threads();

struct ParsedRun {
  RunConfig config;
  std::string config_ini;  // the resolved configuration rendered as INI text
  bool help = false;
  int stop_after = 0;      // --stop-after: optimizer steps in this invocation (0 = not given: until training.steps)
  double max_runtime = 0;  // --max-runtime: seconds of wall clock for this invocation (0 = not given: no limit)
  bool log_all_ranks = false;
};

// Parses `ember train` arguments (argv[0] is "train"): --config FILE, --section.key=value overrides,
// --resume auto|PATH, --stop-after N, --help. Unknown options, stray arguments and a second --config throw
// UsageError; wrong types and out-of-range values throw ember::Error naming the key (and the file) with a hint.
ParsedRun parse_train_args(int argc, char** argv);

// Renders a config as INI text, one [section] per struct, every key present.
std::string render_config_ini(const RunConfig& config);

// The help text of every config key, grouped by section.
std::string config_help();

}  // namespace ember
