// Helpers of the prep tests: shards read back as text (bytes tokenizer), folder snapshots, generated text, gzip and
// zstd compression of inputs, and the options every prep test starts from.
#pragma once

#include <zlib.h>
#include <zstd.h>

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

// Every file under `dir` by its path relative to `dir`, with its contents.
inline std::map<std::string, std::string> snapshot(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file()) files[std::filesystem::relative(e.path(), dir).string()] = read_bytes(e.path().string());
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

inline std::string gzip(const std::string& text) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);  // +16: gzip header
  std::string out(deflateBound(&zs, uLong(text.size())) + 64, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  zs.avail_in = uInt(text.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = uInt(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

inline std::string zstd(const std::string& text) {
  std::string out(ZSTD_compressBound(text.size()), '\0');
  const size_t n = ZSTD_compress(out.data(), out.size(), text.data(), text.size(), 3);
  EXPECT_FALSE(ZSTD_isError(n));
  out.resize(n);
  return out;
}

inline PrepOptions prep_options(const std::string& in, const std::string& out) {
  PrepOptions o;
  o.input = in;
  o.output = out;
  o.threads = 2;
  return o;
}
}  // namespace ember
