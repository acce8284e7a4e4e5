// A byte-level BPE vocabulary as the file formats describe it: the bytes of each id, the merges in priority order and
// the special tokens. The loaders (tokenizer_files.cpp) produce it, the trainer (bpe_trainer.h) makes one, and the
// writer (bpe_files.h) turns one into Hugging Face files.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ember {

// Which adjacent pair BPE merges first.
enum class BpeMergeRule {
  pair_rank,   // the pair listed earliest in merges (Hugging Face merges.txt / tokenizer.json)
  token_rank,  // the pair whose concatenation has the lowest id (tiktoken rank files)
};

struct BpeVocab {
  std::vector<std::string> tokens;  // (V) the raw bytes of each id (not GPT-2's printable form); "" for an unused id
  std::vector<std::pair<int32_t, int32_t>> merges;  // pair_rank: merges[r] = (left id, right id), priority r
  BpeMergeRule rule = BpeMergeRule::pair_rank;
  std::vector<std::pair<std::string, int32_t>> special;  // e.g. ("<|endoftext|>", 50256); their ids are in tokens
  bool ignore_merges = false;  // tokenizer.json's `ignore_merges`: a piece that is itself a token is taken whole
};

}  // namespace ember
