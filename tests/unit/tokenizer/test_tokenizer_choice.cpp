// Which tokenizer a command uses: training's data.tokenizer against what the shards record and the model's
// vocab_size, a checkpoint's tokenizer rebuilt from its files (or, for old files, from its configuration), and the
// refusals when shards, a run and a checkpoint disagree.
#include <gtest/gtest.h>

#include "fake_tokenizer.h"
#include "tokenizer/bpe_files.h"
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/tokenizer_choice.h"

#include "../data/data_test_util.h"

namespace ember {
namespace {

using test::FakeTokenizer;

// The files of a small trained BPE tokenizer (256 bytes, a few merges, <|endoftext|>).
TokenizerFiles small_bpe_files() {
  BpeTrainOptions opt;
  opt.vocab_size = 300;
  opt.min_frequency = 1;
  BpeTrainer trainer(opt);
  trainer.add_document("the cat sat on the mat; the hat, the bat.");
  return bpe_vocab_to_files(trainer.finish());
}

TrainingTokenizerSources sources(const std::string& setting, std::optional<TokenizerRecord> shards, int vocab,
                                 const std::string& shards_tokenizer = "") {
  TrainingTokenizerSources s;
  s.setting = setting;
  s.data_dir = "data/x";
  s.manifest = "prep.json";
  s.shards = std::move(shards);
  s.shards_tokenizer = shards_tokenizer;
  s.model_vocab_size = vocab;
  return s;
}

TEST(TokenizerChoice, RecordsDescribeAsTheTokenizerDoes) {
  const ByteTokenizer bytes;
  EXPECT_EQ(record_of(bytes), TokenizerRecord{});
  EXPECT_EQ(describe(record_of(bytes)), bytes.describe());
  const auto bpe = tokenizer_from_files(small_bpe_files(), "test");
  EXPECT_EQ(describe(record_of(*bpe)), bpe->describe());
  EXPECT_EQ(record_of(*bpe).kind, "bpe");
}

TEST(TokenizerChoice, TrainingWithoutAManifest) {
  EXPECT_EQ(choose_training_tokenizer(sources("auto", std::nullopt, 256))->fingerprint(), "bytes");
  EXPECT_EQ(choose_training_tokenizer(sources("bytes", std::nullopt, 512))->fingerprint(), "bytes");  // padding
  expect_error([] { choose_training_tokenizer(sources("auto", std::nullopt, 50257)); }, {"data/x", "prep.json"});
  expect_error([] { choose_training_tokenizer(sources("bytes", std::nullopt, 100)); }, {"256", "100"});
}

TEST(TokenizerChoice, TrainingAutoTakesTheTokenizerBesideTheShards) {
  TempDir dir;
  const auto bpe = tokenizer_from_files(small_bpe_files(), "test");
  write_tokenizer_files(*bpe, dir / "tokenizer");
  const TokenizerRecord shards = record_of(*bpe);
  const auto t = choose_training_tokenizer(sources("auto", shards, 512, dir / "tokenizer"));
  EXPECT_EQ(t->fingerprint(), bpe->fingerprint());
  // The same files named explicitly; and a byte manifest picks bytes without reading any folder.
  EXPECT_EQ(choose_training_tokenizer(sources(dir / "tokenizer", shards, 512))->fingerprint(), bpe->fingerprint());
  EXPECT_EQ(choose_training_tokenizer(sources("auto", TokenizerRecord{}, 256, "/nonexistent"))->fingerprint(), "bytes");
  // The model must have a row for every id of the shards and of the tokenizer.
  const int short_vocab = shards.vocab_size - 1;
  expect_error([&] { choose_training_tokenizer(sources("auto", shards, short_vocab, dir / "tokenizer")); },
               {"data/x", std::to_string(shards.vocab_size), std::to_string(short_vocab), "model.vocab_size"});
  // A prep.json whose fingerprint was changed: with auto the two files beside the shards disagree, and the advice is to
  // prepare again, not to set data.tokenizer = auto (which it already is).
  TokenizerRecord tampered = shards;
  tampered.fingerprint = "00112233aabbccdd";
  try {
    choose_training_tokenizer(sources("auto", tampered, 512, dir / "tokenizer"));
    ADD_FAILURE() << "a tampered prep.json was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("00112233aabbccdd"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(dir / "tokenizer"), std::string::npos) << e.what();
    EXPECT_EQ(e.hint().find("data.tokenizer = auto"), std::string::npos) << e.hint();
    EXPECT_NE(e.hint().find("--overwrite"), std::string::npos) << e.hint();
  }
  // Shards made with one tokenizer, a run naming another.
  expect_error([&] { choose_training_tokenizer(sources("bytes", shards, 512)); },
               {"data/x", shards.fingerprint, "data.tokenizer (bytes)", "prep.json"});
}

TEST(TokenizerChoice, RecordedTokenizerIsRebuiltFromItsFiles) {
  const TokenizerFiles files = small_bpe_files();
  const auto bpe = tokenizer_from_files(files, "test");
  EXPECT_EQ(recorded_tokenizer("checkpoint c.h5", record_of(*bpe), files, "", 512)->fingerprint(), bpe->fingerprint());
  EXPECT_EQ(recorded_tokenizer("checkpoint c.h5", TokenizerRecord{}, {}, "", 256)->fingerprint(), "bytes");
  // Files that do not make the recorded fingerprint, and a model with fewer rows than ids: both name the file.
  TokenizerRecord forged = record_of(*bpe);
  forged.fingerprint = "00112233aabbccdd";
  expect_error([&] { recorded_tokenizer("checkpoint c.h5", forged, files, "", 512); },
               {"checkpoint c.h5", "00112233aabbccdd", "/tokenizer"});
  expect_error([&] { recorded_tokenizer("checkpoint c.h5", record_of(*bpe), files, "", 100); },
               {"checkpoint c.h5", "100", std::to_string(bpe->vocab_size())});
}

TEST(TokenizerChoice, OldCheckpointsAreBytesAndALostRecordIsRefused) {
  // Before checkpoints recorded their tokenizer, bytes was the only one, and data.tokenizer said so.
  EXPECT_EQ(recorded_tokenizer("checkpoint old.h5", std::nullopt, {}, "bytes", 256)->fingerprint(), "bytes");
  // "auto" and paths came with the record: a file with either and no record lost it (a BPE run read as bytes).
  expect_error([] { recorded_tokenizer("checkpoint bpe.h5", std::nullopt, {}, "auto", 50257); },
               {"checkpoint bpe.h5", "/tokenizer", "data.tokenizer = auto"});
  expect_error([] { recorded_tokenizer("checkpoint bpe.h5", std::nullopt, {}, "data/gpt2", 50257); },
               {"checkpoint bpe.h5", "data.tokenizer = data/gpt2"});
}

TEST(TokenizerChoice, DisagreementsAreRefused) {
  const TokenizerRecord a = record_of(FakeTokenizer({}, "aaaa", 300));
  check_checkpoint_tokenizer("x.h5", a, a, "hint");
  check_checkpoint_tokenizer("x.h5", std::nullopt, TokenizerRecord{}, "hint");  // old files: bytes
  expect_error([&] { check_checkpoint_tokenizer("x.h5", a, TokenizerRecord{}, "hint"); }, {"x.h5", "aaaa", "bytes"});
  expect_error([&] { check_checkpoint_tokenizer("x.h5", std::nullopt, a, "hint"); }, {"x.h5", "aaaa", "bytes"});

  check_shards_tokenizer("d", "prep.json", a, "checkpoint c.h5 was trained with", FakeTokenizer({}, "aaaa", 300), "h");
  expect_error(
      [&] { check_shards_tokenizer("d", "prep.json", a, "checkpoint c.h5 was trained with", ByteTokenizer(), "h"); },
      {"shards in d", "aaaa", "prep.json", "checkpoint c.h5 was trained with bytes"});
}

}  // namespace
}  // namespace ember
