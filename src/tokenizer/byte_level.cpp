// GPT-2's byte <-> printable character map (implementation): built once from the three printable Latin-1 ranges.
#include "tokenizer/byte_level.h"

#include <unordered_map>

namespace ember {

namespace {

bool printable(int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

std::string utf8_of(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s.push_back(char(cp));
  } else if (cp < 0x800) {
    s.push_back(char(0xC0 | (cp >> 6)));
    s.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    s.push_back(char(0xE0 | (cp >> 12)));
    s.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    s.push_back(char(0x80 | (cp & 0x3F)));
  }
  return s;
}

struct Tables {
  std::array<std::string, 256> to_unicode;
  std::array<unsigned char, 256> order{};
  std::unordered_map<std::string, unsigned char> to_byte;
  Tables() {
    uint32_t next = 256;
    int k = 0;
    for (int b = 0; b < 256; ++b)
      if (printable(b)) order[size_t(k++)] = (unsigned char)b;
    for (int b = 0; b < 256; ++b)
      if (!printable(b)) order[size_t(k++)] = (unsigned char)b;
    for (int b = 0; b < 256; ++b) {
      to_unicode[size_t(b)] = utf8_of(printable(b) ? uint32_t(b) : next++);
      to_byte.emplace(to_unicode[size_t(b)], (unsigned char)b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

const std::array<std::string, 256>& byte_to_unicode() { return tables().to_unicode; }

const std::array<unsigned char, 256>& gpt2_byte_order() { return tables().order; }

std::optional<std::string> unicode_to_bytes(std::string_view printable_form) {
  const auto& map = tables().to_byte;
  std::string out;
  out.reserve(printable_form.size());
  size_t i = 0;
  while (i < printable_form.size()) {
    // Every character of the map is 1 to 2 UTF-8 bytes (U+0021..U+0143).
    const unsigned char lead = (unsigned char)printable_form[i];
    const size_t len = lead < 0x80 ? 1 : (lead >= 0xC0 && lead < 0xE0 ? 2 : 0);
    if (len == 0 || i + len > printable_form.size()) return std::nullopt;
    const auto it = map.find(std::string(printable_form.substr(i, len)));
    if (it == map.end()) return std::nullopt;
    out.push_back(char(it->second));
    i += len;
  }
  return out;
}

std::string bytes_to_unicode(std::string_view bytes) {
  const auto& table = tables().to_unicode;
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) out += table[b];
  return out;
}

}  // namespace ember
