// prep.json, written by `ember prep` beside its shards: which tokenizer made them (its files are copied into the
// tokenizer/ folder beside it), the token width, and what each split holds. Training reads it at start-up to refuse
// shards made with a tokenizer other than the model's. Shards without one (llm.c's own) are still accepted.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "tokenizer/tokenizer_choice.h"

namespace ember {

inline constexpr const char* PREP_MANIFEST_NAME = "prep.json";
inline constexpr const char* PREP_TOKENIZER_DIR = "tokenizer";  // the tokenizer's files, beside the shards
inline constexpr int PREP_MANIFEST_VERSION = 1;

struct PrepSplit {
  uint64_t tokens = 0;
  uint64_t documents = 0;
  int shards = 0;
};

struct PrepManifest {
  TokenizerRecord tokenizer;      // the tokenizer that made the shards; its files are in PREP_TOKENIZER_DIR
  std::optional<int32_t> eot_id;  // the id between documents; nothing for bytes
  int token_bytes = 2;            // 2: uint16 shards (llm.c's GPT-2 format), 4: uint32 (llm.c's Llama 3 format)
  std::string input;              // as given to prep
  std::string format;             // "text", "jsonl", "enwik" or "mixed" (text and JSONL files)
  std::map<std::string, PrepSplit> splits;  // "train", "val", and "test" for enwik
};

// Writes `dir`/prep.json atomically.
void write_prep_manifest(const std::string& dir, const PrepManifest& manifest);

// Reads `dir`/prep.json; nothing when there is none. A malformed or newer-version file is an error naming it.
std::optional<PrepManifest> read_prep_manifest(const std::string& dir);

}  // namespace ember
