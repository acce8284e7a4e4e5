// Fuzz target: JSONL lines as prep and tokenizer train read them, bad lines skipped and counted. A document that
// comes out must be a string the line held (so never longer than the line). Input: the lines.
#include <cstdint>

#include "data/jsonl_line.h"
#include "fuzz_util.h"

using namespace ember;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  size_t documents = 0, bad = 0;
  try {
    for_each_jsonl_document(
        text, "text", "fuzz.jsonl", 1, "prep", true,
        [&](std::string&& doc) {
          ++documents;
          if (doc.size() > text.size()) fuzz::broken("a document longer than its line");
        },
        [&](const Error&) { ++bad; });
  } catch (const Error&) {
    fuzz::broken("a bad line escaped --skip-bad-lines");
  }
  return 0;
}
