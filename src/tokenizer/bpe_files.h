// Writing a BPE vocabulary as Hugging Face files: vocab.json + merges.txt (GPT-2's format, tokens in GPT-2's
// printable byte form) and a tokenizer.json of the ByteLevel kind that tokenizers and transformers load as is.
#pragma once

#include "tokenizer/bpe_vocab.h"
#include "tokenizer/tokenizer.h"

namespace ember {

// vocab.json, merges.txt and tokenizer.json for `vocab` (rule pair_rank), and the tokenizer_config.json that lets
// transformers' AutoTokenizer load the folder (GPT2Tokenizer, the first special token as bos/eos/unk).
TokenizerFiles bpe_vocab_to_files(const BpeVocab& vocab);

}  // namespace ember
