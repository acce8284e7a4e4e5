// Tests for the prep pipeline and shard writer: shards independent of the thread count, end-of-text placement and
// chunk-boundary cuts with a test tokenizer, uint32 shards through the DataLoader, unfinished shards.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "data/corpus_reader.h"
#include "data/data_loader.h"
#include "data/prep.h"
#include "data/prep_pipeline.h"
#include "data/shard.h"
#include "prep_test_util.h"
#include "tokenizer/tokenizer.h"

namespace ember {
namespace {

namespace fs = std::filesystem;

TEST(PrepPipeline, ShardsDoNotDependOnThreads) {
  TempDir tmp;
  // Several MB, so the pieces (1 MiB) are many and the encoders really run out of order.
  for (int i = 0; i < 3; ++i) write_bytes(tmp / ("in/t" + std::to_string(i) + ".txt"), make_text(1500000 + i, i));
  std::string jsonl;
  for (int i = 0; i < 20000; ++i) {
    std::string doc = make_text(60 + i % 30, i);
    std::replace(doc.begin(), doc.end(), '\n', ' ');
    jsonl += "{\"text\": \"" + doc + "\"}\n";
  }
  write_bytes(tmp / "in/u.jsonl", jsonl);
  std::map<std::string, std::string> first;
  for (int threads : {1, 4}) {
    PrepOptions o = prep_options(tmp / "in", tmp / ("out" + std::to_string(threads)));
    o.threads = threads;
    o.shard_tokens = 1000000;
    prepare_corpus(o);
    std::map<std::string, std::string> files;
    for (const auto& [path, bytes] : snapshot(o.output)) files[fs::path(path).filename().string()] = bytes;
    if (first.empty())
      first = files;
    else
      EXPECT_TRUE(files == first) << "threads " << threads;
  }
  EXPECT_GE(first.size(), 6u);
}

TEST(PrepPipeline, Uint32RoundTripAndDataLoader) {
  TempDir dir;
  std::vector<uint32_t> tokens(41);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = uint32_t(70000 + i);
  write_shard_u32(dir / "train_000000.bin", tokens);
  const ShardInfo info = read_shard_info(dir / "train_000000.bin");
  EXPECT_EQ(info.tokens, 41u);
  EXPECT_EQ(info.token_bytes, 4);
  EXPECT_EQ(fs::file_size(dir / "train_000000.bin"), SHARD_HEADER_BYTES + 41 * 4);
  EXPECT_EQ(read_shard_tokens(dir / "train_000000.bin"), tokens);
  expect_error([&] { read_shard(dir / "train_000000.bin"); }, {dir / "train_000000.bin", "uint32"});

  DataLoader dl(dir.str(), "train", 4, 70041, 1, false);
  std::vector<int32_t> x(8), y(8);
  dl.next_batch(x.data(), y.data(), 2);
  EXPECT_EQ(x[0], 70000);
  EXPECT_EQ(y[3], 70004);
  EXPECT_EQ(x[4], 70004);
  expect_error([&] { DataLoader bad(dir.str(), "train", 4, 70040, 1, false); },
               {dir / "train_000000.bin", "70040", "vocab"});
}

TEST(PrepPipeline, UnfinishedWriterLeavesNoShard) {
  TempDir dir;
  const std::string path = dir / "train_000000.bin";
  {
    ShardWriter w(path, 2);
    const std::vector<uint16_t> tokens(3000000, 7);  // more than the write buffer, so some of it is on disk
    w.append(tokens.data(), tokens.size());
    EXPECT_FALSE(fs::exists(path));
    // What an interrupted prep would leave: a temp file whose zero header no reader accepts.
    expect_error([&] { read_shard_info(path + ".tmp"); }, {path + ".tmp", "bad magic 0"});
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  ShardWriter w(path, 2);
  const uint16_t t[2] = {1, 2};
  w.append(t, 2);
  w.finish();
  EXPECT_EQ(read_shard(path), (std::vector<uint16_t>{1, 2}));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

// Bytes plus an end-of-text id 256; cuts only after a newline, like a pre-tokenizer that never merges across one.
class EotBytes final : public Tokenizer {
 public:
  TokenizerKind kind() const override { return TokenizerKind::bytes; }
  std::string describe() const override { return "test eot bytes"; }
  int vocab_size() const override { return 257; }
  std::optional<int32_t> eot_id() const override { return 256; }
  void encode_into(std::string_view text, std::vector<int32_t>& out) const override {
    for (unsigned char c : text) out.push_back(c);
  }
  void encode_with_special_into(std::string_view text, std::vector<int32_t>& out) const override {
    encode_into(text, out);
  }
  std::string decode(std::span<const int32_t>) const override { return {}; }
  size_t chunk_boundary(std::string_view text, size_t from) const override {
    if (from == 0 || from >= text.size()) return std::min(from, text.size());
    const size_t nl = text.find('\n', from - 1);
    return nl == std::string_view::npos ? text.size() : nl + 1;
  }
  std::string fingerprint() const override { return "test"; }
  TokenizerFiles files() const override { return {}; }
};

std::map<Split, std::vector<int32_t>> run_eot(const CorpusPlan& plan, double val_fraction, int threads) {
  EotBytes tok;
  PipelineOptions opt;
  opt.reader.val_fraction = val_fraction;
  opt.threads = threads;
  std::map<Split, std::vector<int32_t>> out;
  run_prep_pipeline(plan, tok, opt, [&](EncodedPiece&& p) {
    const uint16_t* t = reinterpret_cast<const uint16_t*>(p.tokens.data());
    out[p.split].insert(out[p.split].end(), t, t + p.n_tokens);
  });
  return out;
}

std::vector<int32_t> ids(const std::string& s) { return std::vector<int32_t>(s.begin(), s.end()); }

TEST(PrepPipeline, EotPrecedesEveryDocumentAndCutsAtBoundaries) {
  TempDir tmp;
  write_bytes(tmp / "d.jsonl", "{\"text\": \"ab\"}\n\n{\"text\": \"cd\"}\n");
  auto r = run_eot(plan_corpus(tmp / "d.jsonl", "auto"), 0.0, 2);
  std::vector<int32_t> want = {256, 'a', 'b', 256, 'c', 'd'};
  EXPECT_EQ(r[Split::train], want);

  // Two text files, val cut at byte 15 of 30: inside the second file, which is cut at its next newline (byte 18);
  // the val part continues that document, so it gets no end-of-text id.
  write_bytes(tmp / "in/1.txt", "0123456789");
  write_bytes(tmp / "in/2.txt", "ab\ncd\nef\ngh\nij\n");
  write_bytes(tmp / "in/3.txt", "xyzxy");
  r = run_eot(plan_corpus(tmp / "in", "auto"), 0.5, 3);
  want = ids("0123456789");
  want.insert(want.begin(), 256);
  want.push_back(256);
  for (int32_t c : ids("ab\ncd\n")) want.push_back(c);
  EXPECT_EQ(r[Split::train], want);
  want = ids("ef\ngh\nij\n");
  want.push_back(256);
  for (int32_t c : ids("xyzxy")) want.push_back(c);
  EXPECT_EQ(r[Split::val], want);

  // A long document is cut into pieces only after newlines, so every piece but the last ends with one.
  const std::string big = make_text(3000000, 9);
  write_bytes(tmp / "big.txt", big);
  EotBytes tok;
  CorpusReaderOptions ro;
  ro.val_fraction = 0.0;
  std::string joined;
  size_t pieces = 0;
  read_corpus(plan_corpus(tmp / "big.txt", "auto"), tok, ro, [&](CorpusPiece&& p) {
    if (joined.size() + p.text.size() < big.size()) EXPECT_EQ(p.text.back(), '\n');
    EXPECT_EQ(p.doc_start, pieces == 0);
    joined += p.text;
    ++pieces;
  });
  EXPECT_EQ(joined, big);
  EXPECT_GE(pieces, 2u);
}
}  // namespace
}  // namespace ember
