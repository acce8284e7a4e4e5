// Strict parsing of option values (implementation).
#include "app/option_values.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>
#include <type_traits>

namespace po = boost::program_options;

namespace ember {

std::string format_number(int v) { return std::to_string(v); }
std::string format_number(uint64_t v) { return std::to_string(v); }
std::string format_number(float v) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%.9g", v);  // 9 significant digits round-trip any float
  return buf;
}
std::string format_number(double v) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%.15g", v);
  return buf;
}

namespace {

template <class T>
bool parse_whole(const std::string& text, T* out) {
  size_t a = text.find_first_not_of(" \t"), b = text.find_last_not_of(" \t");
  if (a == std::string::npos) return false;
  if (text[a] == '+' && a < b && text[a + 1] != '-') ++a;
  T v{};
  const char* first = text.data() + a;
  const char* last = text.data() + b + 1;
  const auto [end, ec] = std::from_chars(first, last, v);
  if (ec != std::errc() || end != last) return false;
  *out = v;
  return true;
}

template <class T>
bool inside(T v, const Domain<T>& d) {
  if constexpr (std::is_floating_point_v<T>)
    if (!std::isfinite(v)) return false;
  return (d.lo_open ? v > d.lo : v >= d.lo) && (d.hi_open ? v < d.hi : v <= d.hi);
}

template <class T>
std::string describe(const Domain<T>& d) {
  const char* what = std::is_floating_point_v<T> ? "must be a finite number in " : "must be an integer in ";
  return what + std::string(d.lo_open ? "(" : "[") + format_number(d.lo) + ", " + format_number(d.hi) +
         (d.hi_open ? ")" : "]");
}

}  // namespace

bool parse_number(const std::string& text, int* out) { return parse_whole(text, out); }
bool parse_number(const std::string& text, uint64_t* out) { return parse_whole(text, out); }
bool parse_number(const std::string& text, float* out) { return parse_whole(text, out); }
bool parse_number(const std::string& text, double* out) { return parse_whole(text, out); }
bool in_domain(int v, const Domain<int>& d) { return inside(v, d); }
bool in_domain(uint64_t v, const Domain<uint64_t>& d) { return inside(v, d); }
bool in_domain(float v, const Domain<float>& d) { return inside(v, d); }
bool in_domain(double v, const Domain<double>& d) { return inside(v, d); }

std::string describe_domain(const Domain<int>& d) { return describe(d); }
std::string describe_domain(const Domain<uint64_t>& d) { return describe(d); }
std::string describe_domain(const Domain<float>& d) { return describe(d); }
std::string describe_domain(const Domain<double>& d) { return describe(d); }

int max_training_threads() {
  const unsigned hw = std::thread::hardware_concurrency();
  return 4 * int(hw > 0 ? std::min(hw, 1u << 16) : 256u);  // 256: a guess where the count is unknown
}

void throw_option_error(const po::error& e, const std::string& where, const std::string& hint, bool command_line) {
  // What is not an option of the command, or not where the command takes it, is a usage error (exit code 2); a
  // config file's unknown key is bad input, as any other bad line of the file.
  const bool usage =
      command_line && (dynamic_cast<const po::unknown_option*>(&e) || dynamic_cast<const po::ambiguous_option*>(&e) ||
                       dynamic_cast<const po::multiple_occurrences*>(&e) ||
                       dynamic_cast<const po::too_many_positional_options_error*>(&e) ||
                       dynamic_cast<const po::invalid_command_line_syntax*>(&e));
  if (usage) throw UsageError(where + ": " + e.what(), hint);
  throw_error(where + ": " + e.what(), hint);
}

// Runs Boost's parser over argv; an argument that is no option and no declared positional is a usage error (Boost
// would drop it: `--prompt hello world` would continue "hello").
po::parsed_options parse_argv(int argc, char** argv, const po::options_description& desc, const std::string& command,
                              const po::positional_options_description* positional) {
  const std::string hint = "see `" + command + " --help` for the options; quote a value with spaces";
  try {
    po::command_line_parser parser(argc, argv);
    // Options are spelled in full: Boost would otherwise take a prefix ("--temp") for the one option it starts.
    parser.options(desc).style(po::command_line_style::default_style & ~po::command_line_style::allow_guessing);
    if (positional) parser.positional(*positional);
    po::parsed_options parsed = parser.run();
    for (const po::option& o : parsed.options)
      if (o.string_key.empty())
        throw UsageError(command + ": unexpected argument '" + (o.original_tokens.empty() ? "" : o.original_tokens[0]) +
                             "' (every value follows its option)",
                         hint);
    return parsed;
  } catch (const po::too_many_positional_options_error&) {
    // Name what is left over: the arguments that are no option, past those the command takes.
    po::command_line_parser parser(argc, argv);
    std::vector<std::string> stray;
    parser.options(desc).style(po::command_line_style::default_style & ~po::command_line_style::allow_guessing);
    for (const po::option& o : parser.allow_unregistered().run().options)
      if (o.string_key.empty() && !o.original_tokens.empty()) stray.push_back(o.original_tokens[0]);
    const size_t takes = positional ? positional->max_total_count() : 0;
    const std::string first = stray.size() > takes ? stray[takes] : std::string("?");
    throw UsageError(command + ": unexpected argument '" + first + "' (it takes " + std::to_string(takes) +
                         " argument(s) without an option)",
                     hint);
  } catch (const po::error& e) {
    throw_option_error(e, command, hint);
  }
}

po::variables_map parse_command_line(int argc, char** argv, const po::options_description& desc,
                                     const std::string& command, const po::positional_options_description* positional) {
  po::variables_map vm;
  const po::parsed_options parsed = parse_argv(argc, argv, desc, command, positional);
  try {
    po::store(parsed, vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw_option_error(e, command, "see `" + command + " --help` for the options");
  }
  return vm;
}

struct NumericOptions::Entry {
  std::string name;
  std::shared_ptr<std::string> text;
  std::function<std::string()> parse;  // parses *text into the field: "" when valid, else what it must be
};

NumericOptions::NumericOptions() = default;
NumericOptions::~NumericOptions() = default;

namespace {
template <class T>
std::unique_ptr<NumericOptions::Entry> declare_number(po::options_description& desc, const char* name, T* field,
                                                      Domain<T> domain, const char* help) {
  auto e = std::make_unique<NumericOptions::Entry>();
  e->name = name;
  e->text = std::make_shared<std::string>(format_number(*field));
  desc.add_options()(name, po::value<std::string>(e->text.get())->default_value(*e->text), help);
  e->parse = [text = e->text, field, domain] { return parse_in_domain(*text, field, domain); };
  return e;
}
}  // namespace

void NumericOptions::add(po::options_description& desc, const char* name, int* field, Domain<int> domain,
                         const char* help) {
  entries_.push_back(declare_number(desc, name, field, domain, help));
}
void NumericOptions::add(po::options_description& desc, const char* name, uint64_t* field, Domain<uint64_t> domain,
                         const char* help) {
  entries_.push_back(declare_number(desc, name, field, domain, help));
}
void NumericOptions::add(po::options_description& desc, const char* name, float* field, Domain<float> domain,
                         const char* help) {
  entries_.push_back(declare_number(desc, name, field, domain, help));
}
void NumericOptions::add(po::options_description& desc, const char* name, double* field, Domain<double> domain,
                         const char* help) {
  entries_.push_back(declare_number(desc, name, field, domain, help));
}

void NumericOptions::parse(const std::string& prefix, const std::string& hint) const {
  for (const auto& e : entries_) {
    const std::string problem = e->parse();
    if (!problem.empty()) throw_error(prefix + "--" + e->name + " = " + *e->text + " " + problem, hint);
  }
}

std::string read_config_file(const std::string& path) {
  const std::string hint = "give an INI file, e.g. --config configs/tiny.ini";
  std::error_code ec;
  // status() follows links, so a link to a regular file is one; anything else is refused before it is opened (a
  // directory would read as empty, /dev/zero would never end, a FIFO would block).
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) throw_error("config file " + path + ": cannot open (no such file)", hint);
  if (!std::filesystem::is_regular_file(st))
    throw_error(
        "config file " + path + ": not a regular file (" +
            (std::filesystem::is_directory(st) ? std::string("a directory") : std::string("a device, FIFO or socket")) +
            ")",
        hint);
  const uintmax_t size = std::filesystem::file_size(path, ec);
  const std::string limit = std::to_string(kMaxConfigFileBytes) + " bytes";
  if (ec || size > kMaxConfigFileBytes)
    throw_error("config file " + path + ": " + (ec ? "size unknown" : std::to_string(size) + " bytes") +
                    ", more than a config file's limit of " + limit,
                hint);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_error("config file " + path + ": cannot open", hint);
  // Read at most one byte past the limit, so a file that grew since the check is still refused, not read whole.
  std::string text(kMaxConfigFileBytes + 1, '\0');
  in.read(text.data(), std::streamsize(text.size()));
  text.resize(size_t(in.gcount()));
  if (text.size() > kMaxConfigFileBytes)
    throw_error("config file " + path + ": more than a config file's limit of " + limit, hint);
  return text;
}

}  // namespace ember
