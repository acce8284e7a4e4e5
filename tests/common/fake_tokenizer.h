// A tokenizer with files, a fingerprint and a vocabulary size of the test's choosing: what checkpoints and the
// tokenizer checks look at, without BPE files to write.
#pragma once

#include <string>
#include <utility>

#include "tokenizer/tokenizer.h"

namespace ember::test {

class FakeTokenizer final : public Tokenizer {
 public:
  FakeTokenizer(TokenizerFiles files, std::string fingerprint, int vocab)
      : files_(std::move(files)), fingerprint_(std::move(fingerprint)), vocab_(vocab) {}
  TokenizerKind kind() const override { return TokenizerKind::bpe; }
  std::string describe() const override { return "bpe (fake " + fingerprint_ + ")"; }
  int vocab_size() const override { return vocab_; }
  std::optional<int32_t> eot_id() const override { return vocab_ - 1; }
  void encode_into(std::string_view, std::vector<int32_t>&) const override {}
  void encode_with_special_into(std::string_view, std::vector<int32_t>&) const override {}
  std::string decode(std::span<const int32_t>) const override { return ""; }
  size_t chunk_boundary(std::string_view text, size_t) const override { return text.size(); }
  std::string fingerprint() const override { return fingerprint_; }
  TokenizerFiles files() const override { return files_; }

 private:
  TokenizerFiles files_;
  std::string fingerprint_;
  int vocab_;
};

}  // namespace ember::test
