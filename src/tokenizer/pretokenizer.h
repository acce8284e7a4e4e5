// GPT-2's pre-tokenization: the regular expression that cuts text into the pieces BPE works on,
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// run by PCRE2 (UTF, UCP, JIT), with \s meaning Unicode White_Space as in Hugging Face tokenizers and tiktoken.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

namespace ember {

class Pretokenizer {
 public:
  Pretokenizer();  // compiles the pattern once; errors are bugs (the pattern is fixed)
  ~Pretokenizer();
  Pretokenizer(const Pretokenizer&) = delete;
  Pretokenizer& operator=(const Pretokenizer&) = delete;

  // Appends the pieces of `text` in order to `pieces`: views into `text` that cover it exactly, none empty.
  // Invalid UTF-8: the text is first cut into maximal valid runs and maximal runs of bytes that start no valid
  // character; each valid run is split by the pattern on its own and each invalid run is one piece.
  // Thread-safe (match data is per thread).
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ember
