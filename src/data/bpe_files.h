// Writing a BPE vocabulary as Hugging Face files: vocab.json + merges.txt (GPT-2's format, tokens in GPT-2's
// printable byte form) and a tokenizer.json of the ByteLevel kind that tokenizers and transformers load as is.
#pragma once

#include "data/bpe_vocab.h"
#include "data/tokenizer.h"

namespace ember {

// vocab.json, merges.txt and tokenizer.json for `vocab` (rule pair_rank).
TokenizerFiles bpe_vocab_to_files(const BpeVocab& vocab);

}  // namespace ember
