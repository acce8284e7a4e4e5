// Streaming text: stop sequences across tokens, and UTF-8 released whole and repaired as Python does.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "infer/text_stream.h"

namespace ember {
namespace {

std::string stream_bytes(const std::string& bytes, std::vector<std::string> stop, bool* stopped = nullptr) {
  ByteTokenizer bytes_tok;
  TextStream ts(bytes_tok, std::move(stop));
  std::string out;
  for (unsigned char ch : bytes) {
    const std::string piece = ts.push(int32_t(ch));
    // Everything released is whole UTF-8 at once: no piece ends inside a character.
    if (!piece.empty()) EXPECT_LT(static_cast<unsigned char>(piece.back()) & 0xC0, 0xC0) << "piece ends in a lead byte";
    out += piece;
    if (ts.stopped()) break;
  }
  if (stopped) *stopped = ts.stopped();
  return out + ts.finish();
}

TEST(TextStream, StopSequencesAcrossTokens) {
  bool stopped = false;
  EXPECT_EQ(stream_bytes("hello world\nend", {"\n"}, &stopped), "hello world");
  EXPECT_TRUE(stopped);
  EXPECT_EQ(stream_bytes("abcabd", {"abd"}, &stopped), "abc");  // "ab" held, then released when "c" follows
  EXPECT_TRUE(stopped);
  EXPECT_EQ(stream_bytes("one two three", {"xyz", "two"}, &stopped), "one ");
  EXPECT_EQ(stream_bytes("ab", {"abc"}, &stopped), "ab");  // a held prefix comes out at the end
  EXPECT_FALSE(stopped);
  EXPECT_EQ(stream_bytes("plain", {}, &stopped), "plain");
}

TEST(TextStream, Utf8IsReleasedWholeAndRepairedAsPythonDoes) {
  EXPECT_EQ(stream_bytes("caf\xC3\xA9 \xF0\x9F\x98\x80!", {}), "caf\xC3\xA9 \xF0\x9F\x98\x80!");
  // Ill-formed bytes become U+FFFD, one per maximal subpart (bytes.decode("utf-8", "replace")).
  EXPECT_EQ(stream_bytes("a\xFF"
                         "b",
                         {}),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(stream_bytes("a\xE2\x82", {}), "a\xEF\xBF\xBD");  // truncated at the end: one
  EXPECT_EQ(stream_bytes("\xE2\x82"
                         "A",
                         {}),
            "\xEF\xBF\xBD"
            "A");                                                                       // cut short by "A": one
  EXPECT_EQ(stream_bytes("\xED\xA0\x80", {}), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate: three
  EXPECT_EQ(stream_bytes("\xC0\xAF", {}), "\xEF\xBF\xBD\xEF\xBF\xBD");                  // overlong: two
}

}  // namespace
}  // namespace ember
