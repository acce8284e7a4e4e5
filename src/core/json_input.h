// JSON read from outside input (files, stdin, requests, damaged records), parsed with its nesting bounded: a document
// deeper than the bound is refused while it is read, before any deep structure exists, so no printer, destructor or
// walk over it can recurse without limit.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include <nlohmann/json.hpp>

namespace ember {

// "a boolean", "an integer", "a number", "a string", "a value": what json_field expected, for its message.
template <class T>
constexpr const char* json_kind() {
  if constexpr (std::is_same_v<T, bool>)
    return "a boolean";
  else if constexpr (std::is_integral_v<T>)
    return "an integer";
  else if constexpr (std::is_floating_point_v<T>)
    return "a number";
  else if constexpr (std::is_same_v<T, std::string>)
    return "a string";
  else
    return "a value";
}

[[noreturn]] void throw_json_field_type(const std::string& what, const std::string& key, const nlohmann::json& value,
                                        const char* expected, const std::string& hint);

// Deeper than any file or request Ember reads legitimately (tokenizer.json nests 4 levels, a chat request 5).
inline constexpr int kMaxJsonDepth = 64;

// Parses `text`. Malformed JSON throws ember::Error "<what>: not valid JSON (<where>)", nesting deeper than
// `max_depth` "<what>: nests deeper than <max_depth> levels", both with `hint`.
nlohmann::json parse_json_input(std::string_view text, const std::string& what, const std::string& hint,
                                int max_depth = kMaxJsonDepth);

// The same, with nothing for malformed or too deeply nested JSON, for readers that skip bad records.
std::optional<nlohmann::json> try_parse_json_input(std::string_view text, int max_depth = kMaxJsonDepth);

// Fields of parsed outside input, typed. nlohmann's value(key, fallback) throws its own type_error for a value of
// another type (and for a document that is not an object); these never do.

// Whether `v` holds a T as JSON writes it (an integer for integral T, any number for floating T).
template <class T>
bool json_holds(const nlohmann::json& v) {
  if constexpr (std::is_same_v<T, bool>)
    return v.is_boolean();
  else if constexpr (std::is_integral_v<T>)
    return v.is_number_integer();
  else if constexpr (std::is_floating_point_v<T>)
    return v.is_number();
  else if constexpr (std::is_same_v<T, std::string>)
    return v.is_string();
  else
    return true;  // nlohmann::json itself
}

// obj[key] as a T; `fallback` when obj is not an object, lacks the key or holds null there. A value of another type
// is an ember::Error "<what>: \"<key>\" is <its JSON>, not <T's kind>" with `hint`.
template <class T>
T json_field(const nlohmann::json& obj, const std::string& key, T fallback, const std::string& what,
             const std::string& hint) {
  if (!obj.is_object()) return fallback;
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!json_holds<T>(*it)) throw_json_field_type(what, key, *it, json_kind<T>(), hint);
  return it->template get<T>();
}

// The same for records Ember wrote itself and reads leniently (a lock's holder, a run's state): a value of another
// type counts as missing.
template <class T>
T json_field_or(const nlohmann::json& obj, const std::string& key, T fallback) {
  if (!obj.is_object()) return fallback;
  const auto it = obj.find(key);
  if (it == obj.end() || !json_holds<T>(*it)) return fallback;
  return it->template get<T>();
}

}  // namespace ember
