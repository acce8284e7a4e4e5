// Strict parsing of option values, shared by every subcommand: numbers read whole in their type and checked against
// a domain, a command line whose stray arguments and unknown options are usage errors, a config file of bounded size.
#pragma once

#include <boost/program_options.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"

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

// Numbers as options print them: integers in full, floats with 9 and doubles with 15 significant digits (enough to
// read back the same float).
std::string format_number(int v);
std::string format_number(uint64_t v);
std::string format_number(float v);
std::string format_number(double v);

// True when all of `text` (less surrounding blanks and one leading '+') is one value of T and lies in `domain` (floats
// also finite). std::from_chars takes no sign for unsigned types, so "-1" is refused rather than wrapped to 2^64 - 1.
bool parse_number(const std::string& text, int* out);
bool parse_number(const std::string& text, uint64_t* out);
bool parse_number(const std::string& text, float* out);
bool parse_number(const std::string& text, double* out);
bool in_domain(int v, const Domain<int>& d);
bool in_domain(uint64_t v, const Domain<uint64_t>& d);
bool in_domain(float v, const Domain<float>& d);
bool in_domain(double v, const Domain<double>& d);

// Parses `text` into *field and checks it against the domain; "" when valid, else what the value must be.
template <class T>
std::string parse_in_domain(const std::string& text, T* field, const Domain<T>& domain) {
  if (!parse_number(text, field) || !in_domain(*field, domain)) return describe_domain(domain);
  return "";
}

// Runs Boost's parser over argv (argv[0] is the command) against desc, with options spelled in full (no prefix
// guessing); an argument that is no option and no declared positional, or an unknown option, throws UsageError. The
// parsed options are returned unstored, for commands that look at them first (a second --config).
boost::program_options::parsed_options parse_argv(
    int argc, char** argv, const boost::program_options::options_description& desc, const std::string& command,
    const boost::program_options::positional_options_description* positional);

// Rethrows a Boost.Program_options error as ember's: a UsageError (exit code 2) for what is not an option of the
// command or not where it takes it, when `command_line`; an ember::Error otherwise (a config file's unknown key).
[[noreturn]] void throw_option_error(const boost::program_options::error& e, const std::string& where,
                                     const std::string& hint, bool command_line = true);

}  // namespace ember
