// What a Hugging Face GPT-2 folder holds and how ember's model maps onto it, shared by `ember export` (export.cpp)
// and `ember import` (import.cpp): the folder as a whole, written or read.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hf/safetensors.h"
#include "model/model_config.h"
#include "model/param_table.h"
#include "tokenizer/tokenizer.h"

namespace ember {

// The dtype of an export's weights (--dtype).
enum class HfDtype { fp32, bf16, fp16 };
inline constexpr HfDtype kHfDtypes[] = {HfDtype::fp32, HfDtype::bf16, HfDtype::fp16};
const char* hf_dtype_name(HfDtype d);  // "fp32", "bf16", "fp16"
std::optional<HfDtype> parse_hf_dtype(const std::string& name);

// A model in host memory: its sizes, its weights in the arena layout of ParamTable(model), and its tokenizer.
struct HostModel {
  ModelConfig model;
  std::vector<float> weights;  // (ParamTable(model).total_numel())
  std::unique_ptr<Tokenizer> tokenizer;
};

// Writes `m` as a folder that transformers' AutoModelForCausalLM and AutoTokenizer load as GPT2LMHeadModel and a
// GPT-2 tokenizer: model.safetensors, config.json, generation_config.json and the tokenizer's files. Written by the
// output rule of core/output.h: an existing `dir` is replaced only if `overwrite` and only if it is an export folder,
// moved aside, not deleted; the new folder is built beside it and swapped in whole.
void write_hf_folder(const std::string& dir, const HostModel& m, HfDtype dtype, bool overwrite);

// Reads a GPT-2 folder as save_pretrained writes it (config.json, model.safetensors; tokenizer files if present),
// checking the architecture and every tensor. `tokenizer_spec` ("" for the folder's own files) overrides the folder's
// tokenizer ("bytes" or a path, as load_tokenizer takes).
HostModel read_hf_folder(const std::string& dir, const std::string& tokenizer_spec);

}  // namespace ember
