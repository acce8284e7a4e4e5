// Tests for BPE training: merges worked out by hand on a tiny corpus, ties, min_frequency, the vocabulary size, special
// tokens last, the same result on any number of threads, and written files that load back to the same ids.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "tokenizer/bpe_files.h"
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/tokenizer.h"

namespace ember {
namespace {

// Ids of single bytes in GPT-2's order: '!'..'~' are 0..93 ('a' = 64), then the unprintable bytes from 188 on in
// byte order, so ' ' (byte 32) is 188 + 32 = 220.
constexpr int32_t A = 64, B = 65, C = 66, D = 67, SPACE = 220;
using Merges = std::vector<std::pair<int32_t, int32_t>>;

// "ab ab ab cd" is cut into "ab", " ab", " ab", " cd". Pairs: (a,b) 3, (' ',a) 2, (' ',c) 1, (c,d) 1. First "ab"
// (256), then " ab" (257); then (' ',c) and (c,d) tie at 1 and the smaller pair (c,d) goes first (258), then " cd".
BpeVocab train_tiny(int vocab_size, int min_frequency, std::vector<std::string> special = {"<|endoftext|>"}) {
  BpeTrainOptions opt;
  opt.vocab_size = vocab_size;
  opt.min_frequency = min_frequency;
  opt.special = std::move(special);
  BpeTrainer trainer(opt);
  trainer.add_document("ab ab ab cd");
  return trainer.finish();
}

TEST(BpeTrainer, MergesOfATinyCorpusByHand) {
  const BpeVocab v = train_tiny(1000, 1);
  EXPECT_EQ(v.merges, (Merges{{A, B}, {SPACE, 256}, {C, D}, {SPACE, 258}}));
  ASSERT_EQ(v.tokens.size(), 261u);  // every piece is one token after 4 merges: training stops there
  EXPECT_EQ(v.tokens[A], "a");
  EXPECT_EQ(v.tokens[SPACE], " ");
  EXPECT_EQ(v.tokens[256], "ab");
  EXPECT_EQ(v.tokens[257], " ab");
  EXPECT_EQ(v.tokens[258], "cd");
  EXPECT_EQ(v.tokens[259], " cd");
  EXPECT_EQ(v.rule, BpeMergeRule::pair_rank);
}

TEST(BpeTrainer, MinFrequencyStopsEarly) {
  const BpeVocab v = train_tiny(1000, 2);  // only (a,b) at 3 and (' ',ab) at 2 reach 2
  EXPECT_EQ(v.merges, (Merges{{A, B}, {SPACE, 256}}));
  EXPECT_EQ(v.tokens.size(), 259u);
  EXPECT_EQ(train_tiny(1000, 4).merges, Merges{});
}

TEST(BpeTrainer, VocabSizeHonouredAndSpecialsLast) {
  const BpeVocab v = train_tiny(259, 1);  // 256 bytes + 2 merges + 1 special
  EXPECT_EQ(v.merges.size(), 2u);
  ASSERT_EQ(v.tokens.size(), 259u);
  EXPECT_EQ(v.special, (std::vector<std::pair<std::string, int32_t>>{{"<|endoftext|>", 258}}));

  const BpeVocab w = train_tiny(300, 1, {"<|endoftext|>", "<|pad|>"});
  ASSERT_EQ(w.tokens.size(), 262u);  // stopped after 4 merges, then the two specials in the order given
  EXPECT_EQ(w.tokens[260], "<|endoftext|>");
  EXPECT_EQ(w.tokens[261], "<|pad|>");
  EXPECT_EQ(w.special[1], (std::pair<std::string, int32_t>{"<|pad|>", 261}));
  EXPECT_THROW(train_tiny(256, 1), Error);  // no room for the special token
}

// Random documents over a small alphabet, so pairs tie often and many merges depend on the tie rule.
std::vector<std::string> random_documents(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  const std::string alphabet = "abcde \n.,'1\xc3\xa9";
  std::vector<std::string> docs(size_t(n), "");
  for (std::string& d : docs)
    for (int i = int(rng() % 400); i > 0; --i) d += alphabet[rng() % alphabet.size()];
  return docs;
}

BpeVocab train_threads(const std::vector<std::string>& docs, int threads) {
  BpeTrainOptions opt;
  opt.vocab_size = 700;
  BpeTrainer trainer(opt);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (size_t i = size_t(t); i < docs.size(); i += size_t(threads)) trainer.add_document(docs[i]);
    });
  for (std::thread& t : pool) t.join();
  return trainer.finish();
}

TEST(BpeTrainer, SameVocabularyOnAnyNumberOfThreads) {
  const std::vector<std::string> docs = random_documents(300, 7);
  const BpeVocab one = train_threads(docs, 1);
  EXPECT_GT(one.merges.size(), 100u);
  for (int threads : {2, 3, 8}) {
    const BpeVocab many = train_threads(docs, threads);
    EXPECT_EQ(many.merges, one.merges) << threads << " threads";
    EXPECT_EQ(many.tokens, one.tokens) << threads << " threads";
  }
}

TEST(BpeTrainer, WrittenFilesLoadBackToTheSameIds) {
  const BpeVocab v = train_tiny(1000, 1);
  const TokenizerFiles files = bpe_vocab_to_files(v);
  EXPECT_EQ(files.at("merges.txt"), "#version: 0.2\na b\nĠ ab\nc d\nĠ cd\n");
  for (const char* only : {"tokenizer.json", "vocab.json"}) {
    TokenizerFiles subset;
    subset[only] = files.at(only);
    if (std::string(only) == "vocab.json") subset["merges.txt"] = files.at("merges.txt");
    const std::unique_ptr<Tokenizer> tok = tokenizer_from_files(subset, std::string("test ") + only);
    EXPECT_EQ(tok->vocab_size(), 261) << only;
    EXPECT_EQ(tok->eot_id(), std::optional<int32_t>(260)) << only;
    EXPECT_EQ(tok->encode("ab ab ab cd"), (std::vector<int32_t>{256, 257, 257, 259})) << only;
    EXPECT_EQ(tok->encode("cab"), (std::vector<int32_t>{C, 256})) << only;
    std::vector<int32_t> ids;
    tok->encode_with_special_into("ab<|endoftext|> cd", ids);
    EXPECT_EQ(ids, (std::vector<int32_t>{256, 260, 259})) << only;
    EXPECT_EQ(tok->decode(ids), "ab<|endoftext|> cd") << only;
  }
}

TEST(BpeTrainer, TrainedOnRandomTextRoundTrips) {
  const std::vector<std::string> docs = random_documents(100, 11);
  const BpeVocab v = train_threads(docs, 2);
  const std::unique_ptr<Tokenizer> tok = tokenizer_from_files(bpe_vocab_to_files(v), "test");
  EXPECT_EQ(tok->vocab_size(), int(v.tokens.size()));
  for (const std::string& d : docs) {
    const std::vector<int32_t> ids = tok->encode(d);
    EXPECT_EQ(tok->decode(ids), d);
    // Every id is a whole piece or a merge product: the text must not come out as single bytes.
    if (d.size() > 50) EXPECT_LT(ids.size(), d.size());
  }
}

}  // namespace
}  // namespace ember
