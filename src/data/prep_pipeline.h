// The parallel part of `ember prep`: a reader thread cutting the corpus into pieces, encoder threads turning pieces
// into tokens, and the caller consuming the results in input order, with memory bounded by a fixed window of pieces.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/corpus_reader.h"

namespace ember {

struct EncodedPiece {
  Split split = Split::train;
  std::vector<char> tokens;  // n_tokens tokens of token_bytes each, little-endian
  size_t n_tokens = 0;
  uint64_t documents = 0;                 // documents that start in this piece
  uint64_t bad_lines = 0;                 // JSONL lines skipped (--skip-bad-lines)
  std::vector<std::string> bad_messages;  // the first few of them
  uint64_t disk_done = 0;                 // input bytes on disk consumed when the piece was cut
};

struct PipelineOptions {
  CorpusReaderOptions reader;
  int threads = 1;      // encoder threads
  int token_bytes = 2;  // 2 or 4
  bool skip_bad_lines = false;
};

// Reads `plan`, encodes on options.threads threads and calls `consume` on the calling thread for every piece in input
// order. Each document is preceded by tok.eot_id() when there is one. Memory: at most about threads + 4 pieces
// (each piece_bytes of text plus its tokens) are alive at once, whatever the input size. The first error in input
// order (a bad file, a bad JSONL line, or one thrown by `consume`) stops all threads and is rethrown.
void run_prep_pipeline(const CorpusPlan& plan, const Tokenizer& tok, const PipelineOptions& options,
                       const std::function<void(EncodedPiece&&)>& consume);

}  // namespace ember
