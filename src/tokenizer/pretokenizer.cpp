// GPT-2's pre-tokenization with PCRE2 (implementation): UTF-8 validation into valid and invalid runs, then the
// JIT-compiled pattern over each valid run, with match data and a JIT stack per thread.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pretokenizer.h"

#include <pcre2.h>

#include <cstdint>
#include <string>

#include "core/error.h"

namespace ember {

namespace {

// \s is written as Unicode White_Space ([\t-\r\x{85}\p{Z}]) and \S as its complement: PCRE2's UCP \s also matches
// U+180E, which neither Hugging Face tokenizers nor tiktoken count as space.
constexpr const char* kPattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\t-\r\x{85}\p{Z}\p{L}\p{N}]+)"
                                 R"(|[\t-\r\x{85}\p{Z}]+(?![^\t-\r\x{85}\p{Z}])|[\t-\r\x{85}\p{Z}]+)";

// The length of the well-formed UTF-8 sequence starting at s[i] (Unicode Table 3-7), or 0 if none starts there.
size_t utf8_sequence_length(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;  // no overlongs
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;  // no overlongs
    if (b0 == 0xF4) hi = 0x8F;  // nothing past U+10FFFF
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  return n;
}

}  // namespace

struct Pretokenizer::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;

  // Match data, match context and JIT stack of one thread. 1 MiB of JIT stack is far more than the pattern needs
  // (its repeats are single characters, which the JIT runs without a frame per character) even on 1 MB runs.
  struct ThreadState {
    pcre2_match_data* data = nullptr;
    pcre2_match_context* context = nullptr;
    pcre2_jit_stack* stack = nullptr;
    ThreadState() {
      data = pcre2_match_data_create(1, nullptr);
      context = pcre2_match_context_create(nullptr);
      stack = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, nullptr);
      EMBER_ASSERT(data && context && stack, "out of memory for PCRE2 match data");
      pcre2_jit_stack_assign(context, nullptr, stack);
    }
    ~ThreadState() {
      pcre2_jit_stack_free(stack);
      pcre2_match_context_free(context);
      pcre2_match_data_free(data);
    }
  };

  void split_valid(std::string_view run, std::vector<std::string_view>& pieces) const {
    thread_local ThreadState state;
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(run.data());
    size_t pos = 0;
    while (pos < run.size()) {
      const int rc =
          jit ? pcre2_jit_match(code, subject, run.size(), pos, PCRE2_NO_UTF_CHECK, state.data, state.context)
              : pcre2_match(code, subject, run.size(), pos, PCRE2_NO_UTF_CHECK, state.data, state.context);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      EMBER_ASSERT(rc > 0, "PCRE2 match failed with code " + std::to_string(rc));
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(state.data);
      EMBER_ASSERT(ov[1] > ov[0], "the pre-tokenization pattern matched an empty piece");
      // Every character falls in one of the pattern's classes, so there is no gap; kept whole if there ever were.
      if (ov[0] > pos) pieces.push_back(run.substr(pos, ov[0] - pos));
      pieces.push_back(run.substr(ov[0], ov[1] - ov[0]));
      pos = ov[1];
    }
    if (pos < run.size()) pieces.push_back(run.substr(pos));
  }
};

Pretokenizer::Pretokenizer() : impl_(std::make_unique<Impl>()) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern), PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                              &error, &offset, nullptr);
  if (!impl_->code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    EMBER_ASSERT(false, "pre-tokenization pattern does not compile at offset " + std::to_string(offset) + ": " +
                            reinterpret_cast<const char*>(message));
  }
  // Without JIT support (some platforms) pcre2_match interprets the pattern: slower, same pieces.
  impl_->jit = pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE) == 0;
}

Pretokenizer::~Pretokenizer() { pcre2_code_free(impl_->code); }

void Pretokenizer::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  size_t i = 0;
  while (i < text.size()) {
    size_t j = i;
    size_t n = 0;
    while (j < text.size() && (n = utf8_sequence_length(text, j)) > 0) j += n;
    if (j > i) {
      impl_->split_valid(text.substr(i, j - i), pieces);
      i = j;
      continue;
    }
    while (j < text.size() && utf8_sequence_length(text, j) == 0) ++j;
    pieces.push_back(text.substr(i, j - i));
    i = j;
  }
}

}  // namespace ember
