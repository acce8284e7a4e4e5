// Import of a Hugging Face GPT-2 folder (implementation): config.json checked against what ember computes, every
// tensor of model.safetensors (or of the shards its index names) mapped by name onto the parameter table.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/json_input.h"
#include "hf/format.h"
#include "tokenizer/bpe_tokenizer.h"

namespace ember {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr size_t kMaxJsonBytes = size_t(16) << 20;

[[noreturn]] void unsupported(const std::string& dir, const std::string& what) {
  throw_error("import: " + dir + "/config.json: " + what,
              "ember imports GPT-2 (GPT2LMHeadModel) models with its defaults for these settings");
}

int positive_int(const json& c, const std::string& dir, const char* key, const char* alias = nullptr) {
  const json* v = c.contains(key) ? &c[key] : (alias && c.contains(alias) ? &c[alias] : nullptr);
  if (!v || !v->is_number_integer() || v->get<int64_t>() < 1 || v->get<int64_t>() > (int64_t(1) << 24))
    throw_error(
        "import: " + dir + "/config.json: " + key + " is " + (v ? v->dump() : "missing") + ", not a positive integer",
        "the folder must hold a GPT-2 config.json as save_pretrained writes it");
  return int(v->get<int64_t>());
}

// Settings of GPT2Config that change what the model computes, each required at the value ember computes with.
ModelConfig read_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  const json c = parse_json_input(read_small_file(path, kMaxJsonBytes, "import: " + path,
                                                  "give a folder written by save_pretrained (config.json, "
                                                  "model.safetensors)"),
                                  "import: " + path, "give the config.json save_pretrained wrote");
  if (!c.is_object()) throw_error("import: " + path + " is not a JSON object", "give a GPT-2 config.json");
  const std::string where = "import: " + path, hint = "give a GPT-2 config.json";
  bool gpt2 = json_field<std::string>(c, "model_type", "", where, hint) == "gpt2";
  if (c.contains("architectures") && c["architectures"].is_array())
    for (const auto& a : c["architectures"])
      if (a.is_string() && (a == "GPT2LMHeadModel" || a == "GPT2Model")) gpt2 = true;
  if (!gpt2)
    unsupported(dir, "model_type " + (c.contains("model_type") ? c["model_type"].dump() : std::string("(none)")) +
                         " is not gpt2");
  const std::string act = json_field<std::string>(c, "activation_function", "gelu_new", where, hint);
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    unsupported(dir, "activation_function " + act + " (ember's GELU is the tanh form: gelu_new)");
  if (c.contains("layer_norm_epsilon") &&
      (!c["layer_norm_epsilon"].is_number() || std::fabs(c["layer_norm_epsilon"].get<double>() - 1e-5) > 1e-12))
    unsupported(dir, "layer_norm_epsilon " + c["layer_norm_epsilon"].dump() + " (ember's LayerNorm uses 1e-05)");
  for (const char* key : {"scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "add_cross_attention"})
    if (c.contains(key) && c[key] != false) unsupported(dir, std::string(key) + " " + c[key].dump());
  if (c.contains("scale_attn_weights") && c["scale_attn_weights"] != true)
    unsupported(dir, "scale_attn_weights " + c["scale_attn_weights"].dump());
  if (c.contains("tie_word_embeddings") && c["tie_word_embeddings"] != true)
    unsupported(dir, "tie_word_embeddings " + c["tie_word_embeddings"].dump() + " (ember ties lm_head to wte)");
  ModelConfig m;
  m.n_layer = positive_int(c, dir, "n_layer");
  m.n_head = positive_int(c, dir, "n_head");
  m.n_embd = positive_int(c, dir, "n_embd");
  m.block_size = positive_int(c, dir, "n_positions", "n_ctx");
  m.vocab_size = positive_int(c, dir, "vocab_size");
  if (c.contains("n_inner") && !c["n_inner"].is_null() && c["n_inner"] != 4 * m.n_embd)
    unsupported(
        dir, "n_inner " + c["n_inner"].dump() + " (ember's MLP is 4 * n_embd = " + std::to_string(4 * m.n_embd) + ")");
  if (m.n_embd % m.n_head != 0) unsupported(dir, "n_embd is not a multiple of n_head");
  return m;
}

// The safetensors files of the folder by tensor name: model.safetensors, or the shards model.safetensors.index.json
// maps names to.
std::map<std::string, std::shared_ptr<SafetensorsFile>> open_weights(const std::string& dir) {
  std::map<std::string, std::shared_ptr<SafetensorsFile>> by_name;
  const std::string index = dir + "/model.safetensors.index.json";
  std::error_code ec;
  if (fs::exists(dir + "/model.safetensors", ec)) {
    auto f = std::make_shared<SafetensorsFile>(dir + "/model.safetensors");
    for (const auto& [name, e] : f->entries()) by_name[name] = f;
  } else if (fs::exists(index, ec)) {
    const std::string hint = "give the index save_pretrained wrote";
    json j =
        parse_json_input(read_small_file(index, kMaxJsonBytes, "import: " + index, hint), "import: " + index, hint);
    if (!j.contains("weight_map") || !j["weight_map"].is_object())
      throw_error("import: " + index + " has no weight_map", "give the index save_pretrained wrote");
    std::map<std::string, std::shared_ptr<SafetensorsFile>> files;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it->is_string() || it->get<std::string>().find('/') != std::string::npos)
        throw_error("import: " + index + ": " + it.key() + " maps to " + it->dump(), "give a shard file name");
      auto& f = files[it->get<std::string>()];
      if (!f) f = std::make_shared<SafetensorsFile>(dir + "/" + it->get<std::string>());
      by_name[it.key()] = f;
    }
  } else {
    throw_error("import: " + dir + " has no model.safetensors (nor model.safetensors.index.json)",
                "save the model with save_pretrained(DIR) (safe_serialization, the default since transformers 4.35)");
  }
  return by_name;
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

// A BPE vocabulary that is the byte tokenizer under another name (what export writes for it): 256 one-byte tokens,
// token i being byte i, no merges, no special tokens.
bool is_byte_tokenizer(const Tokenizer& t) {
  const auto* bpe = dynamic_cast<const BpeTokenizer*>(&t);
  if (!bpe || bpe->vocab().tokens.size() != 256 || !bpe->vocab().merges.empty() || !bpe->vocab().special.empty())
    return false;
  for (int b = 0; b < 256; ++b)
    if (bpe->vocab().tokens[size_t(b)] != std::string(1, char(b))) return false;
  return true;
}

}  // namespace

HostModel read_hf_folder(const std::string& dir, const std::string& tokenizer_spec) {
  HostModel out;
  out.model = read_config(dir);
  const ParamTable table(out.model);
  out.weights.assign(table.total_numel(), 0.0f);
  const auto files = open_weights(dir);
  std::set<std::string> seen;
  bool lm_head = false;
  for (const auto& [name, file] : files) {
    const std::string key = name.rfind("transformer.", 0) == 0 ? name : "transformer." + name;
    const bool buffer = key.size() > 10 && (key.ends_with(".attn.bias") || key.ends_with(".attn.masked_bias"));
    if (buffer) continue;  // the causal mask older transformers saved, not a parameter
    if (name == "lm_head.weight") {
      lm_head = true;
      continue;
    }
    const ParamInfo* p = table.find(key);
    if (!p)
      throw_error("import: " + file->path() + " holds " + name + ", which GPT2LMHeadModel of this config.json lacks",
                  "the folder is not a GPT-2 model of the sizes config.json gives");
    const auto entry = file->entries().find(name);
    if (entry == file->entries().end())
      throw_error("import: the index names " + file->path() + " for " + name + ", but that file has no such tensor",
                  "the index and its shards disagree; save the model again with save_pretrained");
    const auto& e = entry->second;
    if (e.shape != p->shape)
      throw_error("import: " + file->path() + ": " + name + " has shape " + shape_text(e.shape) + ", not " +
                      shape_text(p->shape),
                  "config.json and the weights disagree; save the model again");
    if (!seen.insert(p->name).second)
      throw_error("import: " + name + " is given twice (with and without the transformer. prefix)",
                  "save the model again with save_pretrained");
    const std::vector<float> v = file->read_floats(name);
    const auto bad = std::find_if(v.begin(), v.end(), [](float x) { return !std::isfinite(x); });
    if (bad != v.end())
      throw_error("import: " + file->path() + ": " + name + " holds " + std::to_string(*bad) + " at element " +
                      std::to_string(bad - v.begin()) + ": not a finite weight",
                  "the saved model is damaged (or overflowed when it was converted); use another copy of it");
    std::copy(v.begin(), v.end(), out.weights.begin() + ptrdiff_t(p->offset));
  }
  for (const ParamInfo& p : table.params())
    if (!seen.count(p.name))
      throw_error("import: " + dir + " lacks the tensor " + p.name, "save the whole model with save_pretrained");
  if (lm_head) {  // tied in ember: accepted only as a copy of wte
    const auto head_file = files.find("lm_head.weight");
    if (head_file == files.end() || !head_file->second->entries().count("lm_head.weight"))
      throw_error("import: the index names a file for lm_head.weight that has no such tensor",
                  "the index and its shards disagree; save the model again with save_pretrained");
    const std::vector<float> head = head_file->second->read_floats("lm_head.weight");
    const ParamInfo& wte = table.wte();
    if (head.size() != wte.numel || !std::equal(head.begin(), head.end(), out.weights.begin() + ptrdiff_t(wte.offset)))
      throw_error("import: " + dir + ": lm_head.weight differs from transformer.wte.weight",
                  "ember ties the output layer to the token embedding; this model has its own");
  }

  std::error_code ec;
  std::string spec = tokenizer_spec;
  if (spec.empty()) {
    if (!fs::exists(dir + "/tokenizer.json", ec) && !fs::exists(dir + "/vocab.json", ec))
      throw_error("import: " + dir + " has no tokenizer files (tokenizer.json, or vocab.json and merges.txt)",
                  "save the tokenizer into the folder too, or give --tokenizer bytes or --tokenizer PATH");
    spec = dir;
  }
  out.tokenizer = load_tokenizer(spec);
  if (is_byte_tokenizer(*out.tokenizer)) out.tokenizer = std::make_unique<ByteTokenizer>();
  if (out.tokenizer->vocab_size() > out.model.vocab_size)
    throw_error("import: the tokenizer (" + out.tokenizer->describe() + ") has more ids than vocab_size " +
                    std::to_string(out.model.vocab_size),
                "give the tokenizer the model was trained with");
  return out;
}

}  // namespace ember
