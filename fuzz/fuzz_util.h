// What the fuzz targets share: splitting one input into parts at a marker, a per-process scratch file for readers
// that take a path, and the rule that only ember::Error may come out of a reader (anything else stops the run).
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace ember::fuzz {

// The marker between the parts of an input (two files, or a file and a text); seeds hold it, and the fuzzer keeps
// it as it mutates around it.
inline constexpr std::string_view kSplit = "\n--8<--\n";

// The first `n` parts of `data` split at kSplit; the last part takes the rest, missing parts are empty.
inline std::vector<std::string> split_input(const uint8_t* data, size_t size, size_t n) {
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> parts;
  for (size_t i = 0; i + 1 < n; ++i) {
    const size_t at = rest.find(kSplit);
    parts.emplace_back(rest.substr(0, at));
    rest = at == rest.npos ? std::string_view() : rest.substr(at + kSplit.size());
  }
  parts.emplace_back(rest);
  return parts;
}

// A file of this process's own in /dev/shm (memory, not disk), rewritten for each input.
inline std::string scratch_file(const char* name, const std::string& contents) {
  const std::string path = "/dev/shm/ember-fuzz-" + std::to_string(getpid()) + "-" + name;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(contents.data(), 1, contents.size(), f) != contents.size() || std::fclose(f) != 0) {
    std::perror(path.c_str());
    std::abort();
  }
  return path;
}

// A property the reader promises was broken: report it as a crash.
[[noreturn]] inline void broken(const char* what) {
  std::fprintf(stderr, "fuzz: property broken: %s\n", what);
  std::abort();
}

}  // namespace ember::fuzz
