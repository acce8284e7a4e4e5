// Helpers of the prep tests: shards read back as text (bytes tokenizer), folder snapshots, generated text and the
// options every prep test starts from.
#pragma once

#include <filesystem>
#include <map>
#include <string>

#include "data/prep.h"
#include "data/shard.h"
#include "data_test_util.h"

namespace ember {

// Reads the shards of one split back into a single stream (bytes tokenizer: one char per token).
inline std::string read_split(const std::string& dir, const std::string& split) {
  std::string text;
  for (const std::string& path : list_shards(dir, split))
    for (uint16_t t : read_shard(path)) text.push_back(char(t));
  return text;
}

inline std::map<std::string, std::string> snapshot(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file()) files[e.path().string()] = read_bytes(e.path().string());
  return files;
}
// Deterministic text of `n` bytes in lines of varying length.
inline std::string make_text(size_t n, uint32_t seed) {
  std::string s;
  s.reserve(n);
  uint32_t x = seed * 2654435761u + 1;
  while (s.size() < n) {
    x = x * 1664525u + 1013904223u;
    s.push_back((x >> 24) % 17 == 0 ? '\n' : char('a' + (x >> 20) % 26));
  }
  return s;
}

inline PrepOptions prep_options(const std::string& in, const std::string& out) {
  PrepOptions o;
  o.input = in;
  o.output = out;
  o.threads = 2;
  return o;
}
}  // namespace ember
