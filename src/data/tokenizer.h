// Tokenizers. The byte tokenizer maps each byte to its own id (vocab 256), so it needs no files and no training.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ember {

// The tokenizers by name (data.tokenizer, prep's --tokenizer): bytes.
enum class TokenizerKind { bytes };
inline constexpr TokenizerKind kTokenizerKinds[] = {TokenizerKind::bytes};
const char* tokenizer_kind_name(TokenizerKind t);  // "bytes": the one place these names are spelled
std::optional<TokenizerKind> parse_tokenizer_kind(const std::string& name);  // nothing for any other text

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string name() const = 0;
  virtual int vocab_size() const = 0;
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Ids outside the vocabulary are an error.
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
};

class ByteTokenizer final : public Tokenizer {
 public:
  std::string name() const override { return tokenizer_kind_name(TokenizerKind::bytes); }
  int vocab_size() const override { return 256; }
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
};

std::unique_ptr<Tokenizer> make_tokenizer(TokenizerKind kind);
// The tokenizer called `name` (from prep's --tokenizer, or a checkpoint's stored data.tokenizer); an unknown name is
// an error with a hint.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name);

}  // namespace ember
