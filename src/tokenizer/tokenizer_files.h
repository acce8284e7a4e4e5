// Reading byte-level BPE vocabularies from their file formats: GPT-2's vocab.json + merges.txt, Hugging Face's
// tokenizer.json and tiktoken's rank files. Each error names the file and the entry, with a hint.
#pragma once

#include <memory>
#include <string>

#include "tokenizer/bpe_vocab.h"
#include "tokenizer/tokenizer.h"

namespace ember {

// vocab.json (printable form -> id) and merges.txt ("A B" per line after an optional "#version" line): rule
// pair_rank. "<|endoftext|>" in vocab.json is GPT-2's end-of-text token: a special token at its id. `where` prefixes
// the file names in errors.
BpeVocab read_vocab_and_merges(const std::string& vocab_json, const std::string& merges_txt, const std::string& where);

// tokenizer.json of model type BPE with a ByteLevel pre-tokenizer (use_regex, no prefix space) and no normalizer:
// rule pair_rank, ignore_merges as given; added tokens marked special become special tokens.
BpeVocab read_tokenizer_json(const std::string& contents, const std::string& name);

// A tiktoken rank file ("<base64 bytes> <rank>" per line): id = rank, rule token_rank. All 256 single bytes must be
// present. "<|endoftext|>" is added as a special token one past the highest rank (50256 for GPT-2's r50k).
BpeVocab read_tiktoken(const std::string& contents, const std::string& name);

// The BPE tokenizer `files` describe: tokenizer.json, else vocab.json + merges.txt, else the one *.tiktoken file.
// `origin` says where the files came from in errors.
std::unique_ptr<Tokenizer> bpe_tokenizer_from_files(const TokenizerFiles& files, const std::string& origin);

// The files of the BPE tokenizer at `path` (a folder or one of its files), by name, each at most 64 MiB.
TokenizerFiles read_bpe_files(const std::string& path);

}  // namespace ember
