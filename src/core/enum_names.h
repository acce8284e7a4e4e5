// Names of closed sets of values (training.device, training.comm, ...): looking a value up by its name and listing
// every name, so that each enum's module spells its names once, in its *_name function, and derives the rest.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace ember {

// The value of `values` whose name(value) is `text`, or nothing for any other text.
template <class E, size_t N, class Name>
std::optional<E> find_by_name(const E (&values)[N], Name name, const std::string& text) {
  for (E v : values)
    if (text == name(v)) return v;
  return std::nullopt;
}

// Every name in the order of `values`, comma-separated: "cpu, cuda, auto".
template <class E, size_t N, class Name>
std::string join_names(const E (&values)[N], Name name) {
  std::string out;
  for (E v : values) {
    if (!out.empty()) out += ", ";
    out += name(v);
  }
  return out;
}

}  // namespace ember
