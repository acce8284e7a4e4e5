// The tokenizer in checkpoints (the /tokenizer group): a byte-exact round trip of its files, a run without one
// recorded as bytes, and files written before the group existed.
#include <gtest/gtest.h>
#include <hdf5.h>

#include "fake_tokenizer.h"
#include "parallel/host_collectives.h"
#include "train/run_tokenizer.h"

#include "checkpoint_test_util.h"

namespace ember {
namespace {

using namespace test;
using namespace checkpoint_test;

class CheckpointTokenizerGroup : public CheckpointTest {};

// Every byte value, NULs among them, and an empty file: contents are stored verbatim, not as C strings.
TokenizerFiles awkward_files() {
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(char(i));
  return {{"merges.txt", "#version: 0.2\nĠ t\n"},
          {"vocab.json", std::string("{\"\\u0000\": 0}\0\xff\x80 tail", 19) + all},
          {"empty.txt", ""}};
}

TEST_F(CheckpointTokenizerGroup, FilesRoundTripByteExact) {
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

TEST_F(CheckpointTokenizerGroup, UnsetTokenizerIsRecordedAsBytes) {
  const ModelConfig c = small_config();
  const ParamTable t(c);
  Arenas a = random_arenas(t, 2);
  const std::string path = save_checkpoint(dir_.string(), make_meta(c, 1), t, a.contents(), 3, self_world());
  EXPECT_EQ(read_checkpoint_tokenizer(path), CheckpointTokenizer{});
}

TEST_F(CheckpointTokenizerGroup, OldFilesHaveNone) {
  for (const char* name : {"checkpoint_v1_sync_np2.h5", "checkpoint_v1_async_np3.h5"}) {
    const std::string path = std::string(EMBER_SOURCE_DIR) + "/tests/fixtures/" + name;
    EXPECT_FALSE(read_checkpoint_tokenizer(path).has_value()) << name;
    const CheckpointMeta meta = read_checkpoint_meta(path);
    // What such a file was trained with: the byte tokenizer, the only one there was; a run with it may resume.
    check_resume_tokenizer(path, meta, TokenizerRecord{});
    expect_error([&] { check_resume_tokenizer(path, meta, record_of(FakeTokenizer({}, "feed", 300))); },
                 {path, "bytes", "feed"});
  }
}

}  // namespace
}  // namespace ember
