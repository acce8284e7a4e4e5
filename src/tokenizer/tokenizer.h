// Tokenizers: one interface, two implementations. The byte tokenizer maps each byte to its own id (vocabulary 256, no
// files); the byte-level BPE tokenizer (bpe_tokenizer.h) reads GPT-2's files, a tokenizer.json or a tiktoken rank file.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ember {

enum class TokenizerKind { bytes, bpe };
inline constexpr TokenizerKind kTokenizerKinds[] = {TokenizerKind::bytes, TokenizerKind::bpe};
const char* tokenizer_kind_name(TokenizerKind t);  // "bytes", "bpe": the one place these names are spelled
std::optional<TokenizerKind> parse_tokenizer_kind(const std::string& name);  // nothing for any other text

// A tokenizer's files by name ("vocab.json", "merges.txt", "tokenizer.json", "gpt2.tiktoken"), contents verbatim:
// what prep copies beside the shards and what a checkpoint stores. Empty for the byte tokenizer.
using TokenizerFiles = std::map<std::string, std::string>;

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual TokenizerKind kind() const = 0;
  // For messages: "bytes", or "bpe (50257 ids, fingerprint 0123456789abcdef)".
  virtual std::string describe() const = 0;
  virtual int vocab_size() const = 0;  // every id is in [0, vocab_size)
  // The end-of-text id that separates documents (<|endoftext|>); nothing for the byte tokenizer.
  virtual std::optional<int32_t> eot_id() const = 0;
  // Appends the ids of `text` to `out`. The text is ordinary: "<|endoftext|>" in it is encoded as its characters
  // (tiktoken's encode_ordinary), so a document can never forge a boundary. Any bytes are accepted.
  virtual void encode_into(std::string_view text, std::vector<int32_t>& out) const = 0;
  // Like encode_into, but special tokens written in the text become their ids.
  virtual void encode_with_special_into(std::string_view text, std::vector<int32_t>& out) const = 0;
  // The bytes of `ids`. An id outside [0, vocab_size), or one that stands for no bytes, is an error naming the id and
  // its position. decode(encode(x)) == x for any bytes x.
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  // The first position p >= from (p <= text.size()) where text can be cut so that encode(text[..p]) followed by
  // encode(text[p..]) equals encode(text); text.size() if there is none. Lets prep and encode_parallel work on huge
  // texts in bounded pieces.
  virtual size_t chunk_boundary(std::string_view text, size_t from) const = 0;
  // Identity of the mapping (the bytes of each id, the merge order, the special tokens): equal for the same
  // vocabulary read from different files. "bytes" for the byte tokenizer, 16 hex digits for BPE.
  virtual std::string fingerprint() const = 0;
  // The files this tokenizer was read from, to store beside shards and in checkpoints; empty for bytes.
  virtual TokenizerFiles files() const = 0;

  std::vector<int32_t> encode(std::string_view text) const {
    std::vector<int32_t> ids;
    encode_into(text, ids);
    return ids;
  }
};

class ByteTokenizer final : public Tokenizer {
 public:
  TokenizerKind kind() const override { return TokenizerKind::bytes; }
  std::string describe() const override { return tokenizer_kind_name(TokenizerKind::bytes); }
  int vocab_size() const override { return 256; }
  std::optional<int32_t> eot_id() const override { return std::nullopt; }
  void encode_into(std::string_view text, std::vector<int32_t>& out) const override;
  void encode_with_special_into(std::string_view text, std::vector<int32_t>& out) const override {
    encode_into(text, out);
  }
  std::string decode(std::span<const int32_t> ids) const override;
  size_t chunk_boundary(std::string_view text, size_t from) const override { return std::min(from, text.size()); }
  std::string fingerprint() const override { return "bytes"; }
  TokenizerFiles files() const override { return {}; }
};

// The tokenizer named by `spec`: "bytes", or a path: a folder holding tokenizer.json, or vocab.json + merges.txt, or
// one *.tiktoken file; or one of those files itself. Malformed files are an error naming the file and the entry,
// with a hint.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec);

// The tokenizer that `files` (as Tokenizer::files() returns them) describe; empty files mean the byte tokenizer.
// `origin` says where they came from in errors ("checkpoint runs/x/step_100.h5").
std::unique_ptr<Tokenizer> tokenizer_from_files(const TokenizerFiles& files, const std::string& origin);

// Writes t.files() into `dir` (created if missing), each file atomically.
void write_tokenizer_files(const Tokenizer& t, const std::string& dir);

// encode() of one long text on `threads` threads: cut at chunk_boundary into pieces of about `piece_bytes`, encoded
// in parallel and concatenated in order, so the ids equal encode(text).
std::vector<int32_t> encode_parallel(const Tokenizer& t, std::string_view text, int threads,
                                     size_t piece_bytes = size_t(1) << 20);

}  // namespace ember
