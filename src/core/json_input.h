// JSON read from outside input (files, stdin, requests, damaged records), parsed with its nesting bounded: a document
// deeper than the bound is refused while it is read, before any deep structure exists, so no printer, destructor or
// walk over it can recurse without limit.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace ember {

// Deeper than any file or request Ember reads legitimately (tokenizer.json nests 4 levels, a chat request 5).
inline constexpr int kMaxJsonDepth = 64;

// Parses `text`. Malformed JSON throws ember::Error "<what>: not valid JSON (<where>)", nesting deeper than
// `max_depth` "<what>: nests deeper than <max_depth> levels", both with `hint`.
nlohmann::json parse_json_input(std::string_view text, const std::string& what, const std::string& hint,
                                int max_depth = kMaxJsonDepth);

// The same, with nothing for malformed or too deeply nested JSON, for readers that skip bad records.
std::optional<nlohmann::json> try_parse_json_input(std::string_view text, int max_depth = kMaxJsonDepth);

}  // namespace ember
