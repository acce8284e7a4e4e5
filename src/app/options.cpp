// Option definitions (implementation): a single table of bindings drives parsing, validation and rendering, so a
// key cannot be parsed under one name and rendered under another.
#include "app/options.h"

#include <boost/program_options.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <thread>
#include <type_traits>

#include "app/option_binding.h"
#include "app/option_enums.h"
#include "core/enum_names.h"
#include "core/error.h"

namespace ember {
namespace {

// A key given twice on the command line takes its last value, as with most command-line tools, so scripts can
// append overrides to a common argument list.
po::parsed_options last_occurrence_wins(po::parsed_options parsed) {
  std::vector<po::option> kept;
  for (auto it = parsed.options.rbegin(); it != parsed.options.rend(); ++it) {
    bool seen = false;
    for (const po::option& o : kept) seen = seen || (o.string_key == it->string_key && !o.string_key.empty());
    if (!seen) kept.insert(kept.begin(), *it);
  }
  parsed.options = std::move(kept);
  return parsed;
}

std::string section_of(const std::string& key) { return key.substr(0, key.find('.')); }

std::string fix_hint(const std::string& key) {
  return "fix " + key + " in the config file or pass --" + key + "=VALUE";
}

}  // namespace

std::string render_config_ini(const RunConfig& config) {
  RunConfig copy = config;
  std::ostringstream out;
  std::string section;
  for (const Binding& b : bindings(copy)) {
    if (section_of(b.key) != section) {
      if (!section.empty()) out << "\n";
      section = section_of(b.key);
      out << "[" << section << "]\n";
    }
    out << b.key.substr(b.key.find('.') + 1) << " = " << b.render() << "\n";
  }
  return out.str();
}

std::string config_help() {
  RunConfig c;
  po::options_description desc("config keys (INI [section] key = value, or --section.key=value)");
  for (const Binding& b : bindings(c)) b.declare(desc);
  std::ostringstream out;
  out << desc;
  return out.str();
}

std::string config_reference_markdown() {
  RunConfig c;
  std::ostringstream out;
  out << "# Configuration keys\n\n"
         "<!-- Generated from the option table in src/app/option_table.cpp; do not edit. After changing the table:\n"
         "     EMBER_UPDATE_DOCS=1 build/tests/test_options --gtest_filter=Options.ConfigReference -->\n\n"
         "Every key of `ember train`. Values come from the defaults below, then the INI file given with `--config`\n"
         "(`[section]` lines, then `key = value`), then the command line as `--section.key=value`; a key given twice\n"
         "on the command line takes its last value. Unknown keys, values of the wrong type and values out of range\n"
         "stop the run before anything is written, with an error naming the key. The resolved configuration is\n"
         "printed at start and stored in every checkpoint. Every rank must resolve the same configuration: if a\n"
         "launcher gives ranks different files or overrides, all ranks stop at start-up naming the first rank and\n"
         "key that differ. `ember train --help` lists the same keys.\n";
  std::string section;
  for (const Binding& b : bindings(c)) {
    if (section_of(b.key) != section) {
      section = section_of(b.key);
      out << "\n## [" << section << "]\n\n| key | default | values | meaning |\n| --- | --- | --- | --- |\n";
    }
    std::string help;  // Markdown: | ends a cell, <...> would be taken for HTML
    for (char ch : b.help) help += ch == '|' ? "\\|" : ch == '<' ? "&lt;" : ch == '>' ? "&gt;" : std::string(1, ch);
    const std::string value = b.shortest();
    out << "| `" << b.key.substr(b.key.find('.') + 1) << "` | " << (value.empty() ? "(empty)" : "`" + value + "`")
        << " | " << b.values << " | " << help << " |\n";
  }
  return out.str();
}

ParsedRun parse_train_args(int argc, char** argv) {
  ParsedRun parsed;
  RunConfig& c = parsed.config;
  std::vector<Binding> table = bindings(c);
  po::options_description keys("config keys");
  for (const Binding& b : table) b.declare(keys);
  std::string config_file, resume, init_from, stop_after, max_runtime;
  po::options_description cli("ember train options");
  cli.add_options()("help,h", "print this help")("config", po::value<std::string>(&config_file),
                                                 "INI file with [section] key = value lines (at most once)")(
      "resume", po::value<std::string>(&resume), "auto (newest valid checkpoint, if any) or a checkpoint path")(
      "init-from", po::value<std::string>(&init_from),
      "start a fresh run from this checkpoint's weights (checkpoint.init_from; a resume wins)")(
      "stop-after", po::value<std::string>(&stop_after),
      "stop after N >= 1 optimizer steps in this invocation, writing a checkpoint (exit code 0)")(
      "max-runtime", po::value<std::string>(&max_runtime),
      "stop after this many seconds (> 0) of wall clock at a step boundary, writing a checkpoint (exit code 3)")(
      "log-all-ranks", po::bool_switch(&parsed.log_all_ranks), "every rank logs, prefixed with [rank r]")(
      "overwrite", po::bool_switch(&parsed.overwrite),
      "a fresh start in a run.dir with earlier results moves them aside into previous-<time>/ and starts over");
  po::options_description all;
  all.add(cli).add(keys);

  po::variables_map vm;
  const char* source = "command line";
  const std::string see_help = "see `ember train --help` for every key, its type and its default";
  po::parsed_options given = parse_argv(argc, argv, all, "ember train", nullptr);
  // Two config files would silently drop one of them; keys may repeat (the last wins) so scripts can append overrides.
  std::vector<std::string> configs;
  for (const po::option& o : given.options)
    if (o.string_key == "config") configs.insert(configs.end(), o.value.begin(), o.value.end());
  if (configs.size() > 1)
    throw UsageError("ember train: --config given twice (" + configs[0] + ", " + configs[1] + ")",
                     "give one config file and override single keys with --section.key=value");
  try {
    po::store(last_occurrence_wins(std::move(given)), vm);
    if (vm.count("help")) {
      parsed.help = true;
      return parsed;
    }
    if (vm.count("config")) {
      config_file = vm["config"].as<std::string>();
      std::istringstream in(read_config_file(config_file));
      source = nullptr;
      po::store(po::parse_config_file(in, keys, /*allow_unregistered=*/false), vm);
    }
    po::notify(vm);
  } catch (const BadEnumValue& e) {
    // Reported as a value out of range is, from either source: "config: training.device = gpu must be one of: ...".
    const std::string name = e.get_option_name();
    const std::string key = name.substr(std::min(name.find_first_not_of('-'), name.size()));
    throw_error("config: " + key + " = " + e.value() + " " + e.problem(), fix_hint(key));
  } catch (const po::error& e) {
    throw_option_error(e, source ? "command line" : "config file " + config_file, see_help, source != nullptr);
  }
  if (vm.count("stop-after")) {
    const std::string problem = parse_in_domain(stop_after, &parsed.stop_after, Domain<int>{1, kMaxCount});
    if (!problem.empty())
      throw_error("--stop-after " + stop_after + " " + problem,
                  "give the optimizer steps to run, e.g. --stop-after 100");
  }
  if (vm.count("max-runtime")) {
    const std::string problem = parse_in_domain(max_runtime, &parsed.max_runtime, Domain<double>{0, 1e9, true});
    if (!problem.empty())
      throw_error("--max-runtime " + max_runtime + " " + problem, "give seconds, e.g. --max-runtime 3600");
  }
  if (vm.count("resume")) c.checkpoint.resume = resume;
  if (vm.count("init-from")) c.checkpoint.init_from = init_from;
  const auto from = [&](const Binding& b) {
    return vm.count(b.key) && !vm[b.key].defaulted() ? std::string() : std::string(" (default)");
  };
  // Every number is read in its type first, then every key checked, since some domains depend on other keys.
  for (const Binding& b : table) {
    const std::string problem = b.parse();
    if (!problem.empty()) throw_error("config: " + b.key + " = " + b.text() + from(b) + " " + problem, fix_hint(b.key));
  }
  for (const Binding& b : table) {
    const std::string problem = b.check();
    if (!problem.empty()) throw_error("config: " + b.key + " = " + b.text() + from(b) + " " + problem, fix_hint(b.key));
  }
  parsed.config_ini = render_config_ini(c);
  return parsed;
}

}  // namespace ember
