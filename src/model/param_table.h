// The parameter table: every GPT parameter's Hugging Face GPT2LMHeadModel name, shape and offset in one fp32 arena.
// Gradients and optimizer state mirror the arena; checkpoints, communication and sharding walk this table. wte is
// followed in the arena by the padding rows of the padded vocabulary (ModelConfig::padded_vocab_size), zero, outside
// its numel: the lm_head reads and writes (V_padded, C) there, everything that walks the table only its V rows.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "model/model_config.h"

namespace ember {

struct ParamInfo {
  std::string name;            // Hugging Face key, e.g. "transformer.h.0.attn.c_attn.weight"
  std::vector<int64_t> shape;  // Hugging Face shape (Conv1D orientation for linear layers: (in, out))
  size_t offset = 0;           // in floats, from the start of the arena
  size_t numel = 0;
  bool decay = false;  // AdamW weight decay applies (matrices only, as GPT-2/nanoGPT do)
  int layer = -1;      // transformer block index, -1 for embeddings and the final LayerNorm
};

// Which tensor of a block (or of the model) a table row is; fixed order, used to index ParamTable::block().
enum BlockParam {
  BLOCK_PARAM_LN1_W,
  BLOCK_PARAM_LN1_B,
  BLOCK_PARAM_QKV_W,
  BLOCK_PARAM_QKV_B,
  BLOCK_PARAM_PROJ_W,
  BLOCK_PARAM_PROJ_B,
  BLOCK_PARAM_LN2_W,
  BLOCK_PARAM_LN2_B,
  BLOCK_PARAM_FC_W,
  BLOCK_PARAM_FC_B,
  BLOCK_PARAM_FCPROJ_W,
  BLOCK_PARAM_FCPROJ_B,
  BLOCK_PARAM_COUNT
};

class ParamTable {
 public:
  explicit ParamTable(const ModelConfig& config);

  const std::vector<ParamInfo>& params() const { return params_; }
  size_t total_numel() const { return total_; }
  const ParamInfo& wte() const { return params_[0]; }
  // The learned positions, or null where the model has none (ModelConfig::has_wpe).
  const ParamInfo* wpe() const { return first_block_ == 2 ? &params_[1] : nullptr; }
  const ParamInfo& block(int layer, BlockParam p) const {
    return params_[first_block_ + size_t(layer) * BLOCK_PARAM_COUNT + p];
  }
  const ParamInfo& ln_f_weight() const { return params_[params_.size() - 2]; }
  const ParamInfo& ln_f_bias() const { return params_[params_.size() - 1]; }
  // The row named `name`, or null.
  const ParamInfo* find(const std::string& name) const;

  // The arena as it is laid out without wte's padding rows (as when the vocabulary is a multiple of 128, and as before
  // the padding existed): the layout of flat arrays that outlive a run (an async worker's checkpointed moments and
  // residual), so that their files do not depend on the padding. Equal to total_numel() when there is none.
  size_t unpadded_numel() const { return total_ - vocab_padding_; }
  // arena (total_numel()) into flat (unpadded_numel()), and back; the padding rows come back as zero.
  void to_unpadded(const float* arena, float* flat) const;
  void from_unpadded(const float* flat, float* arena) const;

 private:
  std::vector<ParamInfo> params_;
  size_t total_ = 0;
  size_t vocab_padding_ = 0;  // arena floats wte's padding rows add to its aligned size
  size_t first_block_ = 2;    // the row of block 0's first tensor: after wte and wpe, or after wte alone
};

// (in, out) of a layer's four dense weights, as its products read them: c_attn, attention's c_proj, c_fc and the
// MLP's c_proj.
inline std::array<std::array<size_t, 2>, 4> dense_weight_shapes(const ModelConfig& config) {
  const size_t C = size_t(config.n_embd);
  return {{{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}}};
}

}  // namespace ember
