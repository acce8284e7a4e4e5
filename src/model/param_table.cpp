// The parameter table (implementation): builds rows in Hugging Face state_dict order, 16-float aligned offsets.
#include "model/param_table.h"

#include <algorithm>

namespace ember {

ParamTable::ParamTable(const ModelConfig& cfg) {
  const int64_t C = cfg.n_embd, V = cfg.vocab_size, T = cfg.block_size;
  // `stored`: the arena floats the tensor takes before alignment (its numel, but for wte's padding rows).
  auto add = [&](std::string name, std::vector<int64_t> shape, bool decay, int layer, size_t stored = 0) {
    ParamInfo p;
    p.name = std::move(name);
    p.shape = std::move(shape);
    p.numel = 1;
    for (int64_t d : p.shape) p.numel *= size_t(d);
    p.offset = total_;
    p.decay = decay;
    p.layer = layer;
    total_ += (std::max(stored, p.numel) + 15) / 16 * 16;  // 64-byte alignment for every tensor
    params_.push_back(std::move(p));
  };
  add("transformer.wte.weight", {V, C}, true, -1, size_t(cfg.padded_vocab_size()) * size_t(C));
  vocab_padding_ = total_ - (params_[0].numel + 15) / 16 * 16;
  if (cfg.has_wpe())
    add("transformer.wpe.weight", {T, C}, true, -1);
  else
    first_block_ = 1;
  for (int l = 0; l < cfg.n_layer; ++l) {
    const std::string h = "transformer.h." + std::to_string(l) + ".";
    add(h + "ln_1.weight", {C}, false, l);
    add(h + "ln_1.bias", {C}, false, l);
    add(h + "attn.c_attn.weight", {C, 3 * C}, true, l);
    add(h + "attn.c_attn.bias", {3 * C}, false, l);
    add(h + "attn.c_proj.weight", {C, C}, true, l);
    add(h + "attn.c_proj.bias", {C}, false, l);
    add(h + "ln_2.weight", {C}, false, l);
    add(h + "ln_2.bias", {C}, false, l);
    add(h + "mlp.c_fc.weight", {C, 4 * C}, true, l);
    add(h + "mlp.c_fc.bias", {4 * C}, false, l);
    add(h + "mlp.c_proj.weight", {4 * C, C}, true, l);
    add(h + "mlp.c_proj.bias", {C}, false, l);
  }
  add("transformer.ln_f.weight", {C}, false, -1);
  add("transformer.ln_f.bias", {C}, false, -1);
}

// wte is at the front; past its aligned unpadded size the two layouts differ by the padding, shifted as a whole.
void ParamTable::to_unpadded(const float* arena, float* flat) const {
  const ParamInfo& w = wte();
  const size_t end = w.offset + (w.numel + 15) / 16 * 16;
  std::copy(arena, arena + w.offset + w.numel, flat);
  std::fill(flat + w.offset + w.numel, flat + end, 0.0f);  // wte's alignment gap, whatever the padding rows hold
  std::copy(arena + end + vocab_padding_, arena + total_, flat + end);
}

void ParamTable::from_unpadded(const float* flat, float* arena) const {
  const ParamInfo& w = wte();
  const size_t end = w.offset + (w.numel + 15) / 16 * 16;
  std::copy(flat, flat + w.offset + w.numel, arena);
  std::fill(arena + w.offset + w.numel, arena + end + vocab_padding_, 0.0f);
  std::copy(flat + end, flat + unpadded_numel(), arena + end + vocab_padding_);
}

const ParamInfo* ParamTable::find(const std::string& name) const {
  for (const auto& p : params_)
    if (p.name == name) return &p;
  return nullptr;
}

}  // namespace ember
