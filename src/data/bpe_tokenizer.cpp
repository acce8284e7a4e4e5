// The byte-level BPE tokenizer (implementation): the merge tables of both rules, the merge loops (a small vector for
// short pieces, a heap for long ones), a bounded per-thread piece cache, special tokens and the fingerprint.
#include "data/bpe_tokenizer.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <queue>

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
      merges_.emplace(pair_key(left, right), Merge{uint32_t(r), it->second});  // the first listing wins
    }
  } else {
    // Every split of every token into two tokens is a pair that merges into it, at the token's rank.
    for (int32_t id = 0; id < V; ++id) {
      const std::string_view t = tokens[size_t(id)];
      if (is_special[size_t(id)] || t.size() < 2) continue;
      for (size_t k = 1; k < t.size(); ++k) {
        auto l = ids_.find(t.substr(0, k)), r = ids_.find(t.substr(k));
        if (l != ids_.end() && r != ids_.end())
          merges_.emplace(pair_key(l->second, r->second), Merge{uint32_t(id), id});
      }
    }
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

  // The fingerprint: FNV-1a 64 over a canonical serialization of everything that decides the ids.
  Fnv1a f;
  f.bytes("ember-bpe-1");
  f.u64(tokens.size());
  for (const auto& t : tokens) f.str(t);
  f.u64(uint64_t(vocab_.rule));
  if (vocab_.rule == BpeMergeRule::pair_rank) {
    f.u64(vocab_.merges.size());
    for (const auto& [l, r] : vocab_.merges) f.u64(pair_key(l, r));
  }
  f.u64(vocab_.ignore_merges);
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

std::string BpeTokenizer::describe() const {
  return "bpe (" + std::to_string(vocab_size()) + " ids, fingerprint " + fingerprint_ + ")";
}

const BpeTokenizer::Merge* BpeTokenizer::find_merge(int32_t left, int32_t right) const {
  auto it = merges_.find(pair_key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
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
  std::vector<int32_t> ids(n);
  std::vector<size_t> next(n), prev(n);
  for (size_t i = 0; i < n; ++i) {
    ids[i] = byte_ids_[static_cast<unsigned char>(piece[i])];
    next[i] = i + 1;
    prev[i] = i - 1;  // wraps for i = 0: never read there
  }
  struct Candidate {
    uint32_t priority;
    size_t pos;  // the left symbol's first byte: order by position is order in the sequence
    int32_t left, right;
    bool operator>(const Candidate& o) const { return priority != o.priority ? priority > o.priority : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](size_t i) {
    if (next[i] >= n) return;
    if (const Merge* m = find_merge(ids[i], ids[next[i]])) heap.push({m->priority, i, ids[i], ids[next[i]]});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const size_t j = next[c.pos];
    if (ids[c.pos] != c.left || j >= n || ids[j] != c.right) continue;  // stale: a neighbour changed
    ids[c.pos] = find_merge(c.left, c.right)->merged;
    ids[j] = -1;
    next[c.pos] = next[j];
    if (next[j] < n) prev[next[j]] = c.pos;
    push(c.pos);
    if (c.pos > 0) push(prev[c.pos]);
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
