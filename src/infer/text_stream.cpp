// Streaming detokenization (implementation). Text is released as valid UTF-8: each ill-formed subsequence becomes
// U+FFFD, as Python's errors="replace" (and so Hugging Face's decode) makes it, so a stream and a whole decode agree.
#include "infer/text_stream.h"

#include <algorithm>
#include <string_view>

namespace ember {

namespace {

enum class Utf8 { valid, invalid, truncated };

// The UTF-8 sequence at the start of s (non-empty): valid with its length, invalid with the length of its maximal
// well-formed prefix (at least 1; the Unicode standard's "maximal subpart"), or truncated by the end of s.
Utf8 utf8_sequence(std::string_view s, size_t* len) {
  const auto b0 = static_cast<unsigned char>(s[0]);
  int need = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte; later ones are 80..BF
  if (b0 < 0x80) {
    *len = 1;
    return Utf8::valid;
  } else if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    if (b0 == 0xE0) lo = 0xA0;  // no overlong forms
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    *len = 1;
    return Utf8::invalid;
  }
  for (int i = 1; i <= need; ++i) {
    if (size_t(i) >= s.size()) {
      *len = size_t(i);
      return Utf8::truncated;
    }
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < (i == 1 ? lo : 0x80) || b > (i == 1 ? hi : 0xBF)) {
      *len = size_t(i);
      return Utf8::invalid;
    }
  }
  *len = size_t(need) + 1;
  return Utf8::valid;
}

// The longest prefix of s that does not end inside a character (bytes that more bytes could still complete).
size_t complete_prefix(std::string_view s) {
  size_t at = 0, len = 0;
  while (at < s.size()) {
    if (utf8_sequence(s.substr(at), &len) == Utf8::truncated) return at;
    at += len;
  }
  return at;
}

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

std::string to_valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t at = 0, len = 0;
  while (at < s.size()) {
    if (utf8_sequence(s.substr(at), &len) == Utf8::valid)
      out.append(s.substr(at, len));
    else
      out.append(kReplacement);
    at += len;
  }
  return out;
}

}  // namespace

TextStream::TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop) : tokenizer_(tokenizer) {
  for (std::string& s : stop)
    if (!s.empty()) stop_.push_back(std::move(s));
}

std::string TextStream::push(int32_t token) {
  if (stopped_) return {};
  pending_ += tokenizer_.decode(std::span<const int32_t>(&token, 1));
  size_t cut = std::string::npos;
  for (const std::string& s : stop_) cut = std::min(cut, pending_.find(s));
  if (cut != std::string::npos) {
    stopped_ = true;
    std::string out = to_valid_utf8(std::string_view(pending_).substr(0, cut));
    pending_.clear();
    return out;
  }
  // Hold back the longest tail that a stop sequence could begin with, then any unfinished character before it.
  size_t hold = 0;
  for (const std::string& s : stop_)
    for (size_t len = std::min(s.size() - 1, pending_.size()); len > hold; --len)
      if (std::string_view(pending_).substr(pending_.size() - len) == std::string_view(s).substr(0, len)) {
        hold = len;
        break;
      }
  const size_t release = complete_prefix(std::string_view(pending_).substr(0, pending_.size() - hold));
  std::string out = to_valid_utf8(std::string_view(pending_).substr(0, release));
  pending_.erase(0, release);
  return out;
}

std::string TextStream::finish() {
  std::string out = to_valid_utf8(pending_);
  pending_.clear();
  return out;
}

}  // namespace ember
