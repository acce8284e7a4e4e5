// Byte-level BPE training: count the GPT-2 pre-tokenization pieces of a corpus, then merge the most frequent adjacent
// pair until the vocabulary has the size asked for. The result loads in Hugging Face tokenizers and tiktoken.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/bpe_vocab.h"

namespace ember {

struct BpeTrainOptions {
  int vocab_size = 0;                                    // 256 byte tokens + merges + special tokens
  std::vector<std::string> special = {"<|endoftext|>"};  // appended after the merged tokens, in this order
  int min_frequency = 2;                                 // a pair seen fewer times is never merged
};

class BpeTrainer {
 public:
  explicit BpeTrainer(BpeTrainOptions options);
  ~BpeTrainer();
  // Counts the pieces of one document. Thread-safe: several threads may add documents at once.
  void add_document(std::string_view text);
  // Runs the merges and returns the vocabulary: ids 0..255 the single bytes in GPT-2's order, then one id per merge
  // in the order made, then the special tokens. Ties between equally frequent pairs go to the smaller pair of ids,
  // so training is deterministic. Stops early (smaller vocabulary, logged) when no pair reaches min_frequency.
  BpeVocab finish();
  // How many distinct pieces finish() merged over (0 before it runs): for the summary line.
  size_t distinct_pieces() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ember
