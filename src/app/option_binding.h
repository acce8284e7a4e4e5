// The option table's building blocks (app/options.cpp, app/option_table.cpp): a Binding ties one "section.key" to a
// RunConfig field, how Boost declares it, how its text is parsed and checked, and how it is rendered back; the binders
// below make one for each kind of key, and the domains bound the numbers.
#pragma once

#include <boost/program_options.hpp>

#include <charconv>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "app/option_enums.h"
#include "app/option_values.h"
#include "core/enum_names.h"
#include "train/run_config.h"

namespace ember {

namespace po = boost::program_options;

inline std::string format_value(int v) { return format_number(v); }
inline std::string format_value(bool v) { return v ? "true" : "false"; }
inline std::string format_value(uint64_t v) { return format_number(v); }
inline std::string format_value(float v) { return format_number(v); }
inline std::string format_value(const std::string& v) { return v; }

template <EnumOptionType E>
inline std::string format_value(E v) {
  return EnumOption<E>::name(v);
}

// What a value of an enum option must be: "must be one of: cpu, cuda, auto".
template <EnumOptionType E>
std::string must_be_one_of() {
  return "must be one of: " + join_names(EnumOption<E>::values, EnumOption<E>::name);
}

// A name that is no value of an enum option. parse_train_args reports it as it reports a value out of range, naming
// the key (Boost adds it to the exception on the way out).
class BadEnumValue : public po::validation_error {
 public:
  BadEnumValue(std::string value, std::string problem)
      : po::validation_error(po::validation_error::invalid_option_value),
        value_(std::move(value)),
        problem_(std::move(problem)) {}
  const std::string& value() const { return value_; }
  const std::string& problem() const { return problem_; }

 private:
  std::string value_, problem_;
};

// Boost.Program_options' hook for reading an option of type E (found by argument-dependent lookup): the single
// point where the name of an enum option's value is parsed.
template <EnumOptionType E>
void validate(boost::any& out, const std::vector<std::string>& values, E*, int) {
  po::validators::check_first_occurrence(out);
  const std::string& text = po::validators::get_single_string(values);
  const std::optional<E> v = EnumOption<E>::parse(text);
  if (!v) throw BadEnumValue(text, must_be_one_of<E>());
  out = boost::any(*v);
}

// One bound key: how to declare it to Boost, read its text (numbers), render it, and check its range.
struct Binding {
  std::string key;  // "section.key"
  std::string help;
  std::function<std::string()> shortest;  // the value as the reference shows it: 0.4, not 0.400000006
  std::string values;                     // what it may be, for the reference: "an integer in [1, 1024]"
  std::function<void(po::options_description&)> declare;
  std::function<std::string()> render;
  std::function<std::string()> parse;  // numbers: reads the text Boost stored; "" when valid, else what it must be
  std::function<std::string()> check;  // "" when valid, else what the value must be
  std::function<std::string()> text;   // the value as given (numbers) or rendered
};

// A string, bool or enum key, parsed by Boost (enums through validate() above).
// The shortest text that reads back as the same value.
template <class T>
std::string shortest_text(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    char buf[64];
    const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
    return ec == std::errc() ? std::string(buf, end) : format_value(v);
  } else {
    return format_value(v);
  }
}

// What a string, bool or enum key may be, for the reference.
template <class T>
std::string values_of() {
  if constexpr (std::is_same_v<T, bool>)
    return "true, false";
  else if constexpr (std::is_same_v<T, std::string>)
    return "text";
  else
    return join_names(EnumOption<T>::values, EnumOption<T>::name);
}

template <class T>
Binding bind_key(const char* key, T* field, const char* help, std::function<std::string(T)> check = nullptr) {
  Binding b;
  b.key = key;
  b.help = help;
  b.shortest = [=] { return shortest_text(*field); };
  b.values = values_of<T>();
  b.declare = [=](po::options_description& d) {
    d.add_options()(key, po::value<T>(field)->default_value(*field, format_value(*field)), help);
  };
  b.render = [=] { return format_value(*field); };
  b.parse = [] { return std::string(); };
  b.check = [=] { return check ? check(*field) : std::string(); };
  b.text = b.render;
  return b;
}

// A numeric key: declared as text and parsed strictly (parse_number), then checked against its domain and `extra`.
template <class T>
Binding bind_number(const char* key, T* field, const char* help, Domain<T> domain,
                    std::function<std::string(T)> extra = nullptr) {
  Binding b;
  b.key = key;
  b.help = help;
  b.shortest = [=] { return shortest_text(*field); };
  b.values = describe_domain(domain).substr(std::string("must be ").size());
  auto text = std::make_shared<std::string>(format_value(*field));
  b.declare = [=](po::options_description& d) {
    d.add_options()(key, po::value<std::string>(text.get())->default_value(*text), help);
  };
  b.render = [=] { return format_value(*field); };
  b.parse = [=] { return parse_number(*text, field) ? std::string() : describe_domain(domain); };
  b.check = [=] {
    if (!in_domain(*field, domain)) return describe_domain(domain);
    return extra ? extra(*field) : std::string();
  };
  b.text = [=] { return *text; };
  return b;
}

// A key whose text another key's value shapes (a per-layer list): kept as given, read by `read` once every key is
// parsed (it returns "" or what the text must be), rendered from what it resolved to.
inline Binding bind_text(const char* key, std::string initial, const char* help, const char* values,
                         std::function<std::string(const std::string&)> read, std::function<std::string()> render) {
  Binding b;
  b.key = key;
  b.help = help;
  b.shortest = render;
  b.values = values;
  auto text = std::make_shared<std::string>(std::move(initial));
  b.declare = [=](po::options_description& d) {
    d.add_options()(key, po::value<std::string>(text.get())->default_value(*text), help);
  };
  b.render = render;
  b.parse = [] { return std::string(); };
  b.check = [=] { return read(*text); };
  b.text = [=] { return *text; };
  return b;
}

// A path: not empty (where `required`) and at most PATH_MAX long.
inline std::function<std::string(std::string)> path_value(bool required) {
  return [=](const std::string& v) -> std::string {
    if (required && v.empty()) return "must not be empty";
    if (v.size() > 4096) return "must be a path of at most 4096 characters";
    return "";
  };
}

// The domains. Sizes: a bound generous for any model this code can train (GPT-3 175B has 96 layers, 96 heads,
// n_embd 12288), tight enough that products of sizes cannot overflow before the memory estimate checks them.
inline constexpr int kMaxCount =
    1000000000;  // steps, intervals: any run; keeps step * batch arithmetic far from overflow
inline Domain<int> ints(int lo, int hi) { return {lo, hi}; }
inline Domain<float> floats(float lo, float hi, bool lo_open = false, bool hi_open = false) {
  return {lo, hi, lo_open, hi_open};
}

// Every key of `ember train`, bound to its field of c, in the order of the reference and the rendered INI.
std::vector<Binding> bindings(RunConfig& c);

}  // namespace ember
