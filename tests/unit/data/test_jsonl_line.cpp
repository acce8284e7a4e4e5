// Tests for one JSONL line read as a document (data/jsonl_line.h): the field's string, unescaped; the other fields
// checked but never built, whatever their size; every malformed line an error naming the file and line.
#include <gtest/gtest.h>

#include <string>

#include "data/jsonl_line.h"
#include "prep_test_util.h"

namespace ember {
namespace {

std::optional<std::string> doc(const std::string& line, const std::string& field = "text") {
  return parse_jsonl_line(line, field, "in.jsonl", 7, "prep");
}

TEST(JsonlLine, GivesTheFieldUnescapedAndNothingForABlankLine) {
  EXPECT_EQ(doc("{\"text\": \"plain words\"}"), "plain words");
  EXPECT_EQ(doc("{\"id\": 1, \"text\" :\t\"a\\\"b\\\\c\\n\\u00e9\\ud83d\\ude00\" , \"x\": null}"),
            "a\"b\\c\n\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_EQ(doc("{\"t\\u0065xt\": \"escaped key\"}"), "escaped key");
  EXPECT_EQ(doc("{\"body\": \"b\", \"text\": \"\"}"), "");
  EXPECT_EQ(doc("{\"text\": \"first\", \"text\": \"second\"}"), "first");  // the first of repeated keys
  EXPECT_EQ(doc("{\"body\": \"b\"}", "body"), "b");
  EXPECT_EQ(doc("  \t\r"), std::nullopt);
  EXPECT_EQ(doc(""), std::nullopt);
}

// What an unrelated field holds costs nothing and refuses nothing, as long as it is JSON: a 5000-digit integer,
// a deep (but bounded) structure, big arrays.
TEST(JsonlLine, OtherFieldsAreCheckedNotBuilt) {
  const std::string huge(5000, '9');
  EXPECT_EQ(doc("{\"n\": " + huge + ", \"text\": \"t\"}"), "t");
  EXPECT_EQ(doc("{\"n\": -" + huge + ".5e-99999, \"text\": \"t\"}"), "t");
  EXPECT_EQ(doc("{\"a\": [[[{\"b\": [1, 2.5, true, false, null, \"s\"]}]]], \"text\": \"t\", \"z\": {}}"), "t");
  std::string array = "[";
  for (int i = 0; i < 100000; ++i) array += "1,";
  array += "1]";
  EXPECT_EQ(doc("{\"big\": " + array + ", \"text\": \"t\"}"), "t");
}

TEST(JsonlLine, MalformedLinesAreErrorsNamingFileAndLine) {
  const std::vector<std::string> not_json = {
      "{\"text\": \"a\", \"x\": tru}",  // a bad literal beside the field
      "{\"text\": \"a\", \"x\": 01}",   // a bad number
      "{\"text\": \"a\", \"x\": 1.}",
      "{\"text\": \"a\", \"x\": -}",
      "{\"text\": \"a\", \"x\": 1e}",
      "{\"text\": \"a\", \"x\": 1x}",
      "{\"text\": \"a\"} trailing",          // bytes after the object
      "{\"text\": \"a\"}{\"text\": \"b\"}",  // two objects
      "{\"text\": \"a\"",                    // unfinished
      "{\"text\": \"a\xff\"}",               // not UTF-8
      "{\"text\": \"a\x01\"}",               // an unescaped control character
      "{\"text\": \"a\\q\"}",                // a bad escape
      "{text: \"a\"}",                       // an unquoted key
  };
  for (const std::string& line : not_json) {
    SCOPED_TRACE(line);
    expect_error([&] { doc(line); }, {"prep input in.jsonl line 7: not valid JSON"});
  }
  expect_error([&] { doc("[\"text\"]"); }, {"line 7: not a JSON object"});
  expect_error([&] { doc("\"text\""); }, {"line 7: not a JSON object"});
  expect_error([&] { doc("{\"body\": \"b\"}"); }, {"line 7: no \"text\" field"});
  expect_error([&] { doc("{\"text\": 5}"); }, {"line 7: field \"text\" is not a string"});
  expect_error([&] { doc("{\"text\": null}"); }, {"field \"text\" is not a string"});
}

// Deep nesting is skipped by structure, never recursed into: beside the field it costs its bytes only; unbalanced,
// or in place of the field, it is an error.
TEST(JsonlLine, DeepNestingCostsNoRecursion) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_EQ(doc("{\"x\": " + deep + ", \"text\": \"t\"}"), "t");
  expect_error([&] { doc("{\"x\": " + deep + "], \"text\": \"t\"}"); }, {"not valid JSON"});
  expect_error([&] { doc("{\"x\": " + deep.substr(1) + ", \"text\": \"t\"}"); }, {"not valid JSON"});
  expect_error([&] { doc("{\"text\": " + deep + "}"); }, {"field \"text\" is not a string"});
}

}  // namespace
}  // namespace ember
