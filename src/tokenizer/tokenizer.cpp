// Tokenizers (implementation): the byte tokenizer, the factory that reads a tokenizer from a spec or from stored
// files, and the helpers every tokenizer shares (writing its files, parallel encoding).
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>

#include "core/atomic_file.h"
#include "core/enum_names.h"
#include "core/error.h"
#include "core/run_threads.h"
#include "tokenizer/tokenizer_files.h"

namespace ember {

void ByteTokenizer::encode_into(std::string_view text, std::vector<int32_t>& out) const {
  out.reserve(out.size() + text.size());
  // Through unsigned char: bytes >= 0x80 (UTF-8 continuation bytes) must map to 128..255, not to negative ids.
  for (char c : text) out.push_back(int32_t(static_cast<unsigned char>(c)));
}

std::string ByteTokenizer::decode(std::span<const int32_t> ids) const {
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
    case TokenizerKind::bpe:
      return "bpe";
  }
  return "?";
}

std::optional<TokenizerKind> parse_tokenizer_kind(const std::string& name) {
  return find_by_name(kTokenizerKinds, tokenizer_kind_name, name);
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec) {
  if (spec == tokenizer_kind_name(TokenizerKind::bytes)) return std::make_unique<ByteTokenizer>();
  std::error_code ec;
  if (!std::filesystem::exists(spec, ec))
    throw_error("tokenizer " + spec + " does not exist",
                "give 'bytes', or a folder (or file) holding tokenizer.json, vocab.json + merges.txt, or one "
                "*.tiktoken file");
  return bpe_tokenizer_from_files(read_bpe_files(spec), spec);
}

std::unique_ptr<Tokenizer> tokenizer_from_files(const TokenizerFiles& files, const std::string& origin) {
  if (files.empty()) return std::make_unique<ByteTokenizer>();
  return bpe_tokenizer_from_files(files, origin);
}

void write_tokenizer_files(const Tokenizer& t, const std::string& dir) {
  const std::string hint = "check that " + dir + " is writable and has free space";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw_error("tokenizer folder " + dir + ": cannot create: " + ec.message(), hint);
  for (const auto& [name, contents] : t.files())
    write_file_atomically((std::filesystem::path(dir) / name).string(), contents, "tokenizer file", hint);
}

std::vector<int32_t> encode_parallel(const Tokenizer& t, std::string_view text, int threads, size_t piece_bytes) {
  EMBER_ASSERT(threads >= 1 && piece_bytes >= 1, "encode_parallel needs a thread and a piece size");
  std::vector<std::string_view> pieces;
  for (size_t begin = 0; begin < text.size();) {
    const size_t end = begin + piece_bytes >= text.size() ? text.size() : t.chunk_boundary(text, begin + piece_bytes);
    pieces.push_back(text.substr(begin, end - begin));
    begin = end;
  }
  std::vector<std::vector<int32_t>> ids(pieces.size());
  const size_t n_threads = std::max<size_t>(1, std::min(pieces.size(), size_t(threads)));
  run_threads(int(n_threads), [&](int w) {
    for (size_t i = size_t(w); i < pieces.size(); i += n_threads) t.encode_into(pieces[i], ids[i]);
  });
  std::vector<int32_t> out;
  size_t total = 0;
  for (const auto& v : ids) total += v.size();
  out.reserve(total);
  for (const auto& v : ids) out.insert(out.end(), v.begin(), v.end());
  return out;
}

}  // namespace ember
