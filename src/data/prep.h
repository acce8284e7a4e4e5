// Corpus preparation: text files (one file or every regular file under a directory) tokenized into train/val shards.
#pragma once

#include <cstdint>
#include <string>

namespace ember {

struct PrepOptions {
  std::string input;   // a file or a directory (walked recursively, sorted, binary files skipped)
  std::string output;  // output directory, created if missing
  std::string tokenizer = "bytes";
  double val_fraction = 0.05;       // fraction of tokens (the tail of each document stream) kept for validation
  size_t shard_tokens = 100000000;  // tokens per shard at most
  bool overwrite = false;           // replace the shards an earlier prep left in `output` (else refused)
};

struct PrepResult {
  size_t files = 0, train_tokens = 0, val_tokens = 0, train_shards = 0, val_shards = 0;
};

// Validates everything (input readable, options in range, output not a file, no earlier shards in it unless
// options.overwrite) before writing anything, so a bad input leaves earlier shards untouched. Errors throw ember::Error
// naming the input with a hint.
PrepResult prepare_corpus(const PrepOptions& options);

}  // namespace ember
