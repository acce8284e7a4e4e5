// The GPT-2 model (implementation): forward and backward as sequences of Backend ops, layer by layer.
// Residual stream gradients accumulate in one buffer because every backward op adds into its outputs.
#include "model/gpt.h"

#include <cmath>
#include <cstdint>

#include "core/enum_names.h"
#include "core/error.h"
#include "core/philox.h"
#include "model/attention_schedule.h"

namespace ember {

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::none:
      return "none";
    case Recompute::attention:
      return "attention";
    case Recompute::full:
      return "full";
  }
  return "?";
}

std::optional<Recompute> parse_recompute(const std::string& name) {
  return find_by_name(kRecomputes, recompute_name, name);
}

namespace {

// Saturating size arithmetic: a footprint too large for size_t is SIZE_MAX, more than any machine has.
size_t mul_sat(size_t a, size_t b) {
  size_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? SIZE_MAX : r;
}
size_t mul_sat(size_t a, size_t b, size_t c) { return mul_sat(mul_sat(a, b), c); }
size_t add_sat(size_t a, size_t b) {
  size_t r = 0;
  return __builtin_add_overflow(a, b, &r) ? SIZE_MAX : r;
}

}  // namespace

size_t GPT::quantized_weight_copy_bytes(const ModelConfig& config, MatmulPrecision precision) {
  if (!dense_weights_quantized(precision)) return 0;
  size_t bytes = 0;
  for (const auto& [in, out] : dense_weight_shapes(config)) bytes += quantized_copy_bytes(precision, in, out);
  return bytes * size_t(config.n_layer);
}

bool GPT::host_masters_possible(const ModelConfig& config, MatmulPrecision precision) {
  return gemm_inputs_in_bf16(precision) && attention_in_bf16(MatmulPrecision::bf16, config.n_embd / config.n_head);
}

GPT::Footprint GPT::footprint(const ModelConfig& config, int max_B, int max_T, bool with_grads, Recompute recompute,
                              bool bf16_storage, WeightHome home) {
  // The constructor's allocations below, in the same order, counted instead of made.
  const size_t BT = mul_sat(size_t(max_B), size_t(max_T)), C = config.n_embd, V = config.padded_vocab_size(),
               NH = config.n_head;
  const size_t arena = (ParamTable(config).total_numel() + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
  const bool bf16_attention_out = bf16_storage && attention_in_bf16(MatmulPrecision::bf16, int(C / NH));
  const size_t f32 = sizeof(float), gemm_in = bf16_storage ? sizeof(BFloat16) : sizeof(float),
               att = bf16_attention_out ? sizeof(BFloat16) : sizeof(float);
  Footprint fp;
  const size_t packed = home == WeightHome::device ? 0 : PackedFp32Layout(ParamTable(config)).numel();
  const size_t fp32_weights = home == WeightHome::device ? arena : packed;
  const size_t bf16_weights = !bf16_storage ? 0 : home == WeightHome::host_dense ? packed : arena;
  fp.weight_bytes = add_sat(add_sat(mul_sat(fp32_weights, f32), mul_sat(bf16_weights, sizeof(BFloat16))),
                            mul_sat(arena, with_grads ? f32 : 0));
  size_t a = mul_sat(BT, 2 * sizeof(int32_t) + C * f32 + 2 * C * gemm_in);  // token ids; encoded; attproj, fcproj
  const size_t attention = mul_sat(BT, C * gemm_in + 2 * f32 + 3 * C * att + C * att + NH * f32);
  const size_t mlp = mul_sat(BT, C * f32 + C * gemm_in + 2 * f32 + 8 * C * gemm_in);
  const Recompute layout = with_grads ? recompute : Recompute::full;
  const bool keep_attention = layout == Recompute::none, keep_mlp = layout != Recompute::full;
  if (!keep_attention) a = add_sat(a, attention);  // one layer of scratch
  if (!keep_mlp) a = add_sat(a, mlp);
  const size_t layer = add_sat(add_sat(keep_attention ? attention : 0, keep_mlp ? mlp : 0), mul_sat(BT, C * f32));
  a = add_sat(a, mul_sat(layer, size_t(config.n_layer)));
  a = add_sat(a, mul_sat(BT, C * gemm_in + 2 * f32 + V * gemm_in + f32));  // ln_f, logits (padded rows), losses
  // dresidual in fp32; dC and d3C stored as qkv is; d4C as GEMM inputs are
  if (with_grads) a = add_sat(a, mul_sat(BT, C, f32 + 4 * att + 4 * gemm_in));
  fp.activation_bytes = a;
  return fp;
}

float* GPT::alloc_floats(size_t n, bool weights) {
  void* ptr = backend_.alloc(n * sizeof(float));
  (weights ? weight_bytes_ : activation_bytes_) += n * sizeof(float);
  allocations_.push_back(ptr);
  return static_cast<float*>(ptr);
}

TensorOut GPT::alloc_activation(size_t n, bool bf16) {
  if (!bf16) return alloc_floats(n);
  void* ptr = backend_.alloc(n * sizeof(BFloat16));
  activation_bytes_ += n * sizeof(BFloat16);
  allocations_.push_back(ptr);
  return static_cast<BFloat16*>(ptr);
}

GPT::GPT(const ModelConfig& config, Backend& backend, int max_B, int max_T, bool with_grads, Recompute recompute,
         WeightHome home)
    : config_(config),
      backend_(backend),
      recompute_(recompute),
      precision_(backend.matmul_precision()),
      bf16_storage_(gemm_inputs_in_bf16(precision_)),
      home_(home),
      table_(config),
      packed_(table_),
      max_B_(max_B),
      max_T_(max_T) {
  EMBER_ASSERT(max_T >= 1 && max_T <= config.block_size, "max_T must be in [1, block_size]");
  EMBER_ASSERT(max_B >= 1, "max_B must be positive");
  EMBER_ASSERT(config.n_embd % config.n_head == 0, "n_embd must be a multiple of n_head");
  EMBER_ASSERT(attention_schedule_problem(config).empty(), attention_schedule_problem(config));
  EMBER_ASSERT(!host_masters() || host_masters_possible(config, precision_), "host masters need a bf16 weight copy");
  EMBER_ASSERT(home != WeightHome::host_dense || dense_weights_quantized(precision_),
               "only quantized products leave the dense weights' copy on the host");
  const size_t BT = size_t(max_B) * max_T, C = config.n_embd, V = config.padded_vocab_size(), NH = config.n_head;
  arena_numel_ = (table_.total_numel() + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
  bf16_attention_out_ = bf16_storage_ && attention_in_bf16(MatmulPrecision::bf16, int(C / NH));
  for (size_t i = 0; i < table_.params().size(); ++i) {
    fp32_offset_.push_back(host_masters() ? packed_.offset(i) : table_.params()[i].offset);
    bf16_offset_.push_back(home == WeightHome::host_dense ? packed_.offset(i) : table_.params()[i].offset);
  }
  params_ = alloc_floats(host_masters() ? packed_.numel() : arena_numel_, /*weights=*/true);
  if (bf16_storage_) {
    const size_t n = home == WeightHome::host_dense ? packed_.numel() : arena_numel_;
    params_bf16_ = static_cast<BFloat16*>(backend_.alloc(n * sizeof(BFloat16)));
    weight_bytes_ += n * sizeof(BFloat16);
    allocations_.push_back(params_bf16_);
  }
  inputs_ = static_cast<int32_t*>(backend_.alloc(BT * sizeof(int32_t)));
  targets_ = static_cast<int32_t*>(backend_.alloc(BT * sizeof(int32_t)));
  activation_bytes_ += 2 * BT * sizeof(int32_t);
  allocations_.push_back(inputs_);
  allocations_.push_back(targets_);
  encoded_ = alloc_floats(BT * C);
  attproj_ = alloc_activation(BT * C, bf16_storage_);
  fcproj_ = alloc_activation(BT * C, bf16_storage_);
  // Which tensors each layer keeps; the rest point into one shared layer of scratch.
  const Recompute layout = with_grads ? recompute : Recompute::full;
  const bool keep_attention = layout == Recompute::none, keep_mlp = layout != Recompute::full;
  LayerActs scratch{};
  auto fill = [&](LayerActs& a, bool attention, bool mlp) {
    if (attention) {
      a.ln1 = alloc_activation(BT * C, bf16_storage_);
      a.ln1_mean = alloc_floats(BT);
      a.ln1_rstd = alloc_floats(BT);
      a.qkv = alloc_activation(BT * 3 * C, bf16_attention_out_);
      a.atty = alloc_activation(BT * C, bf16_attention_out_);
      a.lse = alloc_floats(BT * NH);
    }
    if (mlp) {
      a.residual2 = alloc_floats(BT * C);
      a.ln2 = alloc_activation(BT * C, bf16_storage_);
      a.ln2_mean = alloc_floats(BT);
      a.ln2_rstd = alloc_floats(BT);
      a.fch = alloc_activation(BT * 4 * C, bf16_storage_);
      a.fch_gelu = alloc_activation(BT * 4 * C, bf16_storage_);
    }
  };
  if (!keep_attention || !keep_mlp) fill(scratch, !keep_attention, !keep_mlp);
  layers_.resize(config.n_layer);
  for (auto& a : layers_) {
    a = scratch;
    fill(a, keep_attention, keep_mlp);
    a.residual3 = alloc_floats(BT * C);
  }
  lnf_ = alloc_activation(BT * C, bf16_storage_);
  lnf_mean_ = alloc_floats(BT);
  lnf_rstd_ = alloc_floats(BT);
  logits_ = alloc_activation(BT * V, bf16_storage_);
  losses_ = alloc_floats(BT);
  losses_host_.resize(BT);
  if (with_grads) {
    grads_ = alloc_floats(arena_numel_, /*weights=*/true);
    dresidual_ = alloc_floats(BT * C);
    dC_ = alloc_activation(BT * C, bf16_attention_out_);
    d3C_ = alloc_activation(BT * 3 * C, bf16_attention_out_);
    d4C_ = alloc_activation(BT * 4 * C, bf16_storage_);
  }
  const Footprint fp = footprint(config, max_B, max_T, with_grads, recompute, bf16_storage_, home_);
  EMBER_ASSERT(fp.weight_bytes == weight_bytes_ && fp.activation_bytes == activation_bytes_,
               "GPT::footprint() disagrees with what the constructor allocated");
}

GPT::~GPT() {
  for (void* ptr : allocations_) backend_.free(ptr);
}

void GPT::init_weights(uint64_t seed) { set_weights(initial_weights(seed).data()); }

std::vector<float> GPT::initial_weights(uint64_t seed) const {
  std::vector<float> host(arena_numel_, 0.0f);
  const float residual_std = 0.02f / std::sqrt(2.0f * float(config_.n_layer));
  const auto& params = table_.params();
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamInfo& info = params[i];
    float* dst = host.data() + info.offset;
    const std::string& n = info.name;
    auto ends_with = [&](const char* suffix) {
      std::string s(suffix);
      return n.size() >= s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0;
    };
    if (info.shape.size() >= 2) {
      const bool residual_proj = ends_with("attn.c_proj.weight") || ends_with("mlp.c_proj.weight");
      const float std = residual_proj ? residual_std : 0.02f;
      Philox rng(seed, 0, uint32_t(i), RNG_PURPOSE_INIT);
      for (size_t k = 0; k < info.numel; ++k) dst[k] = std * rng.normal();
    } else if (ends_with("ln_1.weight") || ends_with("ln_2.weight") || ends_with("ln_f.weight")) {
      for (size_t k = 0; k < info.numel; ++k) dst[k] = 1.0f;
    }  // biases stay zero
  }
  return host;
}

const float* GPT::params() const {
  EMBER_ASSERT(!host_masters(), "GPT::params(): a model with host masters has no fp32 arena");
  return params_;
}

void GPT::set_weights(const float* host) {
  weights_changed_ = true;
  if (!host_masters()) {
    backend_.copy_to_device(params_, host, arena_numel_ * sizeof(float));
    return;
  }
  std::vector<float> packed(packed_.numel(), 0.0f);
  packed_.pack(0, arena_numel_, host, packed.data());
  backend_.copy_to_device(params_, packed.data(), packed.size() * sizeof(float));
  // The bf16 copy: of the arena, or under host_dense of the packed tensors (the dense weights' is the host's).
  const float* from = home_ == WeightHome::host_dense ? packed.data() : host;
  std::vector<BFloat16> copy(home_ == WeightHome::host_dense ? packed.size() : arena_numel_);
  make_cpu_backend()->cast_to_bf16(copy.data(), from, copy.size());  // its threads: 1.5B elements at a load
  backend_.copy_to_device(params_bf16_, copy.data(), copy.size() * sizeof(BFloat16));
}

DeviceWeights GPT::device_weights() {
  if (!host_masters()) return {};
  if (home_ == WeightHome::host_dense) return {nullptr, params_bf16_, params_, &packed_};
  return {params_bf16_, nullptr, params_, &packed_};
}

double GPT::forward(const int32_t* inputs, const int32_t* targets, int B, int T) {
  const int C = config_.n_embd, V = config_.vocab_size, Vp = config_.padded_vocab_size(), N = B * T;
  forward_blocks(inputs, B, T);
  have_targets_ = targets != nullptr;
  Backend& be = backend_;
  be.matmul_forward_transposed(logits_, lnf_, w(table_.wte()), N, C, Vp);  // the padding rows give zero logits
  if (!targets) return 0.0;

  be.copy_to_device(targets_, targets, size_t(N) * sizeof(int32_t));
  be.crossentropy_forward(losses_, logits_, targets_, N, V, Vp);
  return mean_loss(N);
}

// The rows' scored positions gathered into the attention projection's scratch (B, scored, C), free after the blocks
// and stored as lnf_ is; the lm_head and the loss over those B x scored positions only.
void GPT::forward_tail(const int32_t* inputs, const int32_t* targets, int B, int T, const int* ends, int scored) {
  EMBER_ASSERT(scored >= 1 && scored <= T, "forward_tail: scored positions outside the rows");
  const int C = config_.n_embd, V = config_.vocab_size, Vp = config_.padded_vocab_size(), N = B * scored;
  forward_blocks(inputs, B, T);
  have_targets_ = false;  // backward reads the whole rows' logits, which were not formed
  Backend& be = backend_;
  const size_t elem = lnf_.bf16 ? sizeof(BFloat16) : sizeof(float), row = size_t(C) * elem;
  auto* src = static_cast<char*>(lnf_.ptr);
  auto* dst = static_cast<char*>(attproj_.ptr);
  for (int r = 0; r < B; ++r) {
    EMBER_ASSERT(ends[r] >= 1 && ends[r] <= T, "forward_tail: a row's end outside the row");
    const int first = ends[r] - scored, skip = std::max(0, -first);
    be.copy(dst + (size_t(r) * scored + skip) * row, src + (size_t(r) * T + first + skip) * row,
            size_t(scored - skip) * row);
  }
  be.matmul_forward_transposed(logits_, attproj_, w(table_.wte()), N, C, Vp);
  be.copy_to_device(targets_, targets, size_t(N) * sizeof(int32_t));
  be.crossentropy_forward(losses_, logits_, targets_, N, V, Vp);
  mean_loss(N);
  for (int r = 0; r < B; ++r)  // the positions left out: whatever the scratch held, no loss
    for (int j = 0; j < scored - ends[r]; ++j) losses_host_[size_t(r) * scored + j] = 0.0f;
}

void GPT::forward_blocks(const int32_t* inputs, int B, int T) {
  EMBER_ASSERT(B >= 1 && B <= max_B_ && T >= 1 && T <= max_T_, "batch shape exceeds the allocated (max_B, max_T)");
  B_ = B;
  T_ = T;
  const int C = config_.n_embd, N = B * T;
  Backend& be = backend_;
  be.copy_to_device(inputs_, inputs, size_t(N) * sizeof(int32_t));
  // Where the weights may have changed since the last cast (an optimizer step, a checkpoint loaded, an exchange: all
  // through params()): one cast over the arena, 6 bytes per parameter, once per step however many micro-batches;
  // under int8 the backend likewise quantizes each dense weight again, once, as the step's first product reads it.
  if (weights_changed_) {
    if (bf16_storage_ && !host_masters()) be.cast_to_bf16(params_bf16_, params_, table_.total_numel());
    EMBER_ASSERT(home_ != WeightHome::host_dense || host_bf16_, "GPT: no host weight copy (set_host_weight_copy)");
    be.weights_changed();
  }
  weights_changed_ = false;

  be.encoder_forward(encoded_, inputs_, p(table_.wte()), p(table_.wpe()), B, T, C);
  // Each layer's closing residual add is fused with the layernorm that follows it: the next layer's ln_1, or ln_f.
  if (config_.n_layer == 0)
    be.layernorm_forward(lnf_, lnf_mean_, lnf_rstd_, encoded_, p(table_.ln_f_weight()), p(table_.ln_f_bias()), N, C);
  else
    layernorm_1(0, encoded_);
  const float* residual = encoded_;
  for (int l = 0; l < config_.n_layer; ++l) {
    attention_core(l);
    attention_out(l, residual);
    mlp_in(l);
    mlp_out(l);
    residual = layers_[l].residual3;
  }
}

double GPT::forward_backward(const int32_t* inputs, const int32_t* targets, int B, int T, float loss_scale) {
  EMBER_ASSERT(grads_ != nullptr, "model was built without gradients");
  EMBER_ASSERT(targets != nullptr, "forward_backward needs targets");
  forward(inputs, nullptr, B, T);
  have_targets_ = true;
  const int N = B * T;
  backend_.copy_to_device(targets_, targets, size_t(N) * sizeof(int32_t));
  backend_.crossentropy_forward_backward(losses_, logits_, targets_, loss_scale / float(N), N, config_.vocab_size,
                                         config_.padded_vocab_size());
  const double loss = mean_loss(N);
  backward_from_dlogits();
  return loss;
}

double GPT::mean_loss(int N) {
  losses_n_ = size_t(N);
  backend_.copy_to_host(losses_host_.data(), losses_, size_t(N) * sizeof(float));
  double sum = 0.0;
  for (int i = 0; i < N; ++i) sum += losses_host_[i];
  return sum / N;
}

void GPT::layernorm_1(int l, const float* residual) {
  LayerActs& a = layers_[l];
  backend_.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, residual, p(table_.block(l, BLOCK_PARAM_LN1_W)),
                             p(table_.block(l, BLOCK_PARAM_LN1_B)), B_ * T_, config_.n_embd);
}

void GPT::attention_in(int l, const float* residual) {
  layernorm_1(l, residual);
  attention_core(l);
}

void GPT::attention_core(int l) {
  const int C = config_.n_embd, NH = config_.n_head, N = B_ * T_;
  LayerActs& a = layers_[l];
  const ParamInfo &qkv_w = table_.block(l, BLOCK_PARAM_QKV_W), &qkv_b = table_.block(l, BLOCK_PARAM_QKV_B);
  backend_.matmul_forward(a.qkv, a.ln1, dense_w(qkv_w), bias(qkv_b, a.qkv), N, C, 3 * C);
  backend_.attention_forward(a.atty, a.lse, a.qkv, B_, T_, C, NH, config_.attention(l));
}

void GPT::attention_out(int l, const float* residual) {
  const int C = config_.n_embd, N = B_ * T_;
  LayerActs& a = layers_[l];
  auto P = [&](BlockParam bp) { return p(table_.block(l, bp)); };
  const ParamInfo& proj_b = table_.block(l, BLOCK_PARAM_PROJ_B);
  backend_.matmul_forward(attproj_, a.atty, proj_weight(l), bias(proj_b, attproj_), N, C, C);
  backend_.residual_layernorm_forward(a.residual2, a.ln2, a.ln2_mean, a.ln2_rstd, residual, attproj_,
                                      P(BLOCK_PARAM_LN2_W), P(BLOCK_PARAM_LN2_B), N, C);
}

void GPT::mlp_in(int l) {
  const int C = config_.n_embd, N = B_ * T_;
  LayerActs& a = layers_[l];
  const ParamInfo &fc_w = table_.block(l, BLOCK_PARAM_FC_W), &fc_b = table_.block(l, BLOCK_PARAM_FC_B);
  backend_.matmul_forward(a.fch, a.ln2, dense_w(fc_w), bias(fc_b, a.fch), N, C, 4 * C);
  backend_.gelu_forward(a.fch_gelu, a.fch, size_t(N) * 4 * C);
}

void GPT::mlp_out(int l) {
  const int C = config_.n_embd, N = B_ * T_;
  LayerActs& a = layers_[l];
  const ParamInfo& fcproj_b = table_.block(l, BLOCK_PARAM_FCPROJ_B);
  backend_.matmul_forward(fcproj_, a.fch_gelu, dense_w(table_.block(l, BLOCK_PARAM_FCPROJ_W)), bias(fcproj_b, fcproj_),
                          N, 4 * C, C);
  // The layernorm after this layer: ln_f after the last, else the next layer's ln_1.
  TensorOut out = lnf_;
  float *mean = lnf_mean_, *rstd = lnf_rstd_;
  const ParamInfo *lnw = &table_.ln_f_weight(), *lnb = &table_.ln_f_bias();
  if (l + 1 < config_.n_layer) {
    LayerActs& next = layers_[l + 1];
    out = next.ln1, mean = next.ln1_mean, rstd = next.ln1_rstd;
    lnw = &table_.block(l + 1, BLOCK_PARAM_LN1_W), lnb = &table_.block(l + 1, BLOCK_PARAM_LN1_B);
  }
  backend_.residual_layernorm_forward(a.residual3, out, mean, rstd, a.residual2, fcproj_, p(*lnw), p(*lnb), N, C);
}

void GPT::set_dither(int l, int which) {
  if (precision_ != MatmulPrecision::int8) return;
  const uint32_t stream = uint32_t(l) * 4 + uint32_t(which);
  EMBER_ASSERT(stream < kDitherStreams, "too many layers for the dither streams");
  backend_.set_gradient_dither({dither_seed_, uint32_t(dither_sample_ >> 32), uint32_t(dither_sample_), stream});
}

void GPT::zero_grad() {
  EMBER_ASSERT(grads_ != nullptr, "model was built without gradients");
  backend_.zero(grads_, arena_numel_ * sizeof(float));
}

void GPT::backward(float loss_scale) {
  EMBER_ASSERT(grads_ != nullptr, "model was built without gradients");
  EMBER_ASSERT(have_targets_, "backward needs a forward with targets");
  const int N = B_ * T_;
  // Mean loss over N tokens: each token's loss has weight loss_scale / N.
  backend_.crossentropy_backward(logits_, logits_, targets_, loss_scale / float(N), N, config_.vocab_size,
                                 config_.padded_vocab_size());
  backward_from_dlogits();
}

void GPT::backward_from_dlogits() {
  const int B = B_, T = T_, C = config_.n_embd, NH = config_.n_head, V = config_.padded_vocab_size(), N = B * T;
  Backend& be = backend_;
  const size_t NC = size_t(N) * C;
  // Every activation gradient but the residual stream's is written by the op that produces it (backend.h); the
  // residual's gradient is summed over the branches that read the stream, starting from zero.
  be.zero(dresidual_, NC * sizeof(float));
  // Over the padded vocabulary: dlogits is zero in the padding columns, so wte's padding rows get no gradient.
  be.matmul_backward_transposed(dC_, g(table_.wte()), logits_, lnf_, w(table_.wte()), N, C, V);
  const float* last = config_.n_layer > 0 ? layers_.back().residual3 : encoded_;
  be.layernorm_backward(dresidual_, g(table_.ln_f_weight()), g(table_.ln_f_bias()), dC_, last, p(table_.ln_f_weight()),
                        lnf_mean_, lnf_rstd_, N, C);

  for (int l = config_.n_layer - 1; l >= 0; --l) {
    LayerActs& a = layers_[l];
    const float* residual = l == 0 ? encoded_ : layers_[l - 1].residual3;
    auto P = [&](BlockParam bp) { return p(table_.block(l, bp)); };
    auto W = [&](BlockParam bp) { return dense_w(table_.block(l, bp)); };
    auto G = [&](BlockParam bp) { return g(table_.block(l, bp)); };
    if (recompute_ == Recompute::full) {  // everything but the stored output, in forward order
      attention_in(l, residual);
      attention_out(l, residual);
      mlp_in(l);
    }
    // MLP branch: residual3 = residual2 + c_proj(gelu(c_fc(ln_2(residual2)))).
    set_dither(l, 3);
    be.matmul_backward(d4C_, G(BLOCK_PARAM_FCPROJ_W), G(BLOCK_PARAM_FCPROJ_B), dresidual_, a.fch_gelu,
                       W(BLOCK_PARAM_FCPROJ_W), N, 4 * C, C);
    set_dither(l, 2);
    be.matmul_gelu_backward(dC_, G(BLOCK_PARAM_FC_W), G(BLOCK_PARAM_FC_B), d4C_, a.fch, a.ln2, W(BLOCK_PARAM_FC_W), N,
                            C, 4 * C);
    be.layernorm_backward(dresidual_, G(BLOCK_PARAM_LN2_W), G(BLOCK_PARAM_LN2_B), dC_, a.residual2,
                          P(BLOCK_PARAM_LN2_W), a.ln2_mean, a.ln2_rstd, N, C);
    // Attention branch: residual2 = residual + c_proj(attn(c_attn(ln_1(residual)))).
    if (recompute_ == Recompute::attention) attention_in(l, residual);
    set_dither(l, 1);
    be.matmul_backward(dC_, G(BLOCK_PARAM_PROJ_W), G(BLOCK_PARAM_PROJ_B), dresidual_, a.atty, proj_weight(l), N, C, C);
    be.attention_backward(d3C_, dC_, a.qkv, a.atty, a.lse, B, T, C, NH, config_.attention(l));
    set_dither(l, 0);
    be.matmul_backward(dC_, G(BLOCK_PARAM_QKV_W), G(BLOCK_PARAM_QKV_B), d3C_, a.ln1, W(BLOCK_PARAM_QKV_W), N, C, 3 * C);
    be.layernorm_backward(dresidual_, G(BLOCK_PARAM_LN1_W), G(BLOCK_PARAM_LN1_B), dC_, residual, P(BLOCK_PARAM_LN1_W),
                          a.ln1_mean, a.ln1_rstd, N, C);
    if (backward_hook_) backward_hook_(l);
  }
  be.encoder_backward(g(table_.wte()), g(table_.wpe()), dresidual_, inputs_, B, T, C);
  if (backward_hook_) backward_hook_(-1);
}

}  // namespace ember
