// Tests for `ember prep`: every input format and compression, the val and enwik split rules, and bad input (named,
// and leaving earlier outputs alone).
#include <gtest/gtest.h>
#include <zip.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "data/corpus_reader.h"
#include "data/data_loader.h"
#include "data/prep.h"
#include "data/shard.h"
#include "prep_test_util.h"

namespace ember {
namespace {

namespace fs = std::filesystem;

void write_zip(const std::string& path, const std::string& member, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  int err = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &err);
  ASSERT_NE(z, nullptr);
  zip_source_t* src = zip_source_buffer(z, text.data(), text.size(), 0);
  ASSERT_GE(zip_file_add(z, member.c_str(), src, ZIP_FL_OVERWRITE), 0);
  ASSERT_EQ(zip_close(z), 0);
}

TEST(Prep, DirectoryWithBinaryAndHiddenFiles) {
  TempDir tmp;
  const std::string in = tmp / "corpus", out = tmp / "shards";
  const std::string a = "hello world\n", b = "second \xC3\xA9 file\n", d = std::string(37, 'z') + "\n";
  write_bytes(in + "/a.txt", a);
  write_bytes(in + "/sub/b.txt", b);
  write_bytes(in + "/sub/d.md", d);
  write_bytes(in + "/bin.dat", std::string("PK\0\3binary", 10));
  write_bytes(in + "/.git/config", "[core]\n");
  write_bytes(in + "/.hidden.txt", "hidden\n");
  const std::string all = a + b + d;  // sorted path order: a.txt, (bin.dat skipped), sub/b.txt, sub/d.md

  PrepOptions o = prep_options(in, out);
  o.val_fraction = 0.25;
  o.shard_tokens = 8;
  const PrepResult r = prepare_corpus(o);
  // Plain files and the bytes tokenizer: the val split is exactly the last ceil(0.25 n) bytes.
  const size_t n = all.size(), n_val = size_t(std::ceil(0.25 * double(n)));
  EXPECT_EQ(r.files, 3u);
  EXPECT_EQ(r.binary_files, 1u);
  EXPECT_EQ(r.train.tokens + r.val.tokens, n);
  EXPECT_EQ(r.val.tokens, n_val);
  EXPECT_EQ(size_t(r.train.shards), (n - n_val + 7) / 8);
  EXPECT_EQ(size_t(r.val.shards), (n_val + 7) / 8);
  EXPECT_EQ(r.train.documents + r.val.documents, 3u);
  EXPECT_EQ(list_shards(out, "train").size(), size_t(r.train.shards));
  EXPECT_EQ(read_split(out, "train") + read_split(out, "val"), all);
  EXPECT_EQ(read_split(out, "val"), all.substr(n - n_val));
  for (const auto& e : fs::directory_iterator(out))  // no staging or temp files left behind
    EXPECT_TRUE(e.path().extension() == ".bin" || e.path().filename() == "prep.json") << e.path();
  const std::optional<PrepManifest> m = read_prep_manifest(out);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->tokenizer.kind, "bytes");
  EXPECT_EQ(m->token_bytes, 2);
  EXPECT_EQ(m->format, "text");
  EXPECT_EQ(m->splits.at("val").tokens, n_val);
  EXPECT_EQ(m->splits.count("test"), 0u);

  DataLoader dl(out, "train", 4, 256, 1, true);
  EXPECT_EQ(dl.num_tokens(), r.train.tokens);

  // Re-prep with bigger shards: refused over the earlier shards unless overwrite is set; then the stale
  // higher-index shards are gone.
  o.shard_tokens = 1000;
  const auto before = snapshot(out);
  expect_error([&] { prepare_corpus(o); }, {out, "exists"});
  EXPECT_EQ(snapshot(out), before);
  o.overwrite = true;
  const PrepResult r2 = prepare_corpus(o);
  // The earlier output was moved aside whole, not deleted.
  size_t aside = 0;
  for (const auto& e : fs::directory_iterator(tmp.str()))
    if (e.path().filename().string().starts_with("shards.previous-")) aside += snapshot(e.path().string()) == before;
  EXPECT_EQ(aside, 1u);
  EXPECT_EQ(r2.train.shards, 1);
  EXPECT_EQ(list_shards(out, "train").size(), 1u);
  EXPECT_EQ(list_shards(out, "val").size(), 1u);
  EXPECT_EQ(read_split(out, "train") + read_split(out, "val"), all);
}

TEST(Prep, SingleFileAndZeroValFraction) {
  TempDir tmp;
  write_bytes(tmp / "input.txt", "abcdefghij");
  PrepOptions o = prep_options(tmp / "input.txt", tmp / "out");
  o.val_fraction = 0.0;
  const PrepResult r = prepare_corpus(o);
  EXPECT_EQ(r.train.tokens, 10u);
  EXPECT_EQ(r.val.tokens, 0u);
  EXPECT_EQ(r.val.shards, 0);
  EXPECT_EQ(read_split(tmp / "out", "train"), "abcdefghij");

  o.val_fraction = 0.01;  // a tiny corpus with val_fraction > 0 still gets a val shard
  o.overwrite = true;
  const PrepResult r2 = prepare_corpus(o);
  EXPECT_EQ(r2.val.tokens, 1u);
  EXPECT_EQ(read_split(tmp / "out", "val"), "j");
}

TEST(Prep, ValSplitByBytesAcrossFiles) {
  TempDir tmp;
  const std::string f1(100, 'a'), f2 = std::string(50, 'b') + std::string(50, 'c'), f3(100, 'd');
  write_bytes(tmp / "in/1.txt", f1);
  write_bytes(tmp / "in/2.txt", f2);
  write_bytes(tmp / "in/3.txt", f3);
  PrepOptions o = prep_options(tmp / "in", tmp / "out");
  o.val_fraction = 0.5;  // cut at byte 150: inside 2.txt, which is split there; 3.txt starts after it
  const PrepResult r = prepare_corpus(o);
  EXPECT_EQ(read_split(tmp / "out", "train"), f1 + std::string(50, 'b'));
  EXPECT_EQ(read_split(tmp / "out", "val"), std::string(50, 'c') + f3);
  EXPECT_EQ(r.train.documents, 2u);
  EXPECT_EQ(r.val.documents, 1u);
}

TEST(Prep, MissingOrEmptyInputLeavesOutputUntouched) {
  TempDir tmp;
  write_bytes(tmp / "corpus/a.txt", std::string(100, 'q'));
  PrepOptions o = prep_options(tmp / "corpus", tmp / "shards");
  o.shard_tokens = 30;
  prepare_corpus(o);
  const auto before = snapshot(tmp / "shards");
  ASSERT_GE(before.size(), 5u);

  o.input = tmp / "no_such_corpus";
  o.overwrite = true;  // even where replacing the shards is allowed, a bad input writes nothing
  expect_error([&] { prepare_corpus(o); }, {tmp / "no_such_corpus"});
  EXPECT_EQ(snapshot(tmp / "shards"), before);

  write_bytes(tmp / "binonly/x.bin", std::string("\0\1\2", 3));
  o.input = tmp / "binonly";
  expect_error([&] { prepare_corpus(o); }, {tmp / "binonly"});
  EXPECT_EQ(snapshot(tmp / "shards"), before);

  // Only blank JSONL lines: found empty while streaming, still nothing published.
  write_bytes(tmp / "blank.jsonl", "\n\n  \n");
  o.input = tmp / "blank.jsonl";
  expect_error([&] { prepare_corpus(o); }, {tmp / "blank.jsonl", "no text"});
  EXPECT_EQ(snapshot(tmp / "shards"), before);
}

TEST(Prep, RejectsBadOptions) {
  TempDir tmp;
  write_bytes(tmp / "a.txt", "some text\n");
  PrepOptions o = prep_options(tmp / "a.txt", tmp / "out");
  o.val_fraction = 0.9;
  expect_error([&] { prepare_corpus(o); }, {"val_fraction"});
  EXPECT_FALSE(fs::exists(tmp / "out")) << "nothing may be written before validation passes";
  o.val_fraction = 0.1;
  o.tokenizer = "nope";
  expect_error([&] { prepare_corpus(o); }, {"nope"});
  o.tokenizer = "bytes";
  o.format = "xml";
  expect_error([&] { prepare_corpus(o); }, {"xml"});
  o.format = "auto";
  write_bytes(tmp / "afile", "x");
  o.output = tmp / "afile";
  expect_error([&] { prepare_corpus(o); }, {tmp / "afile"});
  EXPECT_EQ(read_bytes(tmp / "afile"), "x");
  write_bytes(tmp / "empty.txt", "");
  o.input = tmp / "empty.txt";
  o.output = tmp / "out";
  expect_error([&] { prepare_corpus(o); }, {tmp / "empty.txt"});
  EXPECT_FALSE(fs::exists(tmp / "out"));
}

TEST(Prep, CompressedInputs) {
  TempDir tmp;
  const std::string text = make_text(300000, 1);
  write_bytes(tmp / "gz/a.txt.gz", gzip(text));
  write_bytes(tmp / "zst/a.txt.zst", zstd(text));
  write_zip(tmp / "a.zip", "a.txt", text);
  write_bytes(tmp / "renamed/a.txt", gzip(text));  // by magic bytes, not by name
  for (const std::string in : {tmp / "gz", tmp / "zst", tmp / "a.zip", tmp / "renamed"}) {
    const std::string out = in + ".out";
    PrepOptions o = prep_options(in, out);
    const PrepResult r = prepare_corpus(o);
    EXPECT_EQ(read_split(out, "train") + read_split(out, "val"), text) << in;
    EXPECT_GT(r.val.tokens, 0u) << in;
    EXPECT_EQ(r.train.documents, 1u) << in;
  }
}

TEST(Prep, TruncatedOrCorruptCompressedInputIsNamed) {
  TempDir tmp;
  const std::string text = make_text(200000, 2), gz = gzip(text), zs = zstd(text);
  write_bytes(tmp / "ok.txt", "fine\n");
  PrepOptions o = prep_options(tmp / "ok.txt", tmp / "out");
  prepare_corpus(o);
  const auto before = snapshot(tmp / "out");
  o.overwrite = true;
  write_bytes(tmp / "t.gz", gz.substr(0, gz.size() / 2));
  o.input = tmp / "t.gz";
  expect_error([&] { prepare_corpus(o); }, {tmp / "t.gz", "truncated gzip stream"});
  write_bytes(tmp / "t.zst", zs.substr(0, zs.size() / 2));
  o.input = tmp / "t.zst";
  expect_error([&] { prepare_corpus(o); }, {tmp / "t.zst", "truncated zstd stream"});
  std::string bad = gz;
  for (size_t i = 100; i < 200; ++i) bad[i] = char(~bad[i]);
  write_bytes(tmp / "c.gz", bad);
  o.input = tmp / "c.gz";
  expect_error([&] { prepare_corpus(o); }, {tmp / "c.gz", "gzip"});
  EXPECT_EQ(snapshot(tmp / "out"), before);
}

TEST(Prep, Jsonl) {
  TempDir tmp;
  const std::string lines =
      "{\"text\": \"first doc\\n\", \"id\": 1}\n\n{\"id\": 2, \"text\": \"caf\\u00e9\"}\n   \n{\"text\": \"third\"}";
  write_bytes(tmp / "d.jsonl", lines);
  PrepOptions o = prep_options(tmp / "d.jsonl", tmp / "out");
  o.val_fraction = 0.0;
  const PrepResult r = prepare_corpus(o);
  EXPECT_EQ(read_split(tmp / "out", "train"), "first doc\ncaf\xC3\xA9third");
  EXPECT_EQ(r.train.documents, 3u);
  EXPECT_EQ(read_prep_manifest(tmp / "out")->format, "jsonl");

  // Another field by --jsonl-field; compressed JSONL found by name under the suffix.
  write_bytes(tmp / "z/d.jsonl.zst", zstd("{\"body\": \"xyz\"}\n{\"body\": \"w\"}\n"));
  o = prep_options(tmp / "z", tmp / "out2");
  o.jsonl_field = "body";
  o.val_fraction = 0.0;
  EXPECT_EQ(prepare_corpus(o).train.documents, 2u);
  EXPECT_EQ(read_split(tmp / "out2", "train"), "xyzw");
}

TEST(Prep, JsonlBadLines) {
  TempDir tmp;
  const std::map<std::string, std::string> cases = {{"not valid JSON", "{\"text\": \"a\"}\n\n{oops\n"},
                                                    {"not a JSON object", "{\"text\": \"a\"}\n\n[1, 2]\n"},
                                                    {"no \"text\" field", "{\"text\": \"a\"}\n\n{\"t\": \"b\"}\n"},
                                                    {"not a string", "{\"text\": \"a\"}\n\n{\"text\": 5}\n"}};
  for (const auto& [what, body] : cases) {
    write_bytes(tmp / "bad.jsonl", body + "{\"text\": \"z\"}\n");
    PrepOptions o = prep_options(tmp / "bad.jsonl", tmp / "out");
    expect_error([&] { prepare_corpus(o); }, {tmp / "bad.jsonl", "line 3", what});
    EXPECT_FALSE(fs::exists(tmp / "out")) << what;
    o.skip_bad_lines = true;
    o.val_fraction = 0.0;
    const PrepResult r = prepare_corpus(o);
    EXPECT_EQ(r.bad_lines, 1u) << what;
    EXPECT_EQ(r.train.documents, 2u) << what;
    EXPECT_EQ(read_split(tmp / "out", "train"), "az") << what;
    fs::remove_all(tmp / "out");
  }
}

TEST(Prep, EnwikSplits) {
  TempDir tmp;
  const std::string text = make_text(1000003, 3);
  write_bytes(tmp / "plain/enwik8", text);
  write_zip(tmp / "zip/enwik8.zip", "enwik8", text);
  for (const std::string in : {tmp / "plain/enwik8", tmp / "zip/enwik8.zip"}) {
    const std::string out = in + ".out";
    PrepOptions o = prep_options(in, out);
    o.val_fraction = 0.2;  // does not apply to enwik
    const PrepResult r = prepare_corpus(o);
    EXPECT_EQ(r.train.tokens, 900002u) << in;
    EXPECT_EQ(r.val.tokens, 50000u) << in;
    EXPECT_EQ(r.test.tokens, 50001u) << in;
    EXPECT_EQ(read_split(out, "train"), text.substr(0, 900002)) << in;
    EXPECT_EQ(read_split(out, "val"), text.substr(900002, 50000)) << in;
    EXPECT_EQ(read_split(out, "test"), text.substr(950002)) << in;
    const std::optional<PrepManifest> m = read_prep_manifest(out);
    ASSERT_TRUE(m);
    EXPECT_EQ(m->format, "enwik");
    EXPECT_EQ(m->splits.at("test").tokens, 50001u);
  }
  uint64_t b[3];
  enwik_split_bytes(100000000, b);
  EXPECT_EQ(b[0], 90000000u);
  EXPECT_EQ(b[1], 5000000u);
  EXPECT_EQ(b[2], 5000000u);
}
}  // namespace
}  // namespace ember
