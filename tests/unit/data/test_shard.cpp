// The shard format: exact headers, empty and overwritten shards, and the reader's errors, each naming the file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/shard.h"
#include "data_test_util.h"

namespace ember {
namespace {

namespace fs = std::filesystem;

TEST(Shard, RoundTripWithExactHeader) {
  TempDir dir;
  const std::string path = dir / "train_000000.bin";
  std::vector<uint16_t> tokens(1001);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = uint16_t(i * 65 + 7);  // reaches past 32767: unsigned
  write_shard(path, tokens);

  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_EQ(read_shard_header(path), tokens.size());
  EXPECT_EQ(read_shard(path), tokens);

  const std::string raw = read_bytes(path);
  ASSERT_EQ(raw.size(), SHARD_HEADER_BYTES + 2 * tokens.size());
  std::vector<int32_t> header(SHARD_HEADER_INTS);
  std::memcpy(header.data(), raw.data(), SHARD_HEADER_BYTES);
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 1);
  EXPECT_EQ(header[2], 1001);
  for (size_t i = 3; i < SHARD_HEADER_INTS; ++i) EXPECT_EQ(header[i], 0) << "header int " << i;
  uint16_t t5 = 0;
  std::memcpy(&t5, raw.data() + SHARD_HEADER_BYTES + 10, 2);
  EXPECT_EQ(t5, tokens[5]);
}

TEST(Shard, EmptyShardRoundTrips) {
  TempDir dir;
  const std::string path = dir / "val_000000.bin";
  write_shard(path, {});
  EXPECT_EQ(read_shard_header(path), 0u);
  EXPECT_TRUE(read_shard(path).empty());
}

TEST(Shard, OverwriteReplacesContent) {
  TempDir dir;
  const std::string path = dir / "a.bin";
  write_shard(path, {1, 2, 3, 4});
  write_shard(path, {9});
  EXPECT_EQ(read_shard(path), std::vector<uint16_t>{9});
}

TEST(Shard, WrongMagicNamesFile) {
  TempDir dir;
  const std::string path = dir / "train_000000.bin";
  write_raw_shard(path, 12345, 1, 4, 4);
  expect_error([&] { read_shard_header(path); }, {path, "bad magic 12345", "20240520"});
  expect_error([&] { read_shard(path); }, {path, "bad magic"});
}

TEST(Shard, WrongVersionNamesFile) {
  TempDir dir;
  const std::string path = dir / "train_000000.bin";
  write_raw_shard(path, SHARD_MAGIC, 7, 4, 4);
  expect_error([&] { read_shard_header(path); }, {path, "version 7"});
}

TEST(Shard, TruncatedBodyNamesFile) {
  TempDir dir;
  const std::string path = dir / "train_000000.bin";
  write_raw_shard(path, SHARD_MAGIC, SHARD_VERSION, 100, 99);
  expect_error([&] { read_shard_header(path); }, {path, "truncated", "100 tokens"});
}

TEST(Shard, TrailingBytesNameFile) {
  TempDir dir;
  const std::string path = dir / "train_000000.bin";
  write_raw_shard(path, SHARD_MAGIC, SHARD_VERSION, 100, 101);
  expect_error([&] { read_shard_header(path); }, {path, "trailing"});
  // An odd trailing byte too.
  write_bytes(path, read_bytes(path) + "x");
  expect_error([&] { read_shard_header(path); }, {path, "trailing"});
}

TEST(Shard, ShortHeaderNamesFile) {
  TempDir dir;
  const std::string path = dir / "train_000000.bin";
  write_bytes(path, std::string(100, '\0'));
  expect_error([&] { read_shard_header(path); }, {path, "header"});
}

TEST(Shard, MissingFileNamesFile) {
  TempDir dir;
  const std::string path = dir / "train_000042.bin";
  expect_error([&] { read_shard_header(path); }, {path});
  expect_error([&] { read_shard(path); }, {path});
}

TEST(Shard, ListShardsFiltersAndSorts) {
  TempDir dir;
  write_shard(dir / "train_000001.bin", {1});
  write_shard(dir / "train_000000.bin", {1});
  write_shard(dir / "val_000000.bin", {1});
  write_bytes(dir / "train_000002.bin.tmp", "x");
  write_bytes(dir / "notes.txt", "x");
  fs::create_directories(dir / "train_dir.bin");  // a directory is not a shard
  EXPECT_EQ(list_shards(dir.str(), "train"),
            (std::vector<std::string>{dir / "train_000000.bin", dir / "train_000001.bin"}));
  EXPECT_EQ(list_shards(dir.str(), "val"), std::vector<std::string>{dir / "val_000000.bin"});
  EXPECT_TRUE(list_shards(dir.str(), "test").empty());
  expect_error([&] { list_shards(dir / "nope", "train"); }, {dir / "nope"});
}

}  // namespace
}  // namespace ember
