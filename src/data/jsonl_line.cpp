// One JSONL line (implementation) on simdjson On-Demand: the line is copied once into a padded buffer the thread
// keeps (simdjson reads up to 64 bytes past the end), the object's fields are walked in order, the wanted one is
// unescaped into the result, the others have their scalars checked and their objects and arrays skipped.
#include "data/jsonl_line.h"

#include <simdjson.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/json_input.h"

namespace ember {

namespace {

namespace od = simdjson::ondemand;

// Buffers past this size are given back after the line that needed them.
constexpr size_t kKeepBufferBytes = size_t(16) << 20;

struct LineParser {
  od::parser parser;
  std::vector<char> padded;
  // Sets the depth bound; a longer line makes iterate() allocate again, keeping it. (An allocation failure here is
  // met again, and reported, by the first iterate().)
  LineParser() { [[maybe_unused]] const auto e = parser.allocate(1 << 16, kMaxJsonDepth); }
};

// Whether `token` (up to the next structural character) is a number as JSON writes it:
// -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, then only whitespace. Any number of digits: it is not converted.
bool is_json_number(std::string_view token) {
  size_t i = 0;
  const auto digits = [&] {
    const size_t from = i;
    while (i < token.size() && token[i] >= '0' && token[i] <= '9') ++i;
    return i > from;
  };
  if (i < token.size() && token[i] == '-') ++i;
  if (i < token.size() && token[i] == '0')
    ++i;
  else if (!digits())
    return false;
  if (i < token.size() && token[i] == '.' && (++i, !digits())) return false;
  if (i < token.size() && (token[i] == 'e' || token[i] == 'E')) {
    ++i;
    if (i < token.size() && (token[i] == '+' || token[i] == '-')) ++i;
    if (!digits()) return false;
  }
  while (i < token.size() && (token[i] == ' ' || token[i] == '\t' || token[i] == '\r' || token[i] == '\n')) ++i;
  return i == token.size();
}

// Whether a field's value that is not the document is well-formed: scalars checked (a number of any size only by
// its grammar), objects and arrays left to the iteration to skip by their structure (no recursion, so no depth to
// bound: a deep one costs its bytes only).
bool other_value_ok(od::value v) {
  od::json_type t;
  if (v.type().get(t)) return false;
  switch (t) {
    case od::json_type::boolean: {
      bool b;
      return !v.get_bool().get(b);
    }
    case od::json_type::null: {
      bool null = false;
      return !v.is_null().get(null) && null;
    }
    case od::json_type::number:
      return is_json_number(v.raw_json_token());
    case od::json_type::string: {
      std::string_view s;
      return !v.get_string().get(s);
    }
    default:
      return true;
  }
}

enum class LineError { none, not_json, not_object, no_field, not_string, too_deep };

LineError find_document(LineParser& lp, std::string_view line, const std::string& field, std::string& out) {
  lp.padded.resize(line.size() + simdjson::SIMDJSON_PADDING);
  std::memcpy(lp.padded.data(), line.data(), line.size());
  od::document doc;
  if (lp.parser.iterate(lp.padded.data(), line.size(), lp.padded.size()).get(doc)) return LineError::not_json;
  od::object object;
  if (auto e = doc.get_object().get(object))
    return e == simdjson::INCORRECT_TYPE ? LineError::not_object : LineError::not_json;
  bool found = false;
  for (auto member : object) {
    od::field f;
    if (auto e = std::move(member).get(f))
      return e == simdjson::DEPTH_ERROR ? LineError::too_deep : LineError::not_json;
    std::string_view key;
    if (f.unescaped_key().get(key)) return LineError::not_json;
    od::value v = f.value();
    if (!found && key == field) {
      found = true;
      od::json_type t;
      if (v.type().get(t)) return LineError::not_json;
      if (t != od::json_type::string) return LineError::not_string;
      // A string without escapes is copied straight from the line (its UTF-8 and the absence of control characters
      // were checked with the whole line); only one with escapes is unescaped, into the parser's buffer first, so a
      // long plain document is not held once more.
      std::string_view raw = v.raw_json_token();
      while (!raw.empty() && raw.back() != '"') raw.remove_suffix(1);  // the token runs up to the next structural
      if (raw.size() >= 2 && raw.find('\\') == raw.npos) {
        out.assign(raw.substr(1, raw.size() - 2));
      } else {
        std::string_view s;
        if (v.get_string().get(s)) return LineError::not_json;
        out.assign(s);
      }
    } else if (!other_value_ok(v)) {
      return LineError::not_json;
    }
  }
  const char* rest = nullptr;
  if (doc.current_location().get(rest) != simdjson::OUT_OF_BOUNDS) return LineError::not_json;  // bytes after it
  return found ? LineError::none : LineError::no_field;
}

}  // namespace

std::optional<std::string> parse_jsonl_line(std::string_view line, const std::string& field, const std::string& file,
                                            uint64_t line_number, const char* command) {
  if (std::all_of(line.begin(), line.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r'; }))
    return std::nullopt;
  const std::string where = std::string(command) + " input " + file + " line " + std::to_string(line_number) + ": ";
  const std::string hint = "fix or remove the line, or pass --skip-bad-lines to skip such lines";
  if (line.size() > kMaxJsonlLineBytes)
    throw_error(where + "longer than " + std::to_string(kMaxJsonlLineBytes >> 20) + " MiB",
                "split the document into smaller lines, or check that the file is really JSONL");
  thread_local LineParser lp;
  std::string doc;
  LineError e = LineError::not_json;
  try {
    e = find_document(lp, line, field, doc);
  } catch (const std::bad_alloc&) {
    throw_error(where + "out of memory parsing a line of " + std::to_string(line.size()) + " bytes",
                "split the document into smaller lines");
  }
  if (lp.padded.size() > kKeepBufferBytes) {
    lp = LineParser();  // give back the buffers of an unusually long line
  }
  switch (e) {
    case LineError::none:
      return doc;
    case LineError::not_object:
      throw_error(where + "not a JSON object", hint);
    case LineError::no_field:
      throw_error(where + "no \"" + field + "\" field", "pass --jsonl-field NAME to read another field; or " + hint);
    case LineError::not_string:
      throw_error(where + "field \"" + field + "\" is not a string", hint);
    case LineError::too_deep:
      throw_error(where + "nested deeper than " + std::to_string(kMaxJsonDepth) + " levels", hint);
    case LineError::not_json:
      break;
  }
  throw_error(where + "not valid JSON", hint);
}

void for_each_jsonl_document(std::string_view text, const std::string& field, const std::string& file,
                             uint64_t first_line, const char* command, bool skip_bad_lines,
                             const std::function<void(std::string&&)>& doc,
                             const std::function<void(const Error&)>& bad) {
  uint64_t line_number = first_line;
  for (size_t begin = 0; begin < text.size(); ++line_number) {
    const size_t end = std::min(text.find('\n', begin), text.size());
    std::optional<std::string> d;
    try {
      d = parse_jsonl_line(text.substr(begin, end - begin), field, file, line_number, command);
    } catch (const Error& e) {
      if (!skip_bad_lines) throw;
      bad(e);
    }
    begin = end + 1;
    if (d && !d->empty()) doc(std::move(*d));
  }
}

}  // namespace ember
