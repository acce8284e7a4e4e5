// Tests for the byte-level BPE tokenizer: one small vocabulary in the three file formats, the two merge rules where
// they disagree, round trips, special tokens, cut points, malformed files, long runs and how encoding time grows with
// them.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../data/data_test_util.h"
#include "core/error.h"
#include "test_rng.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"

namespace ember {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Ids = std::vector<int32_t>;

void write_file(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

// A vocabulary: ids 0..255 are the bytes themselves, then one token per merge, then <|endoftext|>.
struct TinyVocab {
  std::vector<std::string> tokens;
  std::vector<std::pair<std::string, std::string>> merges;  // raw bytes of each side
  explicit TinyVocab(const std::vector<std::pair<std::string, std::string>>& m) : merges(m) {
    for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, char(b)));
    for (const auto& [a, b] : merges) tokens.push_back(a + b);
  }
  int32_t eot() const { return int32_t(tokens.size()); }
  json printable_vocab() const {
    json v = json::object();
    for (size_t id = 0; id < tokens.size(); ++id) v[bytes_to_unicode(tokens[id])] = id;
    return v;
  }
  std::string merge_line(size_t r) const {
    return bytes_to_unicode(merges[r].first) + " " + bytes_to_unicode(merges[r].second);
  }
  void write_vocab_merges(const std::string& dir) const {
    json v = printable_vocab();
    v["<|endoftext|>"] = eot();
    write_file(dir + "/vocab.json", v.dump());
    std::string m = "#version: 0.2\n";
    for (size_t r = 0; r < merges.size(); ++r) m += merge_line(r) + "\n";
    write_file(dir + "/merges.txt", m);
  }
  json tokenizer_json(bool ignore_merges, bool array_merges) const {
    json merges_json = json::array();
    for (size_t r = 0; r < merges.size(); ++r)
      merges_json.push_back(array_merges
                                ? json::array({bytes_to_unicode(merges[r].first), bytes_to_unicode(merges[r].second)})
                                : json(merge_line(r)));
    return {
        {"version", "1.0"},
        {"normalizer", nullptr},
        {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
        {"added_tokens", json::array({{{"id", eot()}, {"content", "<|endoftext|>"}, {"special", true}}})},
        {"model",
         {{"type", "BPE"}, {"vocab", printable_vocab()}, {"merges", merges_json}, {"ignore_merges", ignore_merges}}}};
  }
  std::string tiktoken() const {
    static const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    for (size_t id = 0; id < tokens.size(); ++id) {
      const std::string& t = tokens[id];
      std::string enc;
      for (size_t i = 0; i < t.size(); i += 3) {
        uint32_t v = uint32_t((unsigned char)t[i]) << 16;
        if (i + 1 < t.size()) v |= uint32_t((unsigned char)t[i + 1]) << 8;
        if (i + 2 < t.size()) v |= uint32_t((unsigned char)t[i + 2]);
        enc += a[(v >> 18) & 63];
        enc += a[(v >> 12) & 63];
        enc += i + 1 < t.size() ? a[(v >> 6) & 63] : '=';
        enc += i + 2 < t.size() ? a[v & 63] : '=';
      }
      out += enc + " " + std::to_string(id) + "\n";
    }
    return out;
  }
};

// The merge rules agree on this one: each token splits into two tokens one way only, merges are in id order and
// every token is reachable from its bytes.
const TinyVocab& agreeing() {
  static const TinyVocab v({{"t", "h"}, {"th", "e"}, {" ", "the"}, {"i", "n"}, {"in", "g"}, {" ", "s"}});
  return v;
}
// Here "he" merges before "th", so BPE of "the" by merge ranks stops at "t" "he"; by token ranks "the" is a token.
const TinyVocab& disagreeing() {
  static const TinyVocab v({{"h", "e"}, {"t", "h"}, {"th", "e"}});
  return v;
}

struct Loaded {
  std::unique_ptr<Tokenizer> hf, json_strings, json_arrays, tiktoken;
};

Loaded load_all(const TinyVocab& v, const TempDir& dir, bool ignore_merges = false) {
  for (const char* sub : {"hf", "js", "ja", "tk"}) fs::create_directories(dir / sub);
  v.write_vocab_merges(dir / "hf");
  write_file(dir / "js/tokenizer.json", v.tokenizer_json(ignore_merges, false).dump());
  write_file(dir / "ja/tokenizer.json", v.tokenizer_json(ignore_merges, true).dump());
  write_file(dir / "tk/tiny.tiktoken", v.tiktoken());
  return {load_tokenizer(dir / "hf"), load_tokenizer(dir / "js"), load_tokenizer(dir / "ja/tokenizer.json"),
          load_tokenizer(dir / "tk")};
}

TEST(BpeTokenizer, ThreeFormatsGiveTheSameIds) {
  TempDir dir;
  const auto t = load_all(agreeing(), dir);
  const std::string text = "the thing he sings in the sing-song thesis, the end\n\nthe";
  const Ids ids = t.hf->encode(text);
  EXPECT_EQ(ids, t.json_strings->encode(text));
  EXPECT_EQ(ids, t.json_arrays->encode(text));
  EXPECT_EQ(ids, t.tiktoken->encode(text));
  EXPECT_EQ(t.hf->encode("the"), (Ids{257}));
  EXPECT_EQ(t.hf->encode(" the sing"), (Ids{258, 261, 260}));
  EXPECT_EQ(t.hf->decode(ids), text);
  EXPECT_EQ(t.hf->fingerprint(), t.json_strings->fingerprint());
  EXPECT_EQ(t.hf->fingerprint(), t.json_arrays->fingerprint());
  EXPECT_EQ(t.hf->fingerprint().size(), 16u);
  EXPECT_EQ(t.hf->fingerprint(), t.tiktoken->fingerprint());  // here merge ranks act as token ranks
  EXPECT_EQ(load_tokenizer(dir / "tk/tiny.tiktoken")->fingerprint(), t.tiktoken->fingerprint());
  for (const auto* tok : {t.hf.get(), t.json_strings.get(), t.tiktoken.get()}) {
    EXPECT_EQ(tok->eot_id(), agreeing().eot());
    EXPECT_EQ(tok->vocab_size(), agreeing().eot() + 1);
    EXPECT_EQ(tok->describe(), "bpe (263 ids, fingerprint " + tok->fingerprint() + ")");
  }
}

TEST(BpeTokenizer, EachRuleGivesItsOwnAnswer) {
  TempDir dir;
  const auto t = load_all(disagreeing(), dir);
  EXPECT_EQ(t.hf->encode("the"), (Ids{'t', 256}));  // "he" first, then nothing merges "t" with "he"
  EXPECT_EQ(t.json_strings->encode("the"), (Ids{'t', 256}));
  EXPECT_EQ(t.tiktoken->encode("the"), (Ids{258}));        // a token, taken whole
  EXPECT_EQ(t.tiktoken->encode("tthe"), (Ids{'t', 258}));  // (t, he) -> "the" at rank 258 beats nothing
  EXPECT_EQ(t.hf->encode("thx"), (Ids{257, 'x'}));
  EXPECT_NE(t.hf->fingerprint(), t.tiktoken->fingerprint());  // the rules differ, and so may the ids
  TempDir dir2;
  const auto ignoring = load_all(disagreeing(), dir2, true);
  EXPECT_EQ(ignoring.json_strings->encode("the"), (Ids{258}));  // ignore_merges: the whole piece is a token
  EXPECT_EQ(ignoring.json_strings->encode("tthe"), (Ids{'t', 't', 256}));
  EXPECT_NE(ignoring.json_strings->fingerprint(), t.json_strings->fingerprint());
}

// Merge ranks without ignore_merges take a piece whole only where merging its bytes reaches the token anyway.
TEST(BpeTokenizer, WholePieceShortcutMatchesMerging) {
  for (const TinyVocab* v : {&agreeing(), &disagreeing()}) {
    TempDir dir;
    const auto t = load_all(*v, dir);
    const auto& bpe = dynamic_cast<const BpeTokenizer&>(*t.hf);
    for (size_t id = 256; id < v->tokens.size(); ++id) {
      Ids merged;
      bpe.merge_piece(v->tokens[id], merged);
      EXPECT_EQ(t.hf->encode(v->tokens[id]), merged) << v->tokens[id];
    }
  }
}

// Plain BPE, written for clarity: merge the leftmost adjacent pair of lowest priority until none merges.
Ids reference_bpe(const std::string& piece, const TinyVocab& v, BpeMergeRule rule) {
  std::map<std::string, int32_t> ids;
  for (size_t id = 0; id < v.tokens.size(); ++id) ids[v.tokens[id]] = int32_t(id);
  if (rule == BpeMergeRule::token_rank && ids.count(piece)) return {ids[piece]};
  std::map<std::pair<std::string, std::string>, int64_t> rank;
  for (size_t r = 0; r < v.merges.size(); ++r) rank.emplace(v.merges[r], int64_t(r));
  std::vector<std::string> parts;
  for (char c : piece) parts.push_back(std::string(1, c));
  for (;;) {
    int64_t best_priority = INT64_MAX;
    size_t best = 0;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      const std::string joined = parts[i] + parts[i + 1];
      int64_t priority = INT64_MAX;
      if (rule == BpeMergeRule::pair_rank && rank.count({parts[i], parts[i + 1]}))
        priority = rank[{parts[i], parts[i + 1]}];
      if (rule == BpeMergeRule::token_rank && ids.count(joined)) priority = ids[joined];
      if (priority < best_priority) best_priority = priority, best = i;
    }
    if (best_priority == INT64_MAX) break;
    parts[best] += parts[best + 1];
    parts.erase(parts.begin() + long(best) + 1);
  }
  Ids out;
  for (const auto& p : parts) out.push_back(ids.at(p));
  return out;
}

TEST(BpeTokenizer, MergesLeftmostLowestFirstAtAnyLength) {
  const TinyVocab v(
      {{"a", "a"}, {"a", "b"}, {"aa", "aa"}, {"ab", "a"}, {"b", "b"}, {"aa", "b"}, {"bb", "aa"}, {"aba", "aa"}});
  TempDir dir;
  const auto t = load_all(v, dir);
  EXPECT_EQ(t.hf->encode("aaaaa"), (Ids{258, 'a'}));  // aa a a a -> aa aa a -> aaaa a: ties go to the left
  Ids long_run;
  for (int i = 0; i < 25; ++i) long_run.push_back(258);
  long_run.push_back('a');
  EXPECT_EQ(t.hf->encode(std::string(101, 'a')), long_run);  // past the short-piece limit: the heap
  test::Rng rng(5, 4);
  for (int round = 0; round < 400; ++round) {
    std::string text(1 + rng.philox.below(round % 4 == 0 ? 300 : 40), 'a');
    for (char& c : text) c = rng.philox.below(3) ? 'a' : 'b';
    ASSERT_EQ(t.hf->encode(text), reference_bpe(text, v, BpeMergeRule::pair_rank)) << text;
    ASSERT_EQ(t.tiktoken->encode(text), reference_bpe(text, v, BpeMergeRule::token_rank)) << text;
  }
}

TEST(BpeTokenizer, RoundTripsRandomBytes) {
  TempDir dir;
  const auto t = load_all(agreeing(), dir);
  test::Rng rng(7, 2);
  const std::string alphabet = "the sing\n\xc3\xa9\xff";
  for (int round = 0; round < 200; ++round) {
    std::string text(rng.philox.below(300), '\0');
    for (char& c : text) c = round % 2 ? char(rng.philox.below(256)) : alphabet[rng.philox.below(alphabet.size())];
    for (const auto* tok : {t.hf.get(), t.tiktoken.get()}) {
      const Ids ids = tok->encode(text);
      ASSERT_EQ(tok->decode(ids), text) << "round " << round;
    }
    EXPECT_EQ(t.hf->encode(text), t.tiktoken->encode(text)) << "round " << round;
  }
}

TEST(BpeTokenizer, SpecialTokens) {
  TempDir dir;
  const auto t = load_all(agreeing(), dir);
  const int32_t eot = agreeing().eot();
  const Ids ordinary = t.hf->encode("a<|endoftext|>b");
  EXPECT_EQ(std::count(ordinary.begin(), ordinary.end(), eot), 0);
  EXPECT_EQ(t.hf->decode(ordinary), "a<|endoftext|>b");
  Ids with;
  t.hf->encode_with_special_into("the<|endoftext|><|endoftext|> the<|endoftext", with);
  Ids expected = {257, eot, eot, 258};
  const Ids tail = t.hf->encode("<|endoftext");
  expected.insert(expected.end(), tail.begin(), tail.end());
  EXPECT_EQ(with, expected);
  EXPECT_EQ(t.hf->decode(with), "the<|endoftext|><|endoftext|> the<|endoftext");
  expect_error([&] { t.hf->decode(Ids{257, 999}); }, {"999", "position 1"});
  expect_error([&] { t.hf->decode(Ids{-3}); }, {"-3", "position 0"});
}

TEST(BpeTokenizer, ChunkBoundaryIsASafeCut) {
  TempDir dir;
  const auto t = load_all(agreeing(), dir);
  test::Rng rng(11, 3);
  const std::vector<std::string> words = {"the", " ", "\n", "sing", "9", "'s", "!", ".\n", "\xc3\xa9", "  ", "\t", "x"};
  int cuts = 0;
  for (int round = 0; round < 300; ++round) {
    std::string text;
    for (size_t n = rng.philox.below(40); n > 0; --n) text += words[rng.philox.below(words.size())];
    const size_t p = t.hf->chunk_boundary(text, rng.philox.below(text.size() + 1));
    ASSERT_LE(p, text.size());
    if (p == text.size()) continue;
    ++cuts;
    Ids joined = t.hf->encode(text.substr(0, p));
    const Ids rest = t.hf->encode(text.substr(p));
    joined.insert(joined.end(), rest.begin(), rest.end());
    EXPECT_EQ(joined, t.hf->encode(text)) << "cut at " << p << " of '" << text << "'";
    EXPECT_EQ(encode_parallel(*t.hf, text, 3, 7), t.hf->encode(text)) << text;
  }
  EXPECT_GT(cuts, 100);
  EXPECT_EQ(t.hf->chunk_boundary("ab cd", 0), 2u);
  EXPECT_EQ(t.hf->chunk_boundary("a.\nb", 0), 3u);
  EXPECT_EQ(t.hf->chunk_boundary("a  b", 0), 1u);
  EXPECT_EQ(t.hf->chunk_boundary("a. b", 0), 4u);
}

// Runs of spaces and digits that merge at several levels: the heap path, O(n log n) rather than quadratic. The check
// is a growth ratio, not a time limit: a run 64 times longer may take at most 1024 times as long, where linear is 64
// and quadratic 4096. The margin is wide because a loaded machine slows the 1 MiB run more than the 16 KiB one (its
// working set leaves the caches others share: ratios up to 85 for 16x were measured beside two fuzzers and a build).
// Each size is the fastest of five encodes, taken back to back.
TEST(BpeTokenizer, LongRunsEncodeInNearLinearTime) {
  const TinyVocab v(
      {{" ", " "}, {"  ", "  "}, {"    ", "    "}, {"7", "7"}, {"77", "77"}, {"7777", "7777"}, {"e", "e"}});
  TempDir dir;
  const auto t = load_all(v, dir);
  const auto fastest = [](const Tokenizer& tok, const std::string& text) {
    double best = 1e30;
    for (int i = 0; i < 5; ++i) {
      const auto start = std::chrono::steady_clock::now();
      const Ids ids = tok.encode(text);
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      EXPECT_EQ(tok.decode(ids), text);
    }
    return best;
  };
  for (char c : {' ', '7', 'e', '.'}) {
    const std::string small = std::string(1 << 14, c) + "the", large = std::string(1 << 20, c) + "the";
    for (const auto* tok : {t.hf.get(), t.tiktoken.get()}) {
      const double ratio = fastest(*tok, large) / std::max(fastest(*tok, small), 1e-6);
      EXPECT_LT(ratio, 1024.0) << "a 1 MiB run of '" << c << "' against a 16 KiB one";
      if (c == '7') EXPECT_EQ(tok->encode(large).size(), (size_t(1) << 20) / 8 + 3);  // "77777777" x 131072, t, h, e
    }
  }
}

// Loads a folder holding `files`; the error must name each of `needles` (and a lone tokenizer file) with a hint.
void expect_load_error(const std::map<std::string, std::string>& files, const std::vector<std::string>& needles) {
  TempDir dir;
  for (const auto& [name, contents] : files) write_file(dir / name, contents);
  std::vector<std::string> all = needles;
  const std::string& first = files.begin()->first;
  if (files.size() == 1 && (first == "tokenizer.json" || fs::path(first).extension() == ".tiktoken"))
    all.push_back(first);
  expect_error([&] { load_tokenizer(dir.str()); }, all);
}

TEST(BpeTokenizer, MalformedVocabAndMerges) {
  const TinyVocab& v = agreeing();
  json good = v.printable_vocab();
  const std::string merges = "#version: 0.2\n" + v.merge_line(0) + "\n";
  auto with = [&](const std::string& key, const json& value) {
    json j = good;
    j[key] = value;
    return j.dump();
  };
  expect_load_error({{"vocab.json", with("\xe2\x82\xac", 300)}, {"merges.txt", merges}},
                    {"vocab.json", "\xe2\x82\xac"});
  expect_load_error({{"vocab.json", with("abc", "x")}, {"merges.txt", merges}}, {"vocab.json", "abc", "integer"});
  expect_load_error({{"vocab.json", with("abc", -5)}, {"merges.txt", merges}}, {"vocab.json", "abc", "-5"});
  expect_load_error({{"vocab.json", with("abc", 97)}, {"merges.txt", merges}}, {"vocab.json", "abc", "twice"});
  expect_load_error({{"vocab.json", with("abc", 3000000000LL)}, {"merges.txt", merges}},
                    {"vocab.json", "abc", "3000000000 is out of range"});
  expect_load_error({{"vocab.json", "{not json"}, {"merges.txt", merges}}, {"vocab.json", "JSON"});
  expect_load_error({{"vocab.json", good.dump()}, {"merges.txt", merges + "zz q\n"}}, {"merges.txt", "line 3", "zz"});
  expect_load_error({{"vocab.json", good.dump()}, {"merges.txt", merges + "q zz\n"}}, {"merges.txt", "line 3", "zz"});
  expect_load_error({{"vocab.json", good.dump()}, {"merges.txt", merges + "a b\n"}}, {"merges.txt", "line 3", "'ab'"});
  expect_load_error({{"vocab.json", good.dump()}, {"merges.txt", merges + "a\n"}}, {"merges.txt", "line 3"});
  json missing_byte = good;
  missing_byte.erase(bytes_to_unicode("A"));
  expect_load_error({{"vocab.json", missing_byte.dump()}, {"merges.txt", merges}}, {"0x41"});
}

TEST(BpeTokenizer, MalformedTokenizerJson) {
  const json good = agreeing().tokenizer_json(false, false);
  auto with = [&](const json::json_pointer& at, const json& value) {
    json j = good;
    j[at] = value;
    return std::map<std::string, std::string>{{"tokenizer.json", j.dump()}};
  };
  expect_load_error(with("/model/type"_json_pointer, "WordPiece"), {"WordPiece"});
  expect_load_error(with("/normalizer"_json_pointer, {{"type", "NFC"}}), {"normalizer"});
  expect_load_error(with("/pre_tokenizer/type"_json_pointer, "Whitespace"), {"Whitespace"});
  expect_load_error(with("/pre_tokenizer/add_prefix_space"_json_pointer, true), {"add_prefix_space"});
  expect_load_error(with("/pre_tokenizer/use_regex"_json_pointer, false), {"use_regex"});
  expect_load_error(with("/model/merges/1"_json_pointer, "t zz"), {"model.merges[1]", "zz"});
  expect_load_error(with("/model/merges/1"_json_pointer, 5), {"model.merges[1]"});
  expect_load_error(with("/model/vocab/abc"_json_pointer, 1.5), {"abc", "integer"});
  expect_load_error(with("/added_tokens/0/id"_json_pointer, 65), {"<|endoftext|>", "65"});
  expect_load_error(with("/added_tokens/0/id"_json_pointer, 99999999), {"<|endoftext|>", "99999999 is out of range"});
  // Fields of another type are errors naming them, not escaped library exceptions (found by fuzz_tokenizer_json:
  // "special": 1 stopped the program).
  expect_load_error(with("/added_tokens/0/special"_json_pointer, 1), {"added_tokens[0]", "\"special\" is 1"});
  expect_load_error(with("/added_tokens/0/content"_json_pointer, 7), {"added_tokens[0]", "\"content\" is 7"});
  expect_load_error(with("/added_tokens"_json_pointer, "x"), {"added_tokens is not a list"});
  expect_load_error(with("/added_tokens/0"_json_pointer, 3), {"added_tokens[0]: not an object"});
  expect_load_error(with("/model/merges"_json_pointer, {{"a", 1}}), {"model.merges is not a list"});
  expect_load_error(with("/model/type"_json_pointer, 5), {"\"type\" is 5"});
  expect_load_error(with("/model/ignore_merges"_json_pointer, "yes"), {"\"ignore_merges\" is \"yes\""});
  expect_load_error(with("/pre_tokenizer/type"_json_pointer, json::array()), {"pre_tokenizer", "\"type\" is []"});
  expect_load_error(with("/pre_tokenizer/use_regex"_json_pointer, 1), {"\"use_regex\" is 1"});
  // BPE settings that change the ids and that Ember does not implement; their GPT-2 values are accepted.
  expect_load_error(with("/model/dropout"_json_pointer, 0.1), {"model.dropout", "0.1"});
  expect_load_error(with("/model/end_of_word_suffix"_json_pointer, "</w>"), {"model.end_of_word_suffix", "</w>"});
  expect_load_error(with("/model/continuing_subword_prefix"_json_pointer, "##"), {"continuing_subword_prefix"});
  expect_load_error(with("/model/byte_fallback"_json_pointer, true), {"model.byte_fallback"});
  json gpt2_values = good;
  gpt2_values["model"].update({{"dropout", nullptr},
                               {"end_of_word_suffix", ""},
                               {"continuing_subword_prefix", ""},
                               {"byte_fallback", false},
                               {"fuse_unk", false},
                               {"unk_token", nullptr}});
  {
    TempDir d, g;
    write_file(d / "tokenizer.json", gpt2_values.dump());
    write_file(g / "tokenizer.json", good.dump());
    EXPECT_EQ(load_tokenizer(d.str())->fingerprint(), load_tokenizer(g.str())->fingerprint());
  }
  // Nesting past the bound is refused as it is read (a deeper document would make printers and walks recurse).
  expect_load_error({{"tokenizer.json", std::string(100000, '[') + std::string(100000, ']')}},
                    {"tokenizer.json", "nests deeper than 64 levels"});
  // A FIFO where a tokenizer file should be is refused, not waited on.
  {
    TempDir d;
    ASSERT_EQ(::mkfifo((d / "tokenizer.json").c_str(), 0644), 0);
    expect_error([&] { load_tokenizer(d / "tokenizer.json"); }, {"tokenizer.json", "FIFO"});
    expect_error([&] { load_tokenizer(d.str()); }, {"tokenizer.json", "FIFO"});
  }
  // A Sequence holding only ByteLevel is accepted; an added special token may bring an id of its own.
  json seq = good;
  seq["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", json::array({good["pre_tokenizer"]})}};
  seq["added_tokens"].push_back({{"id", 300}, {"content", "<|pad|>"}, {"special", true}});
  TempDir dir;
  write_file(dir / "tokenizer.json", seq.dump());
  const auto t = load_tokenizer(dir.str());
  EXPECT_EQ(t->vocab_size(), 301);
  Ids ids;
  t->encode_with_special_into("the<|pad|>", ids);
  EXPECT_EQ(ids, (Ids{257, 300}));
  expect_error([&] { t->decode(Ids{290}); }, {"290", "unused"});
}

TEST(BpeTokenizer, MalformedTiktokenAndSpecs) {
  const std::string good = agreeing().tiktoken();
  const std::string bad_line = "line " + std::to_string(agreeing().tokens.size() + 1);  // the line appended
  expect_load_error({{"x.tiktoken", good + "!!! 400\n"}}, {bad_line});
  expect_load_error({{"x.tiktoken", good + "dGhl 400\n"}}, {bad_line, "twice"});
  expect_load_error({{"x.tiktoken", good + "YWJj 3\n"}}, {bad_line, "id 3"});
  expect_load_error({{"x.tiktoken", good + "YWJj -3\n"}}, {bad_line});
  // A rank far past the others would size the table by it (found by fuzz_tiktoken: 5.5 GB for rank 174,443,000).
  expect_load_error({{"x.tiktoken", good + "YWJj 174443000\n"}}, {bad_line, "id 174443000 is out of range"});
  expect_load_error({{"x.tiktoken", good.substr(good.find('\n') + 1)}}, {"byte 0"});
  expect_load_error({{"a.tiktoken", good}, {"b.tiktoken", good}}, {"a.tiktoken", "b.tiktoken"});
  expect_load_error({{"notes.txt", ""}}, {"no tokenizer.json"});
  expect_error([] { load_tokenizer("/nonexistent/tok"); }, {"/nonexistent/tok", "does not exist"});
  TempDir dir;
  write_file(dir / "big.tiktoken", std::string((64 << 20) + 1, 'A'));
  expect_error([&] { load_tokenizer(dir / "big.tiktoken"); }, {"big.tiktoken"});
}

TEST(BpeTokenizer, FilesRebuildTheSameTokenizer) {
  TempDir dir;
  const auto t = load_all(disagreeing(), dir);
  for (const auto* tok : {t.hf.get(), t.json_arrays.get(), t.tiktoken.get()}) {
    const auto again = tokenizer_from_files(tok->files(), "checkpoint x.h5");
    EXPECT_EQ(again->fingerprint(), tok->fingerprint());
    EXPECT_EQ(again->encode("tthe the"), tok->encode("tthe the"));
    TempDir copy;
    write_tokenizer_files(*tok, copy.str());
    EXPECT_EQ(load_tokenizer(copy.str())->fingerprint(), tok->fingerprint());
  }
  expect_error([] { tokenizer_from_files({{"readme", "x"}}, "checkpoint x.h5"); }, {"checkpoint x.h5", "readme"});
  auto files = t.hf->files();
  files["merges.txt"] += "q zz\n";
  expect_error([&] { tokenizer_from_files(files, "checkpoint x.h5"); }, {"checkpoint x.h5", "merges.txt", "zz"});
}

}  // namespace
}  // namespace ember
