// Byte-level BPE training (implementation): sharded piece counts filled by many threads, then the merge loop over
// the distinct pieces with pair counts, a pair -> words index and a lazily invalidated max-heap.
#include "tokenizer/bpe_trainer.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <mutex>
#include <queue>
#include <unordered_map>

#include "core/error.h"
#include "core/log.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pretokenizer.h"

namespace ember {

namespace {

// 64 shards keep lock contention negligible at 16 threads: a thread holds one shard's lock only while it adds the
// pieces of one document that hash there.
constexpr size_t COUNT_SHARDS = 64;

using PairKey = uint64_t;
PairKey pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
int32_t pair_left(PairKey k) { return int32_t(k >> 32); }
int32_t pair_right(PairKey k) { return int32_t(k & 0xffffffffu); }

struct HeapEntry {
  int64_t count;
  PairKey pair;
  // std::priority_queue pops the largest: larger count first, then the smaller (left, right).
  bool operator<(const HeapEntry& o) const { return count != o.count ? count < o.count : pair > o.pair; }
};

// The distinct pieces as id sequences in one flat array; a merge only shrinks a word, so it is rewritten in place.
struct Words {
  std::vector<int32_t> ids;
  std::vector<uint64_t> begin;  // (W) offset of word w in ids
  std::vector<uint32_t> size;   // (W) its current length
  std::vector<uint64_t> freq;   // (W) how often the piece occurs in the corpus
};

// The distinct pieces, sorted so the layout never depends on hashing or thread timing, as byte-token id sequences.
Words make_words(std::vector<std::pair<std::string, uint64_t>>& pieces) {
  const std::array<unsigned char, 256>& order = gpt2_byte_order();
  int32_t base_id[256];
  for (int i = 0; i < 256; ++i) base_id[order[i]] = i;
  std::sort(pieces.begin(), pieces.end());
  Words words;
  for (const auto& [piece, n] : pieces) {
    words.begin.push_back(words.ids.size());
    words.size.push_back(uint32_t(piece.size()));
    words.freq.push_back(n);
    for (unsigned char c : piece) words.ids.push_back(base_id[c]);
  }
  return words;
}

// What the merge loop knows of the adjacent pairs: how often each occurs (weighted by its words' frequencies), which
// words hold it (a word may be listed twice; deduplicated when used), and a max-heap of counts whose stale entries are
// skipped when popped.
struct PairStats {
  std::unordered_map<PairKey, int64_t> count;
  std::unordered_map<PairKey, std::vector<uint32_t>> words;
  std::priority_queue<HeapEntry> heap;
  std::unordered_map<PairKey, int64_t> delta;  // merge_pair's scratch
};

PairStats count_pairs(const Words& words) {
  PairStats st;
  for (size_t w = 0; w < words.begin.size(); ++w) {
    const int32_t* ids = &words.ids[words.begin[w]];
    for (uint32_t i = 0; i + 1 < words.size[w]; ++i) {
      const PairKey k = pair_key(ids[i], ids[i + 1]);
      st.count[k] += int64_t(words.freq[w]);
      std::vector<uint32_t>& list = st.words[k];
      if (list.empty() || list.back() != uint32_t(w)) list.push_back(uint32_t(w));
    }
  }
  for (const auto& [k, c] : st.count) st.heap.push({c, k});
  return st;
}

// Rewrites every word that holds `pair` with each occurrence replaced by `merged`, and updates the pair statistics.
void merge_pair(Words& words, PairStats& st, PairKey pair, int32_t merged) {
  const int32_t a = pair_left(pair), b = pair_right(pair);
  std::vector<uint32_t> affected = std::move(st.words[pair]);
  st.words.erase(pair);
  std::sort(affected.begin(), affected.end());
  affected.erase(std::unique(affected.begin(), affected.end()), affected.end());
  st.delta.clear();
  for (uint32_t w : affected) {
    int32_t* ids = &words.ids[words.begin[w]];
    const uint32_t n = words.size[w];
    const int64_t f = int64_t(words.freq[w]);
    bool found = false;
    for (uint32_t i = 0; i + 1 < n; ++i) found = found || (ids[i] == a && ids[i + 1] == b);
    if (!found) continue;
    for (uint32_t i = 0; i + 1 < n; ++i) st.delta[pair_key(ids[i], ids[i + 1])] -= f;
    uint32_t out = 0;
    for (uint32_t i = 0; i < n; ++i) {
      if (i + 1 < n && ids[i] == a && ids[i + 1] == b) {
        ids[out++] = merged;
        ++i;
      } else {
        ids[out++] = ids[i];
      }
    }
    words.size[w] = out;
    for (uint32_t i = 0; i + 1 < out; ++i) {
      const PairKey k = pair_key(ids[i], ids[i + 1]);
      st.delta[k] += f;
      if (ids[i] == merged || ids[i + 1] == merged) {
        std::vector<uint32_t>& list = st.words[k];
        if (list.empty() || list.back() != w) list.push_back(w);
      }
    }
  }
  for (const auto& [k, d] : st.delta) {
    if (d == 0) continue;
    int64_t& c = st.count[k];
    c += d;
    if (c <= 0) {
      st.count.erase(k);
      if (k != pair) st.words.erase(k);
    } else {
      st.heap.push({c, k});
    }
  }
}

// The id of the token spelling a's bytes then b's: a new one, or the one that already spells them (two pairs spelling
// the same bytes share one id, as Hugging Face's trainer does).
int32_t merged_token(BpeVocab& vocab, std::unordered_map<std::string, int32_t>& token_id, int32_t a, int32_t b) {
  std::string bytes = vocab.tokens[size_t(a)] + vocab.tokens[size_t(b)];
  if (const auto found = token_id.find(bytes); found != token_id.end()) return found->second;
  const int32_t merged = int32_t(vocab.tokens.size());
  token_id.emplace(bytes, merged);
  vocab.tokens.push_back(std::move(bytes));
  return merged;
}

}  // namespace

struct BpeTrainer::Impl {
  BpeTrainOptions options;
  Pretokenizer pretokenizer;
  struct Shard {
    std::mutex mutex;
    std::unordered_map<std::string, uint64_t> counts;
  };
  Shard shards[COUNT_SHARDS];
  size_t distinct_pieces = 0;
};

BpeTrainer::BpeTrainer(BpeTrainOptions options) : impl_(std::make_unique<Impl>()) {
  const int min_size = 256 + int(options.special.size());
  if (options.vocab_size < min_size)
    throw_error("tokenizer train: vocab size " + std::to_string(options.vocab_size) + " is below " +
                    std::to_string(min_size) + " (256 byte tokens + special tokens)",
                "ask for a larger vocabulary, e.g. 32768");
  impl_->options = std::move(options);
}

BpeTrainer::~BpeTrainer() = default;

void BpeTrainer::add_document(std::string_view text) {
  std::vector<std::string_view> pieces;
  impl_->pretokenizer.split(text, pieces);
  // Count locally first so each shard lock is taken once per document, not once per piece.
  std::unordered_map<std::string_view, uint64_t> local;
  for (std::string_view p : pieces) ++local[p];
  std::vector<std::vector<std::pair<std::string_view, uint64_t>>> by_shard(COUNT_SHARDS);
  const std::hash<std::string_view> hasher;
  for (const auto& [piece, n] : local) by_shard[hasher(piece) % COUNT_SHARDS].emplace_back(piece, n);
  for (size_t s = 0; s < COUNT_SHARDS; ++s) {
    if (by_shard[s].empty()) continue;
    std::lock_guard<std::mutex> lock(impl_->shards[s].mutex);
    for (const auto& [piece, n] : by_shard[s]) impl_->shards[s].counts[std::string(piece)] += n;
  }
}

size_t BpeTrainer::distinct_pieces() const { return impl_->distinct_pieces; }

BpeVocab BpeTrainer::finish() {
  const BpeTrainOptions& opt = impl_->options;
  std::vector<std::pair<std::string, uint64_t>> pieces;
  for (auto& shard : impl_->shards) {
    for (auto& [piece, n] : shard.counts) pieces.emplace_back(piece, n);
    shard.counts = {};
  }
  Words words = make_words(pieces);
  const size_t n_words = pieces.size();
  impl_->distinct_pieces = n_words;
  pieces = {};
  const auto start = std::chrono::steady_clock::now();

  BpeVocab vocab;
  vocab.rule = BpeMergeRule::pair_rank;
  std::unordered_map<std::string, int32_t> token_id;
  const std::array<unsigned char, 256>& order = gpt2_byte_order();
  for (int i = 0; i < 256; ++i) {
    vocab.tokens.emplace_back(1, char(order[i]));
    token_id[vocab.tokens.back()] = i;
  }

  PairStats pairs = count_pairs(words);
  const int target = opt.vocab_size - int(opt.special.size());
  while (int(vocab.tokens.size()) < target) {
    if (pairs.heap.empty()) {
      log_info("tokenizer train: stopped at %zu merges: every piece is a single token", vocab.merges.size());
      break;
    }
    const HeapEntry top = pairs.heap.top();
    pairs.heap.pop();
    const auto it = pairs.count.find(top.pair);
    if (it == pairs.count.end() || it->second != top.count) continue;  // stale: a newer entry holds the count
    if (top.count < opt.min_frequency) {
      log_info("tokenizer train: stopped at %zu merges: no pair occurs %d times or more (min frequency)",
               vocab.merges.size(), opt.min_frequency);
      break;
    }
    const int32_t a = pair_left(top.pair), b = pair_right(top.pair);
    const int32_t merged = merged_token(vocab, token_id, a, b);
    vocab.merges.emplace_back(a, b);
    merge_pair(words, pairs, top.pair, merged);
  }

  log_debug("tokenizer train: %zu merges over %zu distinct pieces in %.1f s", vocab.merges.size(), n_words,
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  for (const std::string& s : opt.special) {
    const int32_t id = int32_t(vocab.tokens.size());
    vocab.tokens.push_back(s);
    vocab.special.emplace_back(s, id);
  }
  return vocab;
}

}  // namespace ember
