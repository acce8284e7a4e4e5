// Token shards in llm.c's formats: a header of 256 int32 (magic, version, token count, rest zero) followed by the
// tokens, uint16 (magic 20240520, version 1: GPT-2's) or uint32 (magic 20240801, version 7: Llama 3's). Readers
// validate magic, version and size before trusting a byte.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ember {

constexpr int32_t SHARD_MAGIC = 20240520;  // uint16 tokens
constexpr int32_t SHARD_VERSION = 1;
constexpr int32_t SHARD_MAGIC_U32 = 20240801;  // uint32 tokens
constexpr int32_t SHARD_VERSION_U32 = 7;
constexpr size_t SHARD_HEADER_INTS = 256;
constexpr size_t SHARD_HEADER_BYTES = SHARD_HEADER_INTS * sizeof(int32_t);

// Bytes per token for a vocabulary: 2 up to 65536 ids, else 4.
inline int shard_token_bytes(int vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

// Streams tokens into a shard without holding them: a temp file (`path` + ".tmp") with a zeroed header, whose zero
// magic no reader accepts, then on finish() the real header, fsync, close and rename to `path`. A writer destroyed
// before finish() removes its temp file, so an interrupted write never leaves a file that looks like a shard.
class ShardWriter {
 public:
  ShardWriter(std::string path, int token_bytes);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // Appends `n` tokens of token_bytes each (little-endian, already checked to fit).
  void append(const void* tokens, size_t n);
  size_t tokens() const { return count_; }
  // Writes the header, fsyncs, closes and renames to the final path (the caller syncs the folder).
  void finish();

 private:
  void flush();
  std::string path_, tmp_;
  int token_bytes_;
  int fd_ = -1;
  size_t count_ = 0;
  std::vector<char> buf_;
};

// Writes `tokens` to `path` atomically: a temp file beside it, fsync, rename, fsync of the folder.
void write_shard(const std::string& path, const std::vector<uint16_t>& tokens);
void write_shard_u32(const std::string& path, const std::vector<uint32_t>& tokens);

struct ShardInfo {
  size_t tokens = 0;
  int token_bytes = 2;
};

// Reads and validates the header; throws ember::Error (naming the path, with a hint) on a missing file, wrong magic,
// wrong version or a body shorter or longer than the header says.
ShardInfo read_shard_info(const std::string& path);
size_t read_shard_header(const std::string& path);  // read_shard_info(path).tokens

// Reads a whole shard (validated as above): read_shard for uint16 shards only, read_shard_tokens for either width.
std::vector<uint16_t> read_shard(const std::string& path);
std::vector<uint32_t> read_shard_tokens(const std::string& path);

// The shards in `dir` whose file names start with `prefix` ("train" or "val") and end in ".bin", sorted by name.
// A missing or unreadable directory is an error; an empty result is returned as is (the caller decides).
std::vector<std::string> list_shards(const std::string& dir, const std::string& prefix);

}  // namespace ember
