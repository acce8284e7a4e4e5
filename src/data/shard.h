// Token shards in llm.c's format: a header of 256 int32 (magic 20240520, version 1, token count, rest zero)
// followed by the tokens as uint16. Readers validate magic, version and size before trusting a byte.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ember {

constexpr int32_t SHARD_MAGIC = 20240520;
constexpr int32_t SHARD_VERSION = 1;
constexpr size_t SHARD_HEADER_INTS = 256;
constexpr size_t SHARD_HEADER_BYTES = SHARD_HEADER_INTS * sizeof(int32_t);

// Writes `tokens` (each < 65536) to `path` atomically: a temp file beside it, fsync, rename.
void write_shard(const std::string& path, const std::vector<uint16_t>& tokens);

// Reads and validates the header; throws ember::Error (naming the path, with a hint) on a missing file, wrong magic,
// wrong version or a body shorter or longer than the header says. Returns the token count.
size_t read_shard_header(const std::string& path);

// Reads a whole shard (validated as above).
std::vector<uint16_t> read_shard(const std::string& path);

// The shards in `dir` whose file names start with `prefix` ("train" or "val") and end in ".bin", sorted by name.
// A missing or unreadable directory is an error; an empty result is returned as is (the caller decides).
std::vector<std::string> list_shards(const std::string& dir, const std::string& prefix);

}  // namespace ember
