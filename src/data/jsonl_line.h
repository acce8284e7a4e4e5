// One JSONL line read as a document: the string value of one field of a JSON object, found with simdjson's
// On-Demand API, so the other fields are only checked, never built (a 5000-digit number or a large array beside
// the text costs nothing), and a line costs about three times its length at most. Shared by prep's reader and
// encoders and by tokenizer train.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "core/error.h"

namespace ember {

// A longer line is refused (with a hint) before it is parsed: no JSONL corpus has documents of a GiB.
inline constexpr size_t kMaxJsonlLineBytes = size_t(1) << 30;

// One JSONL line's document: nothing for a blank line; the string value of `field` for an object that has one;
// otherwise throws ember::Error "<command> input FILE line N: ..." with a hint (the caller may count it and go on).
// The other fields must be well-formed JSON (their scalars are checked, their nested values are skipped by
// structure), nested at most kMaxJsonDepth levels.
std::optional<std::string> parse_jsonl_line(std::string_view line, const std::string& field, const std::string& file,
                                            uint64_t line_number, const char* command = "prep");

// The documents of the JSONL lines in `text` (the first numbered `first_line`), each handed to `doc` (blank lines and
// empty documents left out). A bad line throws, or with `skip_bad_lines` goes to `bad` with its error and is skipped.
void for_each_jsonl_document(std::string_view text, const std::string& field, const std::string& file,
                             uint64_t first_line, const char* command, bool skip_bad_lines,
                             const std::function<void(std::string&&)>& doc,
                             const std::function<void(const Error&)>& bad);

}  // namespace ember
