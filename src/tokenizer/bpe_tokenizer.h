// The byte-level BPE tokenizer: GPT-2's pre-tokenization, then BPE on each piece under either merge rule (Hugging
// Face's merge ranks or tiktoken's token ranks), with special tokens, a fingerprint and safe cut points.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/bpe_vocab.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"

namespace ember {

class BpeTokenizer final : public Tokenizer {
 public:
  // `files` are what the vocabulary was read from (returned by files()); `origin` names them in errors. Every single
  // byte must have a token, and each merge must name ids that exist (ember::Error otherwise).
  BpeTokenizer(BpeVocab vocab, TokenizerFiles files, const std::string& origin);

  TokenizerKind kind() const override { return TokenizerKind::bpe; }
  std::string describe() const override;
  int vocab_size() const override { return int(vocab_.tokens.size()); }
  std::optional<int32_t> eot_id() const override { return eot_; }
  void encode_into(std::string_view text, std::vector<int32_t>& out) const override;
  void encode_with_special_into(std::string_view text, std::vector<int32_t>& out) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  // Cuts after an ASCII letter or digit before a space, or at the start of a line between ASCII printable
  // non-space characters: there the piece before ends and the pattern's matches from the cut depend only on what
  // follows.
  size_t chunk_boundary(std::string_view text, size_t from) const override;
  std::string fingerprint() const override { return fingerprint_; }
  TokenizerFiles files() const override { return files_; }

  const BpeVocab& vocab() const { return vocab_; }
  // BPE of one piece without the whole-piece shortcut (for tests and the load-time check).
  void merge_piece(std::string_view piece, std::vector<int32_t>& out) const;

 private:
  struct Merge {
    uint32_t priority;  // lower merges first: the merge's rank (pair_rank) or the merged token's id (token_rank)
    int32_t merged;     // the id of the concatenation
  };
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  const Merge* find_merge(int32_t left, int32_t right) const;
  // True when this vocabulary encodes every text as it would under token ranks (always, for token ranks).
  bool acts_as_token_rank() const;
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  void merge_short(std::string_view piece, std::vector<int32_t>& out) const;
  void merge_long(std::string_view piece, std::vector<int32_t>& out) const;

  BpeVocab vocab_;
  TokenizerFiles files_;
  Pretokenizer pretokenizer_;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> ids_;  // bytes -> id, specials excluded
  // (left << 32 | right) -> merge, open addressing with linear probing at most half full: the merge loops' one
  // lookup per pair stays within a cache line or two.
  struct MergeSlot {
    uint64_t key = UINT64_MAX;  // UINT64_MAX: empty (no pair of valid ids packs to it)
    Merge merge{};
  };
  std::vector<MergeSlot> merge_table_;
  int merge_shift_ = 64;        // slot = (key * golden) >> merge_shift_
  std::vector<uint8_t> whole_;  // (V) 1 where a piece equal to the token may be taken whole
  int32_t byte_ids_[256];
  std::vector<std::pair<std::string, int32_t>> special_by_length_;  // longest first
  std::optional<int32_t> eot_;
  std::string fingerprint_;
  uint64_t instance_;  // tells the per-thread piece caches of different tokenizers apart
};

}  // namespace ember
