// Tests for GPT-2's pre-tokenization: the pattern's classes (contractions, letters, numbers, punctuation, trailing
// whitespace), Unicode White_Space exactly, invalid UTF-8 runs, and exact coverage of random bytes.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_rng.h"
#include "tokenizer/pretokenizer.h"

namespace ember {
namespace {

std::vector<std::string> split(std::string_view text) {
  static const Pretokenizer pre;
  std::vector<std::string_view> views;
  pre.split(text, views);
  return std::vector<std::string>(views.begin(), views.end());
}

using Pieces = std::vector<std::string>;

TEST(Pretokenizer, Contractions) {
  EXPECT_EQ(split("it's"), (Pieces{"it", "'s"}));
  EXPECT_EQ(split("we'll they've I'm"), (Pieces{"we", "'ll", " they", "'ve", " I", "'m"}));
  EXPECT_EQ(split("don't"), (Pieces{"don", "'t"}));
  EXPECT_EQ(split("'x"), (Pieces{"'", "x"}));  // not a contraction: punctuation, then a letter
}

TEST(Pretokenizer, Whitespace) {
  EXPECT_EQ(split("  a"), (Pieces{" ", " a"}));
  EXPECT_EQ(split("\n\na"), (Pieces{"\n", "\n", "a"}));
  EXPECT_EQ(split("a  \n"), (Pieces{"a", "  \n"}));
  EXPECT_EQ(split("a \t b"), (Pieces{"a", " \t", " b"}));
  EXPECT_EQ(split(" "), (Pieces{" "}));
}

TEST(Pretokenizer, NumbersAndPunctuation) {
  EXPECT_EQ(split(" 123"), (Pieces{" 123"}));
  EXPECT_EQ(split("x=12.5;"), (Pieces{"x", "=", "12", ".", "5", ";"}));
  EXPECT_EQ(split("hello, world!!"), (Pieces{"hello", ",", " world", "!!"}));
  EXPECT_EQ(split("a ... b"), (Pieces{"a", " ...", " b"}));
}

TEST(Pretokenizer, UnicodeLettersAndNumbers) {
  EXPECT_EQ(split("café öl"), (Pieces{"café", " öl"}));
  EXPECT_EQ(split("日本語 テスト"), (Pieces{"日本語", " テスト"}));
  EXPECT_EQ(split("مرحبا بك"), (Pieces{"مرحبا", " بك"}));
  EXPECT_EQ(split("x²٣"), (Pieces{"x", "²٣"}));  // superscript two and Arabic-Indic three are \p{N}
  // Devanagari: the vowel signs are marks (Mn/Mc), not \p{L}, so they fall in the punctuation class.
  EXPECT_EQ(split("हिन्दी"), (Pieces{"ह", "ि", "न", "्", "द", "ी"}));
}

TEST(Pretokenizer, WhiteSpaceIsUnicodeWhiteSpace) {
  EXPECT_EQ(split("a\u3000."), (Pieces{"a", "\u3000", "."}));  // ideographic space
  EXPECT_EQ(split("a\u0085."), (Pieces{"a", "\u0085", "."}));  // next line
  EXPECT_EQ(split("a\u2028\u2028b"), (Pieces{"a", "\u2028", "\u2028", "b"}));
  // U+180E (Mongolian vowel separator) and U+200B (zero width space) are format characters, not White_Space.
  EXPECT_EQ(split("a\u180E."), (Pieces{"a", "\u180E."}));
  EXPECT_EQ(split("a\u200B."), (Pieces{"a", "\u200B."}));
  EXPECT_EQ(split("a \u180E"), (Pieces{"a", " \u180E"}));
}

TEST(Pretokenizer, InvalidUtf8RunsArePiecesOfTheirOwn) {
  EXPECT_EQ(split("ab\xff\xfe cd"), (Pieces{"ab", "\xff\xfe", " cd"}));
  // A valid run is split on its own: the space before the invalid run is trailing whitespace there.
  EXPECT_EQ(split("a \x80 b"), (Pieces{"a", " ", "\x80", " b"}));
  EXPECT_EQ(split("\xc0\xaf"), (Pieces{"\xc0\xaf"}));                    // overlong '/'
  EXPECT_EQ(split("\xed\xa0\x80x"), (Pieces{"\xed\xa0\x80", "x"}));      // a surrogate
  EXPECT_EQ(split("\xf4\x90\x80\x80"), (Pieces{"\xf4\x90\x80\x80"}));    // past U+10FFFF
  EXPECT_EQ(split("x\xe6\x97"), (Pieces{"x", "\xe6\x97"}));              // truncated at the end
  EXPECT_EQ(split("\xe6\x97x"), (Pieces{"\xe6\x97", "x"}));              // truncated in the middle
  EXPECT_EQ(split("\xf0\x9f\x98\x80!"), (Pieces{"\xf0\x9f\x98\x80!"}));  // a valid 4-byte emoji with punctuation
}

TEST(Pretokenizer, PiecesCoverRandomBytesExactly) {
  test::Rng rng(2024, 1);
  const Pretokenizer pre;
  const char alphabet[] = {' ', 'a', 'Z', '1', '\'', 's', '\n', '.', '\xc3', '\xa9', '\xe3', '\x80', '\x80', '\xff'};
  for (int round = 0; round < 300; ++round) {
    std::string text(rng.philox.below(200), '\0');
    for (char& c : text) c = round % 2 ? char(rng.philox.below(256)) : alphabet[rng.philox.below(sizeof(alphabet))];
    std::vector<std::string_view> pieces;
    pre.split(text, pieces);
    size_t pos = 0;
    for (std::string_view p : pieces) {
      ASSERT_FALSE(p.empty());
      ASSERT_EQ(p.data(), text.data() + pos) << "round " << round;
      pos += p.size();
    }
    EXPECT_EQ(pos, text.size()) << "round " << round;
  }
}

TEST(Pretokenizer, LongRunsOfOneClass) {
  for (char c : {' ', '7', 'x', '.'}) {
    const std::string text(1 << 20, c);
    const auto pieces = split(text + "a");
    size_t total = 0;
    for (const auto& p : pieces) total += p.size();
    EXPECT_EQ(total, text.size() + 1);
  }
  // Trailing whitespace before a letter: all but the last space, then " a".
  EXPECT_EQ(split(std::string(1 << 20, ' ') + "a"), (Pieces{std::string((1 << 20) - 1, ' '), " a"}));
}

}  // namespace
}  // namespace ember
