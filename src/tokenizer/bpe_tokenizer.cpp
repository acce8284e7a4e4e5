// The byte-level BPE tokenizer (implementation): the merge tables of both rules, the merge loops (a small vector for
// short pieces, a heap for long ones), a bounded per-thread piece cache, special tokens and the fingerprint.
#include "tokenizer/bpe_tokenizer.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdio>

#include "core/error.h"

namespace ember {

namespace {

// Pieces up to this many bytes merge in an O(n^2) vector loop (a few cache lines, no allocation); longer ones
// (1 MB runs of one character) use a heap, O(n log n).
constexpr size_t kShortPiece = 64;
constexpr size_t kCacheEntries = 1 << 15;  // per thread; cleared when full

uint64_t pair_key(int32_t left, int32_t right) { return uint64_t(uint32_t(left)) << 32 | uint32_t(right); }

struct Fnv1a {
  uint64_t h = 0xcbf29ce484222325ull;
  void bytes(std::string_view s) {
    for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) h = (h ^ ((v >> (8 * i)) & 0xff)) * 0x100000001b3ull;
  }
  void str(std::string_view s) {
    u64(s.size());
    bytes(s);
  }
};

struct PieceCache {
  uint64_t owner = 0;
  std::unordered_map<std::string, std::vector<int32_t>> ids;
};

std::atomic<uint64_t> next_instance{1};

}  // namespace

BpeTokenizer::BpeTokenizer(BpeVocab vocab, TokenizerFiles files, const std::string& origin)
    : vocab_(std::move(vocab)), files_(std::move(files)), instance_(next_instance++) {
  std::unordered_map<uint64_t, Merge> merges;  // gathered here, then laid out in merge_table_
  const auto& tokens = vocab_.tokens;
  const int32_t V = int32_t(tokens.size());
  std::vector<uint8_t> is_special(tokens.size(), 0);
  for (const auto& [text, id] : vocab_.special) {
    EMBER_ASSERT(id >= 0 && id < V, "special token id outside the vocabulary");
    is_special[size_t(id)] = 1;
    if (text == "<|endoftext|>") eot_ = id;
  }
  for (int32_t id = 0; id < V; ++id)
    if (!tokens[size_t(id)].empty() && !is_special[size_t(id)]) ids_.emplace(tokens[size_t(id)], id);
  for (int b = 0; b < 256; ++b) {
    auto it = ids_.find(std::string_view(std::string(1, char(b))));
    if (it == ids_.end()) {
      char hex[8];
      snprintf(hex, sizeof(hex), "0x%02x", b);
      throw_error(origin + ": the byte " + hex + " has no token",
                  "a byte-level BPE vocabulary needs a token for each of the 256 bytes; use GPT-2's files or one "
                  "trained by ember tokenizer train");
    }
    byte_ids_[b] = it->second;
  }
  if (vocab_.rule == BpeMergeRule::pair_rank) {
    for (size_t r = 0; r < vocab_.merges.size(); ++r) {
      const auto [left, right] = vocab_.merges[r];
      EMBER_ASSERT(left >= 0 && left < V && right >= 0 && right < V, "merge names an id outside the vocabulary");
      auto it = ids_.find(tokens[size_t(left)] + tokens[size_t(right)]);
      if (it == ids_.end())
        throw_error(origin + ": merge " + std::to_string(r) + " makes a token that is not in the vocabulary",
                    "every merge's concatenation must be a token; the files may be truncated or mismatched");
      merges.emplace(pair_key(left, right), Merge{uint32_t(r), it->second});  // the first listing wins
    }
  } else {
    // Every split of every token into two tokens is a pair that merges into it, at the token's rank.
    for (int32_t id = 0; id < V; ++id) {
      const std::string_view t = tokens[size_t(id)];
      if (is_special[size_t(id)] || t.size() < 2) continue;
      for (size_t k = 1; k < t.size(); ++k) {
        auto l = ids_.find(t.substr(0, k)), r = ids_.find(t.substr(k));
        if (l != ids_.end() && r != ids_.end()) merges.emplace(pair_key(l->second, r->second), Merge{uint32_t(id), id});
      }
    }
  }
  size_t slots = 16;
  while (slots < 2 * merges.size()) slots *= 2;
  merge_table_.assign(slots, MergeSlot{});
  merge_shift_ = 64 - std::countr_zero(slots);
  for (const auto& [key, merge] : merges) {
    size_t i = size_t((key * 0x9e3779b97f4a7c15ull) >> merge_shift_);
    while (merge_table_[i].key != UINT64_MAX) i = (i + 1) & (slots - 1);
    merge_table_[i] = {key, merge};
  }
  whole_.assign(tokens.size(), 0);
  std::vector<int32_t> merged;
  for (const auto& [bytes, id] : ids_) {
    if (vocab_.rule == BpeMergeRule::token_rank || vocab_.ignore_merges) {
      whole_[size_t(id)] = 1;
      continue;
    }
    merged.clear();
    merge_piece(bytes, merged);
    whole_[size_t(id)] = merged.size() == 1 && merged[0] == id;
  }
  special_by_length_ = vocab_.special;
  std::stable_sort(special_by_length_.begin(), special_by_length_.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });

  // The fingerprint: FNV-1a 64 over a canonical serialization of everything that decides the ids. Merge ranks that
  // act exactly as token ranks are written as token ranks, so Hugging Face and tiktoken files of one vocabulary agree.
  const BpeMergeRule rule = acts_as_token_rank() ? BpeMergeRule::token_rank : vocab_.rule;
  Fnv1a f;
  f.bytes("ember-bpe-1");
  f.u64(tokens.size());
  for (const auto& t : tokens) f.str(t);
  f.u64(uint64_t(rule));
  if (rule == BpeMergeRule::pair_rank) {
    f.u64(vocab_.merges.size());
    for (const auto& [l, r] : vocab_.merges) f.u64(pair_key(l, r));
    f.u64(vocab_.ignore_merges);
  }
  auto special = vocab_.special;
  std::sort(special.begin(), special.end());
  f.u64(special.size());
  for (const auto& [text, id] : special) {
    f.str(text);
    f.u64(uint64_t(id));
  }
  char hex[17];
  snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(f.h));
  fingerprint_ = hex;
}

bool BpeTokenizer::acts_as_token_rank() const {
  if (vocab_.rule == BpeMergeRule::token_rank) return true;
  // Enough: every token is taken whole where it is a piece (so the shortcuts agree), every multi-byte token splits
  // into two tokens in exactly one way, that split is its merge, and merges come in the order of the ids they make
  // (so both rules order every pair alike).
  size_t multi_byte = 0;
  for (const auto& [bytes, id] : ids_) {
    if (!whole_[size_t(id)]) return false;
    if (bytes.size() < 2) continue;
    ++multi_byte;
    int splits = 0;
    for (size_t k = 1; k < bytes.size(); ++k) {
      auto l = ids_.find(std::string_view(bytes).substr(0, k)), r = ids_.find(std::string_view(bytes).substr(k));
      if (l == ids_.end() || r == ids_.end()) continue;
      const Merge* m = find_merge(l->second, r->second);
      if (++splits > 1 || !m || m->merged != id) return false;
    }
    if (splits != 1) return false;
  }
  if (vocab_.merges.size() != multi_byte) return false;
  for (size_t r = 1; r < vocab_.merges.size(); ++r)
    if (find_merge(vocab_.merges[r].first, vocab_.merges[r].second)->merged <=
        find_merge(vocab_.merges[r - 1].first, vocab_.merges[r - 1].second)->merged)
      return false;
  return true;
}

std::string BpeTokenizer::describe() const {
  return "bpe (" + std::to_string(vocab_size()) + " ids, fingerprint " + fingerprint_ + ")";
}

const BpeTokenizer::Merge* BpeTokenizer::find_merge(int32_t left, int32_t right) const {
  const uint64_t key = pair_key(left, right);
  const size_t mask = merge_table_.size() - 1;
  for (size_t i = size_t((key * 0x9e3779b97f4a7c15ull) >> merge_shift_);; i = (i + 1) & mask) {
    const MergeSlot& slot = merge_table_[i];
    if (slot.key == key) return &slot.merge;
    if (slot.key == UINT64_MAX) return nullptr;
  }
}

void BpeTokenizer::merge_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() <= kShortPiece)
    merge_short(piece, out);
  else
    merge_long(piece, out);
}

void BpeTokenizer::merge_short(std::string_view piece, std::vector<int32_t>& out) const {
  constexpr uint32_t kNone = UINT32_MAX;
  int32_t ids[kShortPiece];
  uint32_t prio[kShortPiece];  // prio[i]: the priority of merging ids[i] with ids[i + 1]
  int32_t merged[kShortPiece];
  size_t n = piece.size();
  for (size_t i = 0; i < n; ++i) ids[i] = byte_ids_[static_cast<unsigned char>(piece[i])];
  auto rate = [&](size_t i) {
    const Merge* m = find_merge(ids[i], ids[i + 1]);
    prio[i] = m ? m->priority : kNone;
    merged[i] = m ? m->merged : -1;
  };
  for (size_t i = 0; i + 1 < n; ++i) rate(i);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i)
      if (prio[i] < prio[best]) best = i;  // strict: the leftmost of equal priorities
    if (prio[best] == kNone) break;
    ids[best] = merged[best];
    for (size_t i = best + 1; i + 1 < n; ++i) {
      ids[i] = ids[i + 1];
      prio[i] = prio[i + 1];
      merged[i] = merged[i + 1];
    }
    --n;
    if (best + 1 < n) rate(best);
    if (best > 0) rate(best - 1);
  }
  out.insert(out.end(), ids, ids + n);
}

void BpeTokenizer::merge_long(std::string_view piece, std::vector<int32_t>& out) const {
  const size_t n = piece.size();
  EMBER_ASSERT(n < UINT32_MAX, "a pre-tokenization piece of 4 GiB or more");
  // A doubly linked list of symbols (ids[i] = -1 once merged into its left neighbour) and a min-heap of candidate
  // merges packed as priority << 32 | position: 8 bytes each, ordered by priority, then leftmost first. A candidate
  // is current when the pair at its position still has its priority (a priority names one merged token).
  std::vector<int32_t> ids(n);
  std::vector<uint32_t> next(n), prev(n);
  for (size_t i = 0; i < n; ++i) {
    ids[i] = byte_ids_[static_cast<unsigned char>(piece[i])];
    next[i] = uint32_t(i + 1);
    prev[i] = uint32_t(i - 1);  // wraps for i = 0: never read there
  }
  std::vector<uint64_t> heap;
  heap.reserve(n / 2);
  for (size_t i = 0; i + 1 < n; ++i)
    if (const Merge* m = find_merge(ids[i], ids[i + 1])) heap.push_back(uint64_t(m->priority) << 32 | i);
  std::make_heap(heap.begin(), heap.end(), std::greater<>());
  auto push = [&](uint32_t i) {
    if (next[i] >= n) return;
    if (const Merge* m = find_merge(ids[i], ids[next[i]])) {
      heap.push_back(uint64_t(m->priority) << 32 | i);
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
    }
  };
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    const uint64_t top = heap.back();
    heap.pop_back();
    const auto pos = uint32_t(top), j = next[pos];
    if (ids[pos] < 0 || j >= n) continue;
    const Merge* m = find_merge(ids[pos], ids[j]);
    if (!m || m->priority != uint32_t(top >> 32)) continue;  // stale: a neighbour changed
    ids[pos] = m->merged;
    ids[j] = -1;
    next[pos] = next[j];
    if (next[j] < n) prev[next[j]] = pos;
    push(pos);
    if (pos > 0) push(prev[pos]);
  }
  for (size_t i = 0; i < n; i = next[i]) out.push_back(ids[i]);
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  auto it = ids_.find(piece);
  if (it != ids_.end() && whole_[size_t(it->second)]) {
    out.push_back(it->second);
    return;
  }
  if (piece.size() > kShortPiece) {
    merge_long(piece, out);
    return;
  }
  thread_local PieceCache cache;
  if (cache.owner != instance_ || cache.ids.size() >= kCacheEntries) {
    cache.ids.clear();
    cache.owner = instance_;
  }
  auto [slot, fresh] = cache.ids.try_emplace(std::string(piece));
  if (fresh) merge_short(piece, slot->second);
  out.insert(out.end(), slot->second.begin(), slot->second.end());
}

void BpeTokenizer::encode_into(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<std::string_view> pieces;
  pieces.reserve(text.size() / 4 + 1);
  pretokenizer_.split(text, pieces);
  out.reserve(out.size() + pieces.size() + pieces.size() / 4);
  for (std::string_view piece : pieces) encode_piece(piece, out);
}

void BpeTokenizer::encode_with_special_into(std::string_view text, std::vector<int32_t>& out) const {
  // next_at[k]: where special k next occurs at or after `pos` (npos: nowhere), found again only once passed.
  std::vector<size_t> next_at(special_by_length_.size());
  for (size_t k = 0; k < next_at.size(); ++k)
    next_at[k] = special_by_length_[k].first.empty() ? std::string_view::npos : text.find(special_by_length_[k].first);
  size_t pos = 0;
  while (pos < text.size()) {
    size_t best_at = std::string_view::npos, best = 0;
    for (size_t k = 0; k < special_by_length_.size(); ++k) {
      const std::string& s = special_by_length_[k].first;
      if (next_at[k] != std::string_view::npos && next_at[k] < pos) next_at[k] = text.find(s, pos);
      if (next_at[k] < best_at) best_at = next_at[k], best = k;  // strict: the longest of those starting there
    }
    if (best_at == std::string_view::npos) break;
    encode_into(text.substr(pos, best_at - pos), out);
    out.push_back(special_by_length_[best].second);
    pos = best_at + special_by_length_[best].first.size();
  }
  encode_into(text.substr(pos), out);
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  text.reserve(ids.size() * 4);
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= vocab_size() || vocab_.tokens[size_t(id)].empty())
      throw_error(
          "token id " + std::to_string(id) + " at position " + std::to_string(i) +
              (id < 0 || id >= vocab_size() ? " is outside the vocabulary [0, " + std::to_string(vocab_size()) + ")"
                                            : " is an unused id of the vocabulary"),
          "decode ids with the tokenizer that produced them (" + describe() + ")");
    text += vocab_.tokens[size_t(id)];
  }
  return text;
}

size_t BpeTokenizer::chunk_boundary(std::string_view text, size_t from) const {
  const auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); };
  const auto graph = [](char c) { return c >= '!' && c <= '~'; };
  for (size_t p = std::max<size_t>(from, 1); p < text.size(); ++p) {
    if (text[p] == ' ' && alnum(text[p - 1])) return p;
    if (text[p - 1] == '\n' && p >= 2 && graph(text[p - 2]) && graph(text[p])) return p;
  }
  return text.size();
}

}  // namespace ember
