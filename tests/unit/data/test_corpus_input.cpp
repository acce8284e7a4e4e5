// Tests for the corpus input rules both prep and tokenizer train follow (data/corpus_input.h): the documents of a
// planned file, and errors worded for the command that reads it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "data/corpus_input.h"
#include "prep_test_util.h"

namespace ember {
namespace {

struct Read {
  std::vector<std::string> docs;
  DocumentCounts counts;
};
Read read_all(const CorpusFile& f, bool skip_bad_lines = false) {
  Read r;
  r.counts = read_documents(f, "text", skip_bad_lines, "tokenizer train",
                            [&](std::string&& doc) { r.docs.push_back(std::move(doc)); });
  return r;
}

// A text file is one document, whole; a JSONL file (here zstd-compressed, as a hub download often is) is one
// document per line with the field, blank lines left out, other fields ignored; each is planned by its name.
TEST(CorpusInput, ReadDocumentsGivesTextWholeAndJsonlByLine) {
  TempDir tmp;
  write_bytes(tmp / "in/a.txt", "first line\n{\"text\": \"not JSONL here\"}\n");
  write_bytes(tmp / "in/b.jsonl.zst",
              zstd("{\"text\": \"caf\\u00e9 one\", \"id\": 1}\n\n{\"id\": 2, \"text\": \"two\\nlines\"}\n"));
  const CorpusPlan plan = plan_corpus(tmp / "in", "auto", "tokenizer train");
  ASSERT_EQ(plan.files.size(), 2u);
  const Read text = read_all(plan.files[0]);
  EXPECT_EQ(text.docs, std::vector<std::string>({"first line\n{\"text\": \"not JSONL here\"}\n"}));
  const Read jsonl = read_all(plan.files[1]);
  EXPECT_EQ(jsonl.docs, std::vector<std::string>({"caf\xc3\xa9 one", "two\nlines"}));
  EXPECT_EQ(jsonl.counts.documents, 2u);
  EXPECT_EQ(jsonl.counts.bytes, std::string("caf\xc3\xa9 one").size() + 9);
  EXPECT_EQ(jsonl.counts.bad_lines, 0u);
  EXPECT_FALSE(jsonl.counts.binary);
}

// A line without the field is an error naming the command, the file and the line, with a hint; with skip_bad_lines
// it is counted and the other lines still give their documents.
TEST(CorpusInput, ReadDocumentsRefusesOrSkipsABadLine) {
  TempDir tmp;
  write_bytes(tmp / "d.jsonl", "{\"text\": \"a\"}\n{\"body\": \"b\"}\n{oops\n{\"text\": \"c\"}\n");
  const CorpusPlan plan = plan_corpus(tmp / "d.jsonl", "auto", "tokenizer train");
  ASSERT_EQ(plan.files.size(), 1u);
  expect_error([&] { read_all(plan.files[0]); }, {"tokenizer train input", "d.jsonl line 2", "no \"text\" field"});
  const Read r = read_all(plan.files[0], /*skip_bad_lines=*/true);
  EXPECT_EQ(r.docs, std::vector<std::string>({"a", "c"}));
  EXPECT_EQ(r.counts.bad_lines, 2u);
}

// --format forces a format whatever the name says, and an unknown one names the command.
TEST(CorpusInput, FormatOverridesTheNameAndUnknownOnesNameTheCommand) {
  TempDir tmp;
  write_bytes(tmp / "notes.txt", "{\"text\": \"x\"}\n");
  const CorpusPlan plan = plan_corpus(tmp / "notes.txt", "jsonl", "tokenizer train");
  ASSERT_EQ(plan.files.size(), 1u);
  EXPECT_EQ(read_all(plan.files[0]).docs, std::vector<std::string>({"x"}));
  expect_error([&] { plan_corpus(tmp / "notes.txt", "csv", "tokenizer train"); },
               {"tokenizer train: unknown --format 'csv'"});
}

}  // namespace
}  // namespace ember
