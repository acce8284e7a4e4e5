// The run's tokenizer at start-up: data.tokenizer resolved against what data.dir/prep.json records, and a checkpoint
// to resume refused when it was trained with another tokenizer.
#include <gtest/gtest.h>

#include "data/prep_manifest.h"
#include "fake_tokenizer.h"
#include "train/run_tokenizer.h"

#include "../data/data_test_util.h"

namespace ember {
namespace {

using test::FakeTokenizer;

// A data folder with a prep.json claiming `kind`, `fingerprint` and `vocab`.
std::string data_dir(const std::string& root, const std::string& kind, const std::string& fingerprint, int vocab) {
  std::filesystem::create_directories(root);
  PrepManifest m;
  m.tokenizer = TokenizerRecord{kind, fingerprint, vocab};
  write_prep_manifest(root, m);
  return root;
}

RunConfig run_with(const std::string& dir, const std::string& tokenizer, int vocab) {
  RunConfig c;
  c.data.dir = dir;
  c.data.tokenizer = tokenizer;
  c.model.vocab_size = vocab;
  return c;
}

TEST(RunTokenizer, ResolvedAgainstPrepJson) {
  TempDir dir;
  const std::string none = dir / "no_prep";
  std::filesystem::create_directories(none);
  EXPECT_EQ(resolve_run_tokenizer(run_with(none, "auto", 256))->fingerprint(), "bytes");
  EXPECT_EQ(resolve_run_tokenizer(run_with(none, "bytes", 512))->fingerprint(), "bytes");  // padding rows
  expect_error([&] { resolve_run_tokenizer(run_with(none, "auto", 50257)); }, {none, "prep.json"});

  const std::string bytes = data_dir(dir / "bytes", "bytes", "bytes", 256);
  EXPECT_EQ(resolve_run_tokenizer(run_with(bytes, "auto", 256))->fingerprint(), "bytes");
  EXPECT_EQ(resolve_run_tokenizer(run_with(bytes, "bytes", 256))->fingerprint(), "bytes");
  expect_error([&] { resolve_run_tokenizer(run_with(bytes, "bytes", 100)); }, {"256", "100"});

  const std::string other = data_dir(dir / "other", "bpe", "0123456789abcdef", 256);
  const std::string big = data_dir(dir / "big", "bpe", "0123456789abcdef", 5000);
  expect_error([&] { resolve_run_tokenizer(run_with(big, "auto", 256)); }, {big, "5000", "256", "prep.json"});
  expect_error([&] { resolve_run_tokenizer(run_with(other, "bytes", 256)); },
               {other, "0123456789abcdef", "bytes", "prep.json"});
  // auto with a BPE prep.json reads the tokenizer/ folder beside the shards: here there is none.
  expect_error([&] { resolve_run_tokenizer(run_with(other, "auto", 256)); }, {other + "/tokenizer"});
}

TEST(RunTokenizer, ResumeWithAnotherTokenizerIsRefused) {
  CheckpointMeta meta;
  meta.tokenizer = checkpoint_tokenizer(FakeTokenizer({{"tokenizer.json", "{}"}}, "aaaa", 300));
  check_resume_tokenizer("x.h5", meta, *meta.tokenizer);
  expect_error([&] { check_resume_tokenizer("x.h5", meta, TokenizerRecord{}); }, {"x.h5", "aaaa", "bytes"});
}

}  // namespace
}  // namespace ember
