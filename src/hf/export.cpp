// Export to a Hugging Face GPT-2 folder (implementation). ember's parameter table already uses GPT2LMHeadModel's
// names, shapes and Conv1D orientation, so the weights are written as they are (the tied lm_head is left out, as
// save_pretrained leaves it out); config.json and the tokenizer files say the rest.
#include <nlohmann/json.hpp>

#include <filesystem>

#include "core/atomic_file.h"
#include "core/enum_names.h"
#include "core/error.h"
#include "core/output.h"
#include "hf/format.h"
#include "model/attention_schedule.h"
#include "tokenizer/bpe_files.h"
#include "tokenizer/bpe_tokenizer.h"

namespace ember {

namespace fs = std::filesystem;
using ordered_json = nlohmann::ordered_json;

const char* hf_dtype_name(HfDtype d) {
  switch (d) {
    case HfDtype::fp32:
      return "fp32";
    case HfDtype::bf16:
      return "bf16";
    case HfDtype::fp16:
      return "fp16";
  }
  return "?";
}

std::optional<HfDtype> parse_hf_dtype(const std::string& name) { return find_by_name(kHfDtypes, hf_dtype_name, name); }

namespace {

SafetensorsDtype stored_as(HfDtype d) {
  return d == HfDtype::fp32   ? SafetensorsDtype::f32
         : d == HfDtype::bf16 ? SafetensorsDtype::bf16
                              : SafetensorsDtype::f16;
}
const char* torch_dtype(HfDtype d) {
  return d == HfDtype::fp32 ? "float32" : d == HfDtype::bf16 ? "bfloat16" : "float16";
}

// GPT2LMHeadModel computes exactly ember's model: learned absolute positions, pre-LayerNorm blocks with eps 1e-5,
// tanh GELU (gelu_new), a 4C MLP, full causal attention scaled by 1/sqrt(head size), the lm_head tied to wte. A model
// with rotary positions, attention windows or ALiBi is not one (the class has no option for them), nor is a size
// transformers itself would refuse.
void check_expressible(const ModelConfig& m, const Tokenizer& t) {
  const char* option = m.position != PositionEncoding::learned ? "model.position = rope"
                       : !m.attention_windows.empty()          ? "model.attention_windows"
                       : !m.alibi_slopes.empty()               ? "model.alibi_slopes"
                                                               : nullptr;
  if (option)
    throw_error("export: this model uses " + std::string(option) + " (" + describe_attention(m) +
                    "), which GPT2LMHeadModel cannot express",
                "score the checkpoint with ember eval; only models with GPT-2's learned positions "
                "and full attention export to Hugging Face");
  if (m.n_layer < 1 || m.n_head < 1 || m.n_embd < 1 || m.n_embd % m.n_head != 0 || m.block_size < 1)
    throw_error("export: a model of n_layer " + std::to_string(m.n_layer) + ", n_head " + std::to_string(m.n_head) +
                    ", n_embd " + std::to_string(m.n_embd) + " cannot be written as GPT2LMHeadModel",
                "GPT-2 needs at least one layer and n_embd a multiple of n_head");
  if (t.vocab_size() > m.vocab_size)
    throw_error("export: the tokenizer has " + std::to_string(t.vocab_size()) + " ids but the model " +
                    std::to_string(m.vocab_size) + " rows",
                "export a checkpoint whose tokenizer fits its model");
}

std::string config_json(const ModelConfig& m, const Tokenizer& t, HfDtype dtype) {
  const std::optional<int32_t> eot = t.eot_id();
  const ordered_json special = eot ? ordered_json(*eot) : ordered_json(nullptr);
  ordered_json c{{"activation_function", "gelu_new"},
                 {"architectures", {"GPT2LMHeadModel"}},
                 {"attn_pdrop", 0.0},
                 {"bos_token_id", special},
                 {"embd_pdrop", 0.0},
                 {"eos_token_id", special},
                 {"initializer_range", 0.02},
                 {"layer_norm_epsilon", 1e-5},
                 {"model_type", "gpt2"},
                 {"n_ctx", m.block_size},
                 {"n_embd", m.n_embd},
                 {"n_head", m.n_head},
                 {"n_inner", nullptr},
                 {"n_layer", m.n_layer},
                 {"n_positions", m.block_size},
                 {"reorder_and_upcast_attn", false},
                 {"resid_pdrop", 0.0},
                 {"scale_attn_by_inverse_layer_idx", false},
                 {"scale_attn_weights", true},
                 {"tie_word_embeddings", true},
                 {"torch_dtype", torch_dtype(dtype)},
                 {"use_cache", true},
                 {"vocab_size", m.vocab_size}};
  return c.dump(2) + "\n";
}

std::string generation_config_json(const Tokenizer& t) {
  const std::optional<int32_t> eot = t.eot_id();
  ordered_json g{{"_from_model_config", true}};
  if (eot) {
    g["bos_token_id"] = *eot;
    g["eos_token_id"] = *eot;
  }
  return g.dump(2) + "\n";
}

// The tokenizer as GPT-2 tokenizer files. The byte tokenizer is a byte-level BPE with no merges whose 256 tokens are
// the bytes themselves (id = byte value); it has no special tokens, so bos, eos and unk are null.
TokenizerFiles tokenizer_files(const Tokenizer& t, int block_size) {
  BpeVocab bytes;
  const BpeVocab* vocab = &bytes;
  if (t.kind() == TokenizerKind::bytes) {
    for (int b = 0; b < 256; ++b) bytes.tokens.push_back(std::string(1, char(b)));
  } else {
    const auto* bpe = dynamic_cast<const BpeTokenizer*>(&t);
    EMBER_ASSERT(bpe != nullptr, "a BPE tokenizer that is not a BpeTokenizer");
    if (bpe->vocab().rule != BpeMergeRule::pair_rank)
      throw_error("export: the checkpoint's tokenizer (" + t.describe() +
                      ") was read from a tiktoken rank file, which has no merge list to write as merges.txt",
                  "train from shards made with the same vocabulary as vocab.json + merges.txt or tokenizer.json");
    vocab = &bpe->vocab();
  }
  TokenizerFiles files = bpe_vocab_to_files(*vocab);
  ordered_json cfg = ordered_json::parse(files.at("tokenizer_config.json"));
  cfg["model_max_length"] = block_size;
  if (t.kind() == TokenizerKind::bytes)
    for (const char* key : {"bos_token", "eos_token", "unk_token"}) cfg[key] = nullptr;
  files["tokenizer_config.json"] = cfg.dump(2) + "\n";
  return files;
}

void write_text(const fs::path& path, const std::string& text) {
  write_file_atomically(path.string(), text, "export file " + path.string(), "check that the folder is writable");
}

// What an export writes: config.json and model.safetensors, among files only (a run folder or a checkpoint folder has
// subfolders or neither file).
bool is_export_folder(const std::string& dir) {
  std::error_code ec;
  return fs::is_regular_file(fs::path(dir) / "config.json", ec) &&
         fs::is_regular_file(fs::path(dir) / "model.safetensors", ec) &&
         folder_holds_only(dir, [](const std::string&, bool is_file, bool) { return is_file; });
}

}  // namespace

void write_hf_folder(const std::string& dir, const HostModel& m, HfDtype dtype, bool overwrite) {
  check_expressible(m.model, *m.tokenizer);
  const OutputRule rule{.path = dir,
                        .option = "--output",
                        .command = "ember export",
                        .kind = OutputKind::folder,
                        .overwrite = overwrite,
                        .is_ours = is_export_folder,
                        .looks_like = "an export folder (config.json and model.safetensors, no subfolders)"};
  StagedOutput staged(rule);
  const fs::path tmp = staged.staging();

  const ParamTable table(m.model);
  std::vector<SafetensorsTensor> tensors;
  for (const ParamInfo& p : table.params())
    tensors.push_back(SafetensorsTensor{p.name, stored_as(dtype), p.shape,
                                        encode_floats(m.weights.data() + p.offset, p.numel, stored_as(dtype))});
  write_safetensors((tmp / "model.safetensors").string(), tensors, {{"format", "pt"}});
  write_text(tmp / "config.json", config_json(m.model, *m.tokenizer, dtype));
  write_text(tmp / "generation_config.json", generation_config_json(*m.tokenizer));
  for (const auto& [name, contents] : tokenizer_files(*m.tokenizer, m.model.block_size))
    write_text(tmp / name, contents);

  staged.commit();
}

}  // namespace ember
