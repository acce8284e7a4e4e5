// Tokenizers (implementation): the byte tokenizer and the factory that picks a tokenizer by its config name.
// Kept tiny on purpose: the byte tokenizer is the one every test and demo can use without downloading anything.
#include "data/tokenizer.h"

#include "core/enum_names.h"
#include "core/error.h"

namespace ember {

std::vector<int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  // Through unsigned char: bytes >= 0x80 (UTF-8 continuation bytes) must map to 128..255, not to negative ids.
  for (char c : text) ids.push_back(int32_t(static_cast<unsigned char>(c)));
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string text;
  text.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= 256)
      throw_error("token id " + std::to_string(id) + " at position " + std::to_string(i) +
                      " is outside the byte tokenizer's vocabulary [0, 256)",
                  "the ids come from a model whose vocab_size is larger than 256; decode them with the "
                  "tokenizer the model was trained with, or train with model.vocab_size = 256 for 'bytes'");
    text.push_back(static_cast<char>(static_cast<unsigned char>(id)));
  }
  return text;
}

const char* tokenizer_kind_name(TokenizerKind t) {
  switch (t) {
    case TokenizerKind::bytes:
      return "bytes";
  }
  return "?";
}

std::optional<TokenizerKind> parse_tokenizer_kind(const std::string& name) {
  return find_by_name(kTokenizerKinds, tokenizer_kind_name, name);
}

std::unique_ptr<Tokenizer> make_tokenizer(TokenizerKind kind) {
  switch (kind) {
    case TokenizerKind::bytes:
      return std::make_unique<ByteTokenizer>();
  }
  EMBER_ASSERT(false, "a tokenizer kind without a tokenizer");
  return nullptr;
}

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name) {
  const std::optional<TokenizerKind> kind = parse_tokenizer_kind(name);
  if (!kind)
    throw_error("unknown tokenizer '" + name + "'",
                "the known tokenizers are: " + join_names(kTokenizerKinds, tokenizer_kind_name));
  return make_tokenizer(*kind);
}

}  // namespace ember
