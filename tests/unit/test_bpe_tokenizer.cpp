// Tests for the byte-level BPE tokenizer: one small vocabulary in the three file formats, the two merge rules where
// they disagree, round trips, special tokens, cut points, malformed files, long runs and encoding speed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/bpe_tokenizer.h"
#include "data/byte_level.h"
#include "data/tokenizer.h"
#include "test_rng.h"

namespace ember {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Ids = std::vector<int32_t>;

class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = fs::path(::testing::TempDir()) /
            ("ember_test_bpe_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string str() const { return path_.string(); }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

void write_file(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

void expect_error(const std::function<void()>& fn, const std::vector<std::string>& needles) {
  try {
    fn();
    ADD_FAILURE() << "expected an ember::Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "message is not one line: " << msg;
    for (const std::string& needle : needles)
      EXPECT_NE(msg.find(needle), std::string::npos) << msg << "\n  lacks: " << needle;
    EXPECT_FALSE(e.hint().empty()) << msg;
  }
}

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

// The merge rules agree on this one: merges are in id order and every token is reachable from its bytes.
const TinyVocab& agreeing() {
  static const TinyVocab v({{"t", "h"}, {"th", "e"}, {" ", "the"}, {"i", "n"}, {"in", "g"}, {" ", "s"}, {"h", "e"}});
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
  // Token ranks are another rule, which can encode differently: another fingerprint, stable across loads.
  EXPECT_NE(t.hf->fingerprint(), t.tiktoken->fingerprint());
  EXPECT_EQ(load_tokenizer(dir / "tk/tiny.tiktoken")->fingerprint(), t.tiktoken->fingerprint());
  for (const auto* tok : {t.hf.get(), t.json_strings.get(), t.tiktoken.get()}) {
    EXPECT_EQ(tok->eot_id(), agreeing().eot());
    EXPECT_EQ(tok->vocab_size(), agreeing().eot() + 1);
    EXPECT_EQ(tok->describe(), "bpe (264 ids, fingerprint " + tok->fingerprint() + ")");
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
  TempDir dir2;
  const auto ignoring = load_all(disagreeing(), dir2, true);
  EXPECT_EQ(ignoring.json_strings->encode("the"), (Ids{258}));  // ignore_merges: the whole piece is a token
  EXPECT_EQ(ignoring.json_strings->encode("tthe"), (Ids{'t', 't', 256}));
  EXPECT_NE(ignoring.json_strings->fingerprint(), t.json_strings->fingerprint());
}

TEST(BpeTokenizer, WholePieceShortcutMatchesMerging) {
  TempDir dir;
  const auto t = load_all(agreeing(), dir);
  const auto& bpe = dynamic_cast<const BpeTokenizer&>(*t.hf);
  for (const std::string piece : {"the", " the", "he", "ing", " s"}) {
    Ids merged;
    bpe.merge_piece(piece, merged);
    EXPECT_EQ(t.hf->encode(piece), merged) << piece;
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

TEST(BpeTokenizer, LongRunsEncodeQuickly) {
  TempDir dir;
  const auto t = load_all(agreeing(), dir);
  for (char c : {' ', '7', 'e'}) {
    const std::string text(1 << 20, c);
    const auto start = std::chrono::steady_clock::now();
    const Ids ids = t.hf->encode(text + "the");
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, 0.5) << "a 1 MB run of '" << c << "'";
    EXPECT_EQ(t.hf->decode(ids), text + "the");
  }
}

}  // namespace
}  // namespace ember
