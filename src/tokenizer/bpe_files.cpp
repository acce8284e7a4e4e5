// Writing a BPE vocabulary as Hugging Face files (implementation): the JSON shapes tokenizers 0.19 saves for a
// ByteLevel BPE, and the tokenizer_config.json transformers' AutoTokenizer needs beside them.
#include "tokenizer/bpe_files.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/byte_level.h"

namespace ember {

namespace {

using ordered_json = nlohmann::ordered_json;

// GPT-2's context length: what transformers reports as model_max_length; it only affects its length warnings.
constexpr int MODEL_MAX_LENGTH = 1024;

bool is_special_id(const BpeVocab& vocab, size_t id) {
  for (const auto& [text, sid] : vocab.special)
    if (size_t(sid) == id) return true;
  return false;
}

// printable form -> id, ids ascending; special tokens are written as they are (they are not byte sequences to map).
ordered_json vocab_object(const BpeVocab& vocab) {
  ordered_json v = ordered_json::object();
  for (size_t id = 0; id < vocab.tokens.size(); ++id) {
    if (vocab.tokens[id].empty()) continue;
    const std::string key = is_special_id(vocab, id) ? vocab.tokens[id] : bytes_to_unicode(vocab.tokens[id]);
    if (v.contains(key))
      throw_error("tokenizer files: token '" + key + "' is spelled by two ids", "this is a bug in ember; report it");
    v[key] = id;
  }
  return v;
}

std::vector<std::string> merge_lines(const BpeVocab& vocab) {
  std::vector<std::string> lines;
  lines.reserve(vocab.merges.size());
  for (const auto& [a, b] : vocab.merges)
    lines.push_back(bytes_to_unicode(vocab.tokens.at(size_t(a))) + " " + bytes_to_unicode(vocab.tokens.at(size_t(b))));
  return lines;
}

ordered_json added_token(const std::string& content, int32_t id) {
  return ordered_json{{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
                      {"rstrip", false}, {"normalized", false}, {"special", true}};
}

ordered_json byte_level(bool add_prefix_space, bool trim_offsets) {
  return ordered_json{{"type", "ByteLevel"},
                      {"add_prefix_space", add_prefix_space},
                      {"trim_offsets", trim_offsets},
                      {"use_regex", true}};
}

std::string tokenizer_json(const BpeVocab& vocab, const std::vector<std::string>& merges) {
  ordered_json added = ordered_json::array();
  for (const auto& [text, id] : vocab.special) added.push_back(added_token(text, id));
  ordered_json model{{"type", "BPE"},
                     {"dropout", nullptr},
                     {"unk_token", nullptr},
                     {"continuing_subword_prefix", nullptr},
                     {"end_of_word_suffix", nullptr},
                     {"fuse_unk", false},
                     {"byte_fallback", false},
                     {"ignore_merges", vocab.ignore_merges},
                     {"vocab", vocab_object(vocab)},
                     {"merges", merges}};
  ordered_json doc{{"version", "1.0"},
                   {"truncation", nullptr},
                   {"padding", nullptr},
                   {"added_tokens", added},
                   {"normalizer", nullptr},
                   // No prefix space: "hello" and " hello" stay different, as in GPT-2 and tiktoken.
                   {"pre_tokenizer", byte_level(false, true)},
                   {"post_processor", byte_level(true, false)},
                   {"decoder", byte_level(true, true)},
                   {"model", model}};
  return doc.dump(2) + "\n";
}

// transformers reads the tokenizer class and the special tokens from here; tokenizer.json holds the rest. Decoding
// must give back the exact text, so transformers' clean-up of spaces before punctuation is off.
std::string tokenizer_config_json(const BpeVocab& vocab) {
  ordered_json added = ordered_json::object();
  for (const auto& [text, id] : vocab.special) {
    ordered_json t = added_token(text, id);
    t.erase("id");
    added[std::to_string(id)] = t;
  }
  ordered_json cfg{{"add_bos_token", false},
                   {"add_prefix_space", false},
                   {"added_tokens_decoder", added},
                   {"clean_up_tokenization_spaces", false},
                   {"errors", "replace"},
                   {"model_max_length", MODEL_MAX_LENGTH},
                   {"tokenizer_class", "GPT2Tokenizer"}};
  if (!vocab.special.empty()) {
    const std::string& first = vocab.special.front().first;
    cfg["bos_token"] = first;
    cfg["eos_token"] = first;
    cfg["unk_token"] = first;
  }
  return cfg.dump(2) + "\n";
}

}  // namespace

TokenizerFiles bpe_vocab_to_files(const BpeVocab& vocab) {
  if (vocab.rule != BpeMergeRule::pair_rank)
    throw_error("tokenizer files: only a vocabulary with ranked merges can be written as Hugging Face files",
                "this is a bug in ember; report it");
  const std::vector<std::string> merges = merge_lines(vocab);
  TokenizerFiles files;
  files["vocab.json"] = vocab_object(vocab).dump() + "\n";
  std::string merges_txt = "#version: 0.2\n";
  for (const std::string& m : merges) merges_txt += m + "\n";
  files["merges.txt"] = std::move(merges_txt);
  files["tokenizer.json"] = tokenizer_json(vocab, merges);
  files["tokenizer_config.json"] = tokenizer_config_json(vocab);
  return files;
}

}  // namespace ember
