// The corpus as a stream of bounded pieces: each input file read once, decompressed on the fly, cut at the
// tokenizer's chunk boundaries (so the tokens equal those of whole documents) and assigned to its split.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "data/corpus_input.h"
#include "tokenizer/tokenizer.h"

namespace ember {

enum class Split { train, val, test };
inline constexpr Split kSplits[] = {Split::train, Split::val, Split::test};
const char* split_name(Split s);  // "train", "val", "test"

struct CorpusPiece {
  Split split = Split::train;
  bool jsonl = false;      // text holds whole JSONL lines, parsed by the encoder; else document text
  bool doc_start = false;  // (text) the piece begins a document
  std::string text;
  std::shared_ptr<const std::string> file;  // for messages
  uint64_t first_line = 0;                  // (jsonl) line number of the first line in text
  uint64_t disk_done = 0;                   // input bytes on disk consumed when the piece was cut (progress)
};

struct CorpusReaderOptions {
  double val_fraction = 0.05;
  std::string jsonl_field = "text";
  size_t piece_bytes = size_t(1) << 20;
};

// Reads the plan's files in order and hands each piece to `emit` (which may block: the caller bounds memory).
//
// The val split of text and JSONL input is the last val_fraction of the input's bytes on disk (binary files left
// out): with T those bytes, the cut lies at C = T - ceil(val_fraction * T) (at least one byte when val_fraction > 0).
// A document that starts at or after C is val; the one that straddles C is cut at the first chunk boundary at or
// after C (for JSONL, at the same fraction of its decoded text), its head train and its tail val. In a compressed
// file C is mapped to decompressed bytes in proportion within the read that consumed it (exact for plain files).
//
// enwik8/enwik9 are split by decompressed bytes: the first 90% train, the next 5% val, the rest test, each one
// document tokenized on its own; val_fraction does not apply.
void read_corpus(const CorpusPlan& plan, const Tokenizer& tok, const CorpusReaderOptions& options,
                 const std::function<void(CorpusPiece&&)>& emit);

// The enwik split sizes of a file of `bytes` bytes: {train, val, test} = {floor(0.9 n), floor(0.05 n), the rest}.
void enwik_split_bytes(uint64_t bytes, uint64_t out[3]);

}  // namespace ember
