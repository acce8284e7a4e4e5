// Corpus preparation: text, JSONL or enwik8/enwik9 input (one file or a folder; plain, gzip, zstd or zip) tokenized
// as a stream into train/val(/test) shards, with prep.json and the tokenizer's files beside them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "data/prep_manifest.h"

namespace ember {

struct PrepOptions {
  std::string input;   // a file or a directory (walked recursively, sorted, hidden entries and binary files skipped)
  std::string output;  // output directory, created if missing
  std::string tokenizer = "bytes";
  std::string format = "auto";         // auto, text, jsonl or enwik (corpus_input.h)
  std::string jsonl_field = "text";    // the JSONL field holding a document
  bool skip_bad_lines = false;         // skip (and count) JSONL lines that hold no document instead of failing
  std::optional<double> val_fraction;  // the tail of the input's bytes kept for validation; nothing: 0.05
  size_t shard_tokens = 100000000;     // tokens per shard at most
  int threads = 0;                     // encoder threads; 0: the hardware's
  bool overwrite = false;              // replace an earlier prep's `output` (moved aside; else refused)
};

struct PrepResult {
  size_t files = 0, binary_files = 0;
  uint64_t bad_lines = 0;
  PrepSplit train, val, test;  // test: enwik only
  int token_bytes = 2;
};

// Validates everything that can be checked up front (input readable, options in range, the output outside the input
// and writable under the output rule of core/output.h: an earlier prep's folder only with options.overwrite, locked
// while prep runs), then streams the input into shards in a new folder beside the output, and swaps it in whole once
// everything, prep.json last, is written. Any failure on the way (a corrupt file, a bad JSONL line, a full disk) leaves
// the earlier output whole. Errors throw ember::Error naming the input with a hint.
PrepResult prepare_corpus(const PrepOptions& options);

}  // namespace ember
