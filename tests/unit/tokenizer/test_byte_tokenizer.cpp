// The byte tokenizer: every byte and UTF-8 text round-trip, ids outside the vocabulary are refused, and the factory
// names a spec it does not know.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../data/data_test_util.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace ember {
namespace {

TEST(ByteTokenizer, RoundTripsAllBytes) {
  ByteTokenizer tok;
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(char(b));
  const std::vector<int32_t> ids = tok.encode(all);
  ASSERT_EQ(ids.size(), 256u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(ids[b], b);
  EXPECT_EQ(tok.decode(ids), all);
  EXPECT_EQ(tok.vocab_size(), 256);
  EXPECT_EQ(tok.describe(), "bytes");
}

TEST(ByteTokenizer, RoundTripsUtf8) {
  ByteTokenizer tok;
  // "héllo wörld ✓ 日本": two-, three-byte sequences.
  const std::string text = "h\xC3\xA9llo w\xC3\xB6rld \xE2\x9C\x93 \xE6\x97\xA5\xE6\x9C\xAC";
  const std::vector<int32_t> ids = tok.encode(text);
  ASSERT_EQ(ids.size(), text.size());
  EXPECT_EQ(ids[1], 0xC3);  // multi-byte sequences map to ids >= 128, never negative
  EXPECT_EQ(ids[2], 0xA9);
  EXPECT_EQ(tok.decode(ids), text);
  EXPECT_TRUE(tok.encode("").empty());
}

TEST(ByteTokenizer, DecodeRejectsIdsOutsideVocab) {
  ByteTokenizer tok;
  expect_error([&] { tok.decode(std::vector<int32_t>{65, 256}); }, {"256"});
  expect_error([&] { tok.decode(std::vector<int32_t>{-1}); }, {"-1"});
}

TEST(ByteTokenizer, FactoryNamesAnUnknownSpec) {
  EXPECT_EQ(load_tokenizer("bytes")->describe(), "bytes");
  try {
    load_tokenizer("gpt9");
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gpt9"), std::string::npos) << e.what();
    EXPECT_NE(e.hint().find("bytes"), std::string::npos) << e.hint();
  }
}

}  // namespace
}  // namespace ember
