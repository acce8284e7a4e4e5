// The tokenizer in checkpoints (/tokenizer) and at training start-up: a byte-exact round trip of its files, files
// written before the group existed, and the refusals of a tokenizer that does not match the shards, model or resume.
#include <gtest/gtest.h>
#include <hdf5.h>

#include "checkpoint/h5.h"
#include "data/prep_manifest.h"
#include "parallel/host_collectives.h"
#include "train/run_tokenizer.h"

#include "checkpoint_test_util.h"

namespace ember {
namespace {

using namespace test;
using namespace checkpoint_test;

// A tokenizer with files and a fingerprint of the test's choosing; only what checkpoints and start-up checks use.
class FakeTokenizer final : public Tokenizer {
 public:
  FakeTokenizer(TokenizerFiles files, std::string fingerprint, int vocab)
      : files_(std::move(files)), fingerprint_(std::move(fingerprint)), vocab_(vocab) {}
  TokenizerKind kind() const override { return TokenizerKind::bpe; }
  std::string describe() const override { return "bpe (fake " + fingerprint_ + ")"; }
  int vocab_size() const override { return vocab_; }
  std::optional<int32_t> eot_id() const override { return vocab_ - 1; }
  void encode_into(std::string_view, std::vector<int32_t>&) const override {}
  void encode_with_special_into(std::string_view, std::vector<int32_t>&) const override {}
  std::string decode(std::span<const int32_t>) const override { return ""; }
  size_t chunk_boundary(std::string_view text, size_t) const override { return text.size(); }
  std::string fingerprint() const override { return fingerprint_; }
  TokenizerFiles files() const override { return files_; }

 private:
  TokenizerFiles files_;
  std::string fingerprint_;
  int vocab_;
};

// Every byte value, NULs among them, and an empty file: contents are stored verbatim, not as C strings.
TokenizerFiles awkward_files() {
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(char(i));
  return {{"merges.txt", "#version: 0.2\nĠ t\n"},
          {"vocab.json", std::string("{\"\\u0000\": 0}\0\xff\x80 tail", 19) + all},
          {"empty.txt", ""}};
}

TEST_F(CheckpointTest, TokenizerFilesRoundTripByteExact) {
  const ModelConfig c = small_config();
  const ParamTable t(c);
  Arenas a = random_arenas(t, 1);
  CheckpointMeta meta = make_meta(c, 5);
  meta.tokenizer = checkpoint_tokenizer(FakeTokenizer(awkward_files(), "0123456789abcdef", 200));
  const std::string path = save_checkpoint(dir_.string(), meta, t, a.contents(), 3, self_world());
  const std::optional<CheckpointTokenizer> got = read_checkpoint_tokenizer(path);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->kind, "bpe");
  EXPECT_EQ(got->fingerprint, "0123456789abcdef");
  EXPECT_EQ(got->vocab_size, 200);
  EXPECT_EQ(got->files, awkward_files());
  EXPECT_EQ(read_checkpoint_meta(path).tokenizer, got);
  verify_checkpoint(path);  // the uint8 datasets pass the full scan
}

TEST_F(CheckpointTest, UnsetTokenizerIsRecordedAsBytes) {
  const ModelConfig c = small_config();
  const ParamTable t(c);
  Arenas a = random_arenas(t, 2);
  const std::string path = save_checkpoint(dir_.string(), make_meta(c, 1), t, a.contents(), 3, self_world());
  EXPECT_EQ(read_checkpoint_tokenizer(path), CheckpointTokenizer{});
}

TEST(CheckpointTokenizer, OldFilesHaveNone) {
  for (const char* name : {"checkpoint_v1_sync_np2.h5", "checkpoint_v1_async_np3.h5"}) {
    const std::string path = std::string(EMBER_SOURCE_DIR) + "/tests/fixtures/" + name;
    EXPECT_FALSE(read_checkpoint_tokenizer(path).has_value()) << name;
    const CheckpointMeta meta = read_checkpoint_meta(path);
    // What such a file was trained with: the byte tokenizer, the only one there was; a run with it may resume.
    check_resume_tokenizer(path, meta, CheckpointTokenizer{});
    expect_error([&] { check_resume_tokenizer(path, meta, checkpoint_tokenizer(FakeTokenizer({}, "feed", 300))); },
                 {path, "bytes", "feed"});
  }
}

TEST_F(CheckpointTest, ResumeWithAnotherTokenizerIsRefused) {
  CheckpointMeta meta = make_meta(small_config(), 3);
  meta.tokenizer = checkpoint_tokenizer(FakeTokenizer({{"tokenizer.json", "{}"}}, "aaaa", 300));
  check_resume_tokenizer("x.h5", meta, *meta.tokenizer);
  expect_error([&] { check_resume_tokenizer("x.h5", meta, CheckpointTokenizer{}); }, {"x.h5", "aaaa", "bytes"});
}

// A data folder with a prep.json claiming `kind`, `fingerprint` and `vocab`.
std::string data_dir(const fs::path& root, const std::string& kind, const std::string& fingerprint, int vocab) {
  fs::create_directories(root);
  PrepManifest m;
  m.tokenizer_kind = kind;
  m.tokenizer_fingerprint = fingerprint;
  m.vocab_size = vocab;
  write_prep_manifest(root.string(), m);
  return root.string();
}

RunConfig run_with(const std::string& dir, const std::string& tokenizer, int vocab) {
  RunConfig c;
  c.data.dir = dir;
  c.data.tokenizer = tokenizer;
  c.model.vocab_size = vocab;
  return c;
}

TEST_F(CheckpointTest, StartUpResolvesAndChecksTheTokenizer) {
  const std::string none = (dir_ / "no_prep").string();
  fs::create_directories(none);
  EXPECT_EQ(resolve_run_tokenizer(run_with(none, "auto", 256))->fingerprint(), "bytes");
  EXPECT_EQ(resolve_run_tokenizer(run_with(none, "bytes", 512))->fingerprint(), "bytes");  // padding rows
  expect_error([&] { resolve_run_tokenizer(run_with(none, "auto", 50257)); }, {none, "prep.json"});

  const std::string bytes = data_dir(dir_ / "bytes", "bytes", "bytes", 256);
  EXPECT_EQ(resolve_run_tokenizer(run_with(bytes, "auto", 256))->fingerprint(), "bytes");
  EXPECT_EQ(resolve_run_tokenizer(run_with(bytes, "bytes", 256))->fingerprint(), "bytes");
  expect_error([&] { resolve_run_tokenizer(run_with(bytes, "bytes", 100)); }, {"256", "100"});

  const std::string other = data_dir(dir_ / "other", "bpe", "0123456789abcdef", 256);
  const std::string big = data_dir(dir_ / "big", "bpe", "0123456789abcdef", 5000);
  expect_error([&] { resolve_run_tokenizer(run_with(big, "auto", 256)); }, {big, "5000", "256"});
  expect_error([&] { resolve_run_tokenizer(run_with(other, "bytes", 256)); }, {other, "0123456789abcdef", "bytes"});
}

}  // namespace
}  // namespace ember
