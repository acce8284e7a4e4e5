// JSON from outside input (implementation): nlohmann's parser with a callback that stops at the depth bound.
#include "core/json_input.h"

#include "core/error.h"

namespace ember {
namespace {

struct TooDeep {};

nlohmann::json parse_bounded(std::string_view text, int max_depth) {
  return nlohmann::json::parse(text.begin(), text.end(),
                               [max_depth](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
                                 if (depth > max_depth) throw TooDeep{};
                                 return true;
                               });
}

}  // namespace

nlohmann::json parse_json_input(std::string_view text, const std::string& what, const std::string& hint,
                                int max_depth) {
  try {
    return parse_bounded(text, max_depth);
  } catch (const TooDeep&) {
    throw_error(what + ": nests deeper than " + std::to_string(max_depth) + " levels", hint);
  } catch (const nlohmann::json::exception& e) {
    // nlohmann's message: "[json.exception.parse_error.101] parse error at line 1, column 5: ..."; the part after
    // the bracket says where and why.
    std::string why = e.what();
    if (const size_t close = why.find("] "); close != std::string::npos) why = why.substr(close + 2);
    throw_error(what + ": not valid JSON (" + why + ")", hint);
  }
}

void throw_json_field_type(const std::string& what, const std::string& key, const nlohmann::json& value,
                           const char* expected, const std::string& hint) {
  std::string shown = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (shown.size() > 60) shown = shown.substr(0, 57) + "...";
  throw_error(what + ": \"" + key + "\" is " + shown + ", not " + expected, hint);
}

std::optional<nlohmann::json> try_parse_json_input(std::string_view text, int max_depth) {
  try {
    return parse_bounded(text, max_depth);
  } catch (const TooDeep&) {
    return std::nullopt;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

}  // namespace ember
