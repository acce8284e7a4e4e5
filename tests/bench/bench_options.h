// The benchmark programs' command lines (Boost.Program_options): named integer options with their defaults, --help,
// and one error line with a hint for an unknown option or a value that is not a positive integer.
#pragma once

#include <boost/program_options.hpp>

#include <cstdio>
#include <initializer_list>
#include <iostream>

namespace ember::bench {

struct IntOption {
  const char* name;  // without the leading "--"
  int* value;        // holds the default; receives the value given
  const char* help;
};

constexpr int kGoOn = -1;

// kGoOn with every value set, or the status to exit with: 0 after --help, 2 after an error (reported).
inline int parse_options(int argc, char** argv, const char* usage, std::initializer_list<IntOption> options) {
  namespace po = boost::program_options;
  po::options_description desc(usage);
  desc.add_options()("help", "this text");
  for (const IntOption& o : options)
    desc.add_options()(o.name, po::value<int>(o.value)->default_value(*o.value), o.help);
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
    if (vm.count("help")) {
      std::cout << desc;
      return 0;
    }
  } catch (const po::error& e) {
    std::fprintf(stderr, "error: %s\nhint: %s --help lists the options\n", e.what(), argv[0]);
    return 2;
  }
  for (const IntOption& o : options)
    if (*o.value < 1) {
      std::fprintf(stderr, "error: --%s %d is not a positive integer\nhint: %s --help lists the options\n", o.name,
                   *o.value, argv[0]);
      return 2;
    }
  return kGoOn;
}

}  // namespace ember::bench
