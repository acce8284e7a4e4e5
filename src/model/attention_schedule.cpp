// The model's attention schedule as configured (implementation): names, list texts and presets.
#include "model/attention_schedule.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "core/enum_names.h"

namespace ember {

namespace {

// The comma-separated entries of `text`, spaces around each trimmed.
std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (true) {
    const size_t end = text.find(',', begin);
    std::string item = text.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
    const size_t a = item.find_first_not_of(" \t"), b = item.find_last_not_of(" \t");
    out.push_back(a == std::string::npos ? std::string() : item.substr(a, b - a + 1));
    if (end == std::string::npos) return out;
    begin = end + 1;
  }
}

std::string shortest(float v) {
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(v);
}

// A list of one entry per layer, or one entry for all: the entries, or nothing with *problem set.
std::optional<std::vector<std::string>> per_layer(const std::string& text, int n_layer, const char* what,
                                                  std::string* problem) {
  std::vector<std::string> items = split_list(text);
  if (items.size() == 1) items.assign(size_t(n_layer), items[0]);
  if (items.size() != size_t(n_layer)) {
    *problem = "must have one " + std::string(what) + " per layer (model.n_layer = " + std::to_string(n_layer) +
               ") or a single one for all; it has " + std::to_string(split_list(text).size());
    return std::nullopt;
  }
  return items;
}

std::vector<int> tscale_windows(int n_layer) {
  // round(0.15 n) layers of window 1 first, at least one layer left for the alternation
  const int first = std::min(int(std::floor(0.15 * n_layer + 0.5)), n_layer - 1);
  std::vector<int> w(size_t(n_layer), 0);
  for (int l = 0; l < first; ++l) w[size_t(l)] = 1;
  for (int l = n_layer - 1, k = 0; l >= first; --l, ++k) w[size_t(l)] = k % 2 == 0 ? 0 : 64;
  return w;
}

std::vector<int> sssl_windows(int n_layer, int block_size) {
  std::vector<int> w(size_t(n_layer), 0);
  for (int l = 0; l < n_layer; ++l) w[size_t(l)] = l % 4 == 3 || l == n_layer - 1 ? 0 : std::max(1, block_size / 2);
  return w;
}

template <class T>
void clear_if_zero(std::vector<T>* v) {
  for (T x : *v)
    if (x != T(0)) return;
  v->clear();
}

}  // namespace

const char* position_encoding_name(PositionEncoding p) { return p == PositionEncoding::rope ? "rope" : "learned"; }

std::optional<PositionEncoding> parse_position_encoding(const std::string& name) {
  return find_by_name(kPositionEncodings, position_encoding_name, name);
}

std::string parse_attention_windows(const std::string& text, int n_layer, int block_size, std::vector<int>* windows,
                                    std::vector<float>* preset_slopes) {
  windows->clear(), preset_slopes->clear();
  if (text == "tscale") {
    *windows = tscale_windows(n_layer);
    for (int w : *windows) preset_slopes->push_back(w == 64 ? 0.5f : 0.0f);
  } else if (text == "sssl") {
    *windows = sssl_windows(n_layer, block_size);
  } else {
    std::string problem;
    const auto items = per_layer(text, n_layer, "window", &problem);
    if (!items) return problem;
    for (const std::string& item : *items) {
      int w = 0;
      const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), w);
      if (item == "full") {
        w = 0;
      } else if (item.empty() || ec != std::errc() || end != item.data() + item.size() || w < 1) {
        return "must be full, tscale, sssl or a list of windows, each full or a positive integer (tokens before the "
               "query it sees); '" +
               item + "' is neither";
      }
      windows->push_back(w);
    }
  }
  clear_if_zero(windows), clear_if_zero(preset_slopes);
  return "";
}

std::string parse_alibi_slopes(const std::string& text, int n_layer, std::vector<float>* slopes) {
  slopes->clear();
  std::string problem;
  const auto items = per_layer(text, n_layer, "slope", &problem);
  if (!items) return problem;
  for (const std::string& item : *items) {
    char* end = nullptr;
    const float s = item.empty() ? NAN : std::strtof(item.c_str(), &end);
    if (item.empty() || end != item.c_str() + item.size() || !std::isfinite(s) || s < 0.0f)
      return "must be a list of ALiBi slopes, each a finite number >= 0 (0: no bias in that layer); '" + item +
             "' is not";
    slopes->push_back(s);
  }
  clear_if_zero(slopes);
  return "";
}

std::string format_attention_windows(const std::vector<int>& windows) {
  if (windows.empty()) return "full";
  std::string out;
  for (int w : windows) out += (out.empty() ? "" : ",") + (w == 0 ? std::string("full") : std::to_string(w));
  return out;
}

std::string format_alibi_slopes(const std::vector<float>& slopes) {
  std::string out;
  for (float s : slopes) out += (out.empty() ? "" : ",") + shortest(s);
  return out;
}

std::string describe_attention(const ModelConfig& model) {
  std::string out = model.position == PositionEncoding::rope ? "rope (theta " + shortest(model.rope_theta) + ")"
                                                             : std::string("learned positions");
  out += model.attention_windows.empty() ? ", full attention"
                                         : ", windows " + format_attention_windows(model.attention_windows);
  if (!model.alibi_slopes.empty()) out += ", ALiBi slopes " + format_alibi_slopes(model.alibi_slopes);
  return out;
}

std::string rope_problem(const ModelConfig& model) {
  if (model.position != PositionEncoding::rope || model.n_head < 1 || model.head_dim() % 2 == 0) return "";
  return "needs an even head size (it rotates pairs of a head's values); n_embd / n_head = " +
         std::to_string(model.n_embd) + " / " + std::to_string(model.n_head) + " = " + std::to_string(model.head_dim());
}

std::string attention_schedule_problem(const ModelConfig& model) {
  if (const std::string rope = rope_problem(model); !rope.empty()) return "position = rope " + rope;
  if (!model.attention_windows.empty() && model.attention_windows.size() != size_t(model.n_layer))
    return "attention_windows has " + std::to_string(model.attention_windows.size()) + " entries for " +
           std::to_string(model.n_layer) + " layers";
  if (!model.alibi_slopes.empty() && model.alibi_slopes.size() != size_t(model.n_layer))
    return "alibi_slopes has " + std::to_string(model.alibi_slopes.size()) + " entries for " +
           std::to_string(model.n_layer) + " layers";
  return "";
}

}  // namespace ember
