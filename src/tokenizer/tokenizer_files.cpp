// Reading byte-level BPE vocabularies (implementation): the three parsers, choosing among a folder's files, and
// building the tokenizer from a {name -> contents} map.
#include "tokenizer/tokenizer_files.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <set>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/json_input.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/byte_level.h"

namespace ember {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr size_t kMaxTokenizerFile = size_t(64) << 20;
constexpr const char* kEot = "<|endoftext|>";
const char* const kFileHint =
    "the file is malformed or not a byte-level BPE vocabulary; use GPT-2's files, a "
    "tokenizer.json of the ByteLevel kind, a tiktoken rank file, or ember tokenizer train";

std::string in_quotes(std::string_view s) {
  std::string q = "'";
  q.append(s.substr(0, 80));
  q += s.size() > 80 ? "...'" : "'";
  return q;
}

// The largest id a vocabulary file may give: past every published vocabulary (256k), and the table it sizes stays
// small (2^21 entries) whatever a file claims.
constexpr int64_t kMaxTokenId = (int64_t(1) << 21) - 1;

// Puts `bytes` at `id`, growing the table; an id given twice is an error naming `entry`.
void place_token(BpeVocab& v, int64_t id, std::string bytes, const std::string& entry) {
  if (id < 0 || id > kMaxTokenId)
    throw_error(entry + ": id " + std::to_string(id) + " is out of range [0, " + std::to_string(kMaxTokenId) + "]",
                kFileHint);
  if (size_t(id) >= v.tokens.size()) v.tokens.resize(size_t(id) + 1);
  if (!v.tokens[size_t(id)].empty()) throw_error(entry + ": id " + std::to_string(id) + " is used twice", kFileHint);
  v.tokens[size_t(id)] = std::move(bytes);
}

// Printable-form vocabulary -> ids; fills v.tokens and returns the printable form -> id map.
std::map<std::string, int32_t> read_printable_vocab(const json& vocab, BpeVocab& v, const std::string& name) {
  if (!vocab.is_object()) throw_error(name + ": the vocabulary is not a JSON object", kFileHint);
  std::map<std::string, int32_t> ids;
  for (const auto& [key, value] : vocab.items()) {
    const std::string entry = name + " entry " + in_quotes(key);
    if (!value.is_number_integer()) throw_error(entry + ": the id is not an integer", kFileHint);
    const auto bytes = key == kEot ? std::optional<std::string>(key) : unicode_to_bytes(key);
    if (!bytes || bytes->empty())
      throw_error(entry + ": not in GPT-2's printable byte form",
                  "tokens are written with GPT-2's byte-to-character "
                  "map ('Ġ' for a space); " +
                      std::string(kFileHint));
    place_token(v, value.get<int64_t>(), *bytes, entry);
    ids[key] = value.get<int32_t>();
    if (key == kEot) v.special.emplace_back(kEot, value.get<int32_t>());
  }
  return ids;
}

// One merge "A B" (or ["A", "B"]) -> the pair of ids; `entry` names it in errors.
std::pair<int32_t, int32_t> read_merge(const std::string& a, const std::string& b,
                                       const std::map<std::string, int32_t>& ids, const std::string& entry) {
  for (const std::string* side : {&a, &b})
    if (!ids.count(*side)) throw_error(entry + ": token " + in_quotes(*side) + " is not in the vocabulary", kFileHint);
  if (!ids.count(a + b))
    throw_error(entry + ": the merged token " + in_quotes(a + b) + " is not in the vocabulary", kFileHint);
  return {ids.at(a), ids.at(b)};
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(std::move(line));
    pos = end + 1;
  }
  return lines;
}

json parse_json(const std::string& contents, const std::string& name) {
  return parse_json_input(contents, name, kFileHint);
}

std::optional<std::string> base64_decode(std::string_view s) {
  static const std::string alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  size_t i = 0;
  for (; i < s.size() && s[i] != '='; ++i) {
    const size_t v = alphabet.find(s[i]);
    if (v == std::string::npos) return std::nullopt;
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(char((acc >> bits) & 0xff));
    }
  }
  for (; i < s.size(); ++i)
    if (s[i] != '=') return std::nullopt;
  if (s.size() % 4 != 0) return std::nullopt;
  return out;
}

// Requires the pre-tokenizer to be GPT-2's ByteLevel one, alone or as the only step of a Sequence.
void check_byte_level(const json& pre, const std::string& name) {
  const std::string hint =
      "only GPT-2's byte-level scheme is supported: a ByteLevel pre-tokenizer with use_regex "
      "true and add_prefix_space false, and no normalizer";
  const json* p = &pre;
  if (json_field<std::string>(pre, "type", "", name + " pre_tokenizer", hint) == "Sequence") {
    const auto steps = pre.find("pretokenizers");  // a reference into `pre`, which outlives *p
    if (steps == pre.end() || !steps->is_array() || steps->size() != 1)
      throw_error(name + ": pre_tokenizer is a Sequence of other steps than ByteLevel", hint);
    p = &(*steps)[0];
  }
  const std::string where = name + " pre_tokenizer";
  if (!p->is_object() || json_field<std::string>(*p, "type", "", where, hint) != "ByteLevel")
    throw_error(name + ": pre_tokenizer " +
                    (p->is_object() ? in_quotes(json_field<std::string>(*p, "type", "?", where, hint)) : "null") +
                    " is not ByteLevel",
                hint);
  if (!json_field<bool>(*p, "use_regex", true, where, hint) ||
      json_field<bool>(*p, "add_prefix_space", false, where, hint))
    throw_error(name + ": the ByteLevel pre_tokenizer needs use_regex true and add_prefix_space false", hint);
}

// Refuses the BPE model settings that would change the ids and that Ember does not implement (GPT-2's files have
// them null, empty or false): read silently, they would give other ids than Hugging Face's tokenizer.
void check_bpe_settings(const json& model, const std::string& name) {
  const std::string hint =
      "only GPT-2's byte-level BPE is supported: dropout null, continuing_subword_prefix and "
      "end_of_word_suffix empty or null, byte_fallback false";
  const auto set = [&](const char* key) {
    const auto it = model.find(key);
    if (it == model.end() || it->is_null()) return false;
    if (it->is_string()) return !it->get<std::string>().empty();
    if (it->is_boolean()) return it->get<bool>();
    if (it->is_number()) return it->get<double>() != 0.0;
    return true;
  };
  for (const char* key : {"dropout", "continuing_subword_prefix", "end_of_word_suffix", "byte_fallback"})
    if (set(key))
      throw_error(name + ": model." + key + " = " + model[key].dump().substr(0, 40) + " is not supported", hint);
}

}  // namespace

BpeVocab read_vocab_and_merges(const std::string& vocab_json, const std::string& merges_txt, const std::string& where) {
  BpeVocab v;
  const std::string vocab_name = where + "vocab.json", merges_name = where + "merges.txt";
  const auto ids = read_printable_vocab(parse_json(vocab_json, vocab_name), v, vocab_name);
  const auto lines = split_lines(merges_txt);
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    if (line.empty() || (i == 0 && line.rfind("#version", 0) == 0)) continue;
    const std::string entry = merges_name + " line " + std::to_string(i + 1);
    const size_t space = line.find(' ');
    if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
      throw_error(entry + ": " + in_quotes(line) + " is not two tokens separated by one space", kFileHint);
    v.merges.push_back(read_merge(line.substr(0, space), line.substr(space + 1), ids, entry));
  }
  return v;
}

BpeVocab read_tokenizer_json(const std::string& contents, const std::string& name) {
  const json doc = parse_json(contents, name);
  if (!doc.is_object() || !doc.contains("model") || !doc["model"].is_object())
    throw_error(name + ": no \"model\" object", kFileHint);
  const json& model = doc["model"];
  const std::string model_type = json_field<std::string>(model, "type", "BPE", name + " model", kFileHint);
  if (model_type != "BPE") throw_error(name + ": model type " + in_quotes(model_type) + " is not BPE", kFileHint);
  if (doc.contains("normalizer") && !doc["normalizer"].is_null())
    throw_error(name + ": has a normalizer", "only GPT-2's byte-level scheme, without a normalizer, is supported");
  check_byte_level(json_field<json>(doc, "pre_tokenizer", json(), name, kFileHint), name);
  check_bpe_settings(model, name);
  BpeVocab v;
  const auto ids =
      read_printable_vocab(json_field<json>(model, "vocab", json(), name, kFileHint), v, name + " model.vocab");
  v.special.clear();  // the special tokens are the added tokens marked special
  v.ignore_merges = json_field<bool>(model, "ignore_merges", false, name + " model", kFileHint);
  const json merges = json_field<json>(model, "merges", json::array(), name, kFileHint);
  if (!merges.is_array()) throw_error(name + ": model.merges is not a list", kFileHint);
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string entry = name + " model.merges[" + std::to_string(i) + "]";
    const json& m = merges[i];
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        throw_error(entry + ": " + in_quotes(s) + " is not two tokens separated by one space", kFileHint);
      v.merges.push_back(read_merge(s.substr(0, space), s.substr(space + 1), ids, entry));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      v.merges.push_back(read_merge(m[0].get<std::string>(), m[1].get<std::string>(), ids, entry));
    } else {
      throw_error(entry + ": not \"A B\" or [\"A\", \"B\"]", kFileHint);
    }
  }
  const json added_tokens = json_field<json>(doc, "added_tokens", json::array(), name, kFileHint);
  if (!added_tokens.is_array()) throw_error(name + ": added_tokens is not a list", kFileHint);
  for (size_t i = 0; i < added_tokens.size(); ++i) {
    const json& added = added_tokens[i];
    const std::string at = name + " added_tokens[" + std::to_string(i) + "]";
    if (!added.is_object()) throw_error(at + ": not an object", kFileHint);
    if (!json_field<bool>(added, "special", false, at, kFileHint)) continue;
    const std::string content = json_field<std::string>(added, "content", "", at, kFileHint);
    const std::string entry = name + " added token " + in_quotes(content);
    if (content.empty() || !added.contains("id") || !added["id"].is_number_integer() || added["id"].get<int64_t>() < 0)
      throw_error(entry + ": needs a content and a non-negative integer id", kFileHint);
    const int64_t id = added["id"].get<int64_t>();
    if (size_t(id) >= v.tokens.size() || v.tokens[size_t(id)].empty() || v.tokens[size_t(id)] == content) {
      if (size_t(id) < v.tokens.size()) v.tokens[size_t(id)].clear();
      place_token(v, id, content, entry);
    } else {
      throw_error(entry + ": id " + std::to_string(id) + " belongs to another token of model.vocab", kFileHint);
    }
    v.special.emplace_back(content, int32_t(id));
  }
  return v;
}

BpeVocab read_tiktoken(const std::string& contents, const std::string& name) {
  BpeVocab v;
  v.rule = BpeMergeRule::token_rank;
  std::set<std::string> seen;
  const auto lines = split_lines(contents);
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    if (line.empty()) continue;
    const std::string entry = name + " line " + std::to_string(i + 1);
    const size_t space = line.find(' ');
    const auto bytes = space == std::string::npos ? std::nullopt : base64_decode(line.substr(0, space));
    const std::string rank = space == std::string::npos ? "" : line.substr(space + 1);
    if (!bytes || bytes->empty() || rank.empty() || rank.size() > 9 ||
        rank.find_first_not_of("0123456789") != std::string::npos)
      throw_error(entry + ": " + in_quotes(line) + " is not '<base64 bytes> <rank>'", kFileHint);
    if (!seen.insert(*bytes).second)
      throw_error(entry + ": token " + in_quotes(line.substr(0, space)) + " is listed twice", kFileHint);
    place_token(v, std::stoll(rank), *bytes, entry);
  }
  for (int b = 0; b < 256; ++b)
    if (!seen.count(std::string(1, char(b))))
      throw_error(name + ": the single byte " + std::to_string(b) + " has no rank",
                  "a tiktoken file lists all 256 single bytes; " + std::string(kFileHint));
  v.special.emplace_back(kEot, int32_t(v.tokens.size()));
  v.tokens.push_back(kEot);
  return v;
}

std::unique_ptr<Tokenizer> bpe_tokenizer_from_files(const TokenizerFiles& files, const std::string& origin) {
  const std::string where = origin + ": ";
  BpeVocab vocab;
  std::vector<std::string> tiktoken;
  for (const auto& [name, contents] : files)
    if (fs::path(name).extension() == ".tiktoken") tiktoken.push_back(name);
  if (files.count("tokenizer.json")) {
    vocab = read_tokenizer_json(files.at("tokenizer.json"), where + "tokenizer.json");
  } else if (files.count("vocab.json") && files.count("merges.txt")) {
    vocab = read_vocab_and_merges(files.at("vocab.json"), files.at("merges.txt"), where);
  } else if (tiktoken.size() == 1) {
    vocab = read_tiktoken(files.at(tiktoken[0]), where + tiktoken[0]);
  } else {
    std::string found;
    for (const auto& [name, contents] : files) found += (found.empty() ? "" : ", ") + name;
    throw_error(origin + ": no BPE tokenizer among the files found (" + (found.empty() ? "none" : found) + ")",
                "a BPE tokenizer is tokenizer.json, or vocab.json + merges.txt, or exactly one *.tiktoken file");
  }
  return std::make_unique<BpeTokenizer>(std::move(vocab), files, origin);
}

TokenizerFiles read_bpe_files(const std::string& path) {
  const std::string hint =
      "a tokenizer is 'bytes', or a folder (or file) holding tokenizer.json, vocab.json + "
      "merges.txt, or one *.tiktoken file";
  std::error_code ec;
  const bool is_dir = fs::is_directory(path, ec);
  const fs::path dir = is_dir ? fs::path(path) : fs::path(path).parent_path();
  std::vector<std::string> names;
  if (is_dir) {
    std::vector<std::string> tiktoken;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == ".tiktoken") tiktoken.push_back(e.path().filename().string());
    if (fs::exists(dir / "tokenizer.json")) {
      names = {"tokenizer.json"};
    } else if (fs::exists(dir / "vocab.json") && fs::exists(dir / "merges.txt")) {
      names = {"vocab.json", "merges.txt"};
    } else if (tiktoken.size() == 1) {
      names = tiktoken;
    } else {
      std::string found;
      for (const auto& n : tiktoken) found += (found.empty() ? "" : ", ") + n;
      throw_error("tokenizer folder " + path + " holds no tokenizer.json, no vocab.json + merges.txt and " +
                      (tiktoken.empty() ? "no *.tiktoken file" : "several *.tiktoken files (" + found + ")"),
                  hint);
    }
  } else {
    const std::string name = fs::path(path).filename().string();
    if (name == "vocab.json" || name == "merges.txt")
      names = {"vocab.json", "merges.txt"};
    else if (name == "tokenizer.json" || fs::path(name).extension() == ".tiktoken")
      names = {name};
    else
      throw_error("tokenizer file " + path + " is not tokenizer.json, vocab.json, merges.txt or *.tiktoken", hint);
  }
  TokenizerFiles files;
  for (const auto& name : names)
    files[name] = read_small_file((dir / name).string(), kMaxTokenizerFile, "tokenizer file", hint);
  return files;
}

}  // namespace ember
