// The GPT-2 model written against the Backend interface: parameters, gradients and activations in backend memory,
// forward to mean cross-entropy and backward into the gradient arena. No backend-specific code here.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "model/device_weights.h"
#include "model/model_config.h"
#include "model/param_table.h"

namespace ember {

// Activation recomputation (training.recompute), as Megatron names it: none keeps every layer's activations for
// backward; attention keeps the MLP half and recomputes each layer's attention half (ln_1, c_attn, attention) in
// backward from the layer input; full keeps only each layer's output and recomputes the whole layer in backward.
// Recomputed tensors live in one layer's worth of scratch. Gradients are bitwise those of none (the same ops run on
// the same inputs again).
enum class Recompute { none, attention, full };
inline constexpr Recompute kRecomputes[] = {Recompute::none, Recompute::attention, Recompute::full};
const char* recompute_name(Recompute r);  // "none", "attention" or "full": the one place these names are spelled
std::optional<Recompute> parse_recompute(const std::string& name);  // nothing for any other text

class GPT {
 public:
  // Allocates parameters, gradients and activations for batches up to (max_B, max_T); max_T <= block_size.
  // with_grads = false skips the gradient arena and backward buffers (eval, generate).
  // Without gradients nothing is kept for backward, so activations take the layout of Recompute::full.
  // Where the backend's matmul precision is bf16 at construction, the GEMM inputs are stored in bf16: the outputs of
  // every layernorm and of GELU, attention's output where attention is bf16 too (attention_in_bf16), and a working
  // copy of the weights that forward() refreshes from the fp32 master weights where they may have changed (see
  // params()). That changes no value (those inputs are rounded to bf16 anyway) and halves their memory. So are the
  // outputs of c_attn (where attention is bf16), c_fc and the two projections (c_proj's), their biases added in bf16
  // (core/dtype.h): GELU then reads its input rounded to bf16, and the residual adds each branch's output so.
  // home other than device (training.offload = optimizer; host_masters_possible; model/device_weights.h): the fp32
  // master weights are the optimizer's, on the host, and this model keeps no fp32 arena: only the bf16 working copy
  // (under host_dense, of the packed tensors only; the dense weights' is the host's, set_host_weight_copy) and the
  // packed fp32 tensors, which the optimizer writes (device_weights()) and set_weights() sets. The numbers are those of
  // a model with the arena: the copy holds the same bf16 values, the packed tensors the same fp32 ones (under int8 and
  // fp8 the products quantize the bf16 copy instead of the fp32 masters).
  GPT(const ModelConfig& config, Backend& backend, int max_B, int max_T, bool with_grads = true,
      Recompute recompute = Recompute::none, WeightHome home = WeightHome::device);
  ~GPT();
  GPT(const GPT&) = delete;
  GPT& operator=(const GPT&) = delete;

  // Parameters and gradients are allocated rounded up to a multiple of this many floats, so the arena splits into
  // equal, 64-byte aligned shards for any power-of-two world up to 256 ranks (ZeRO-1, bucketed all-reduce).
  static constexpr size_t ARENA_ALIGN = 4096;

  // The backend memory a GPT built with these arguments allocates, from the arguments alone, so a caller can compare
  // it with the memory available before allocating anything. The constructor asserts that it allocated exactly this.
  // bf16_storage: the backend's matmul precision is bf16. Saturates at SIZE_MAX where the size does not fit.
  struct Footprint {
    size_t weight_bytes = 0;      // as weight_bytes()
    size_t activation_bytes = 0;  // as activation_bytes()
  };
  static Footprint footprint(const ModelConfig& config, int max_B, int max_T, bool with_grads, Recompute recompute,
                             bool bf16_storage, WeightHome home = WeightHome::device);
  // Whether a model of `config` may be built with host masters at `precision`: where every weight the products read
  // has a bf16 copy (bf16 storage, and attention's output in bf16, which its projection's weight is read as).
  static bool host_masters_possible(const ModelConfig& config, MatmulPrecision precision);
  // Under matmul precision int8 or fp8, what the backend keeps beside the model: each dense layer's weight (c_attn,
  // attn c_proj, c_fc, mlp c_proj) in int8 twice, scaled per output channel for the forward product and per input
  // channel for the input-gradient product, with an fp32 scale per row of each; or in fp8 once, with one scale. 0
  // under other precisions.
  static size_t quantized_weight_copy_bytes(const ModelConfig& config, MatmulPrecision precision);

  const ModelConfig& config() const { return config_; }
  Recompute recompute() const { return recompute_; }
  // Backend memory this model allocated: parameters, gradients and the bf16 weight copy (bf16 storage); activations,
  // backward scratch and token ids.
  size_t weight_bytes() const { return weight_bytes_; }
  size_t activation_bytes() const { return activation_bytes_; }
  size_t arena_numel() const { return arena_numel_; }  // table().total_numel() rounded up to ARENA_ALIGN
  bool bf16_storage() const { return bf16_storage_; }  // the GEMM inputs are stored in bf16 (above)
  const ParamTable& table() const { return table_; }
  Backend& backend() { return backend_; }
  // (arena_numel()) backend memory, zero past total_numel(). The mutable form is taken to write them: under bf16
  // storage the next forward() recasts the working copy (and only then, so micro-batches share one cast). Not with
  // host masters, where there is no such arena.
  float* params() {
    weights_changed_ = true;
    return const_cast<float*>(std::as_const(*this).params());
  }
  const float* params() const;
  bool host_masters() const { return home_ != WeightHome::device; }
  WeightHome home() const { return home_; }
  // Under host_dense: the host's bf16 copy of the whole arena (page-locked, so that a GPU reads it in place), from
  // which the backend quantizes the dense weights. Set before the first forward, kept current by its owner.
  void set_host_weight_copy(const BFloat16* host) { host_bf16_ = host; }
  // params(), or null with host masters: what an optimizer step is given, which then writes device_weights() instead.
  // Either way the weights count as changed (the next forward recasts or requantizes what it must).
  float* device_masters() {
    weights_changed_ = true;
    return host_masters() ? nullptr : params_;
  }
  // With host masters, the bf16 copy and the packed fp32 tensors; without, nothing (a null layout).
  DeviceWeights device_weights();
  // Sets every weight from a host arena (arena_numel() values): into params(), or with host masters into the bf16
  // copy (cast on the host, to nearest even as the backend casts) and the packed tensors.
  void set_weights(const float* host);
  float* grads() { return grads_; }  // same layout as params()

  // GPT-2 initialisation from Philox keyed by (seed, parameter index): N(0, 0.02) for matrices and embeddings,
  // residual projections scaled by 1/sqrt(2 n_layer), zero biases, LayerNorm weights 1.
  void init_weights(uint64_t seed);
  std::vector<float> initial_weights(uint64_t seed) const;  // those weights as a host arena (arena_numel() values)

  // Forward over host token ids inputs (B, T). With targets (B, T) it computes per-token losses and returns their
  // mean (nats/token); without, it returns 0 and only the logits are valid.
  double forward(const int32_t* inputs, const int32_t* targets, int B, int T);
  // Forward over inputs (B, T) with the lm_head and the loss only at `scored` positions of each row: row r's positions
  // [ends[r] - scored, ends[r]) (ends[r] <= T; positions before 0 are left out), whose targets are targets (B, scored).
  // For scoring a few tokens at each row's end (multiple-choice tasks): the other positions' logits are never formed.
  // token_losses() then holds (B, scored), 0 where a position was left out. No backward may follow.
  void forward_tail(const int32_t* inputs, const int32_t* targets, int B, int T, const int* ends, int scored);
  // The per-token losses (-log p[target], nats) of the last forward or forward_backward with targets, (B, T) row-major
  // on the host, or of forward_tail (B, scored).
  std::span<const float> token_losses() const { return {losses_host_.data(), losses_n_}; }
  // Backward of the last forward's mean loss multiplied by loss_scale (1/grad_accum_steps), accumulated (+=)
  // into grads(). The last forward must have had targets. Overwrites the logits with their gradient.
  void backward(float loss_scale);
  // forward with targets then backward(loss_scale), returning the mean loss, with the loss and its gradient taken in
  // one op (the backend's fused classifier: crossentropy_forward_backward), which on a GPU reads the logits twice
  // instead of five times. The CPU gives bitwise the results of forward + backward; a GPU the same to rounding.
  double forward_backward(const int32_t* inputs, const int32_t* targets, int B, int T, float loss_scale);
  void zero_grad();
  // Under matmul precision int8 the output gradients of the dense layers are rounded with dithering keyed by the run's
  // seed, the global index of the micro-batch's first sample (unique to a rank, step and micro-batch, and the same
  // after a resume), the layer and the product (core/int8_quant.h). The trainer sets the seed once and the sample
  // before each backward.
  void set_dither_seed(uint64_t seed) { dither_seed_ = seed; }
  void set_dither_sample(uint64_t first_sample) { dither_sample_ = first_sample; }

  // Called during backward as gradients become final: hook(l) once layer l's gradients (and, for the last layer,
  // ln_f's) are complete, for l = n_layer-1 down to 0, then hook(-1) when wte and wpe are. Data parallelism uses it
  // to start all-reducing a layer's gradients while earlier layers are still running backward. Empty: no calls.
  void set_backward_hook(std::function<void(int)> hook) { backward_hook_ = std::move(hook); }

  // (B, T, padded_vocab_size()) backend memory, after forward: the logits of the V real tokens first in each row, the
  // padding columns after them zero (nothing reads them); in bf16 under bf16 storage (the lm_head's output, rounded
  // once, as PyTorch's bf16 autocast gives it; the cross-entropy reads it so, and backward writes dlogits over it in
  // bf16).
  TensorIn logits() const { return logits_; }

 private:
  struct LayerActs {
    TensorOut ln1;               // (B, T, C), a GEMM input
    float *ln1_mean, *ln1_rstd;  // (B, T), (B, T)
    TensorOut qkv;               // (B, T, 3C), stored as atty is
    float* lse;                  // (B, NH, T)
    TensorOut atty;              // (B, T, C), a GEMM input (bf16 with bf16 attention)
    float* residual2;            // (B, T, C) after the attention branch
    TensorOut ln2;               // (B, T, C), a GEMM input
    float *ln2_mean, *ln2_rstd;  // (B, T), (B, T)
    TensorOut fch;               // (B, T, 4C), GELU's input
    TensorOut fch_gelu;          // (B, T, 4C), a GEMM input
    float* residual3;            // (B, T, C) block output
  };
  size_t row(const ParamInfo& info) const { return size_t(&info - table_.params().data()); }  // its table index
  float* p(const ParamInfo& info) { return params_ + fp32_offset_[row(info)]; }
  float* g(const ParamInfo& info) { return grads_ + info.offset; }
  // A tensor the model may lack (wpe): null where it does.
  float* p(const ParamInfo* info) { return info ? p(*info) : nullptr; }
  float* g(const ParamInfo* info) { return info ? g(*info) : nullptr; }
  BFloat16* b(const ParamInfo& info) const { return params_bf16_ + bf16_offset_[row(info)]; }  // in the bf16 copy
  // A weight as the GEMMs read it: the bf16 working copy, or the master weight.
  TensorIn w(const ParamInfo& info) const {
    return bf16_storage_ ? TensorIn(b(info)) : TensorIn(const_cast<GPT*>(this)->p(info));
  }
  // A dense layer's bias as its GEMM adds it: stored as the layer's output is.
  TensorIn bias(const ParamInfo& info, TensorOut out) const {
    return out.bf16 ? TensorIn(b(info)) : TensorIn(const_cast<GPT*>(this)->p(info));
  }
  // A dense layer's weight as its GEMMs read it: under int8 and fp8 the fp32 master, which the products quantize (with
  // host masters, the bf16 copy: the only form there is; under host_dense the host's).
  TensorIn dense_w(const ParamInfo& info) const {
    if (home_ == WeightHome::host_dense) return TensorIn(host_bf16_ + info.offset);
    return dense_weights_quantized(precision_) && !host_masters() ? TensorIn(params_ + info.offset) : w(info);
  }
  // The attention projection's weight, stored as atty is (which is fp32 where attention is, at any precision).
  TensorIn proj_weight(int l) const {
    const ParamInfo& info = table_.block(l, BLOCK_PARAM_PROJ_W);
    return bf16_attention_out_ ? dense_w(info) : TensorIn(params_ + info.offset);
  }
  // Keys the backend's dithering of the output gradient of layer l's dense product `which` (0 c_attn, 1 the attention
  // projection, 2 c_fc, 3 the MLP projection) in this micro-batch (set_dither_sample).
  void set_dither(int l, int which);
  float* alloc_floats(size_t n, bool weights = false);
  TensorOut alloc_activation(size_t n, bool bf16);  // bf16 where `bf16`, else fp32
  // Forward pieces of layer l: ln_1 of its input; c_attn and attention; c_proj, the residual add (residual2) fused
  // with ln_2; c_fc and GELU; c_proj and the residual add (residual3) fused with the next layernorm (the next layer's
  // ln_1, or ln_f). Forward runs ln_1 only for layer 0; backward reruns the first four as recompute asks, ln_1 with
  // the unfused layernorm (attention_in = layernorm_1 + attention_core), which gives the bitwise-same result.
  double mean_loss(int N);  // the mean of the N per-token losses the last forward left in losses_
  void forward_blocks(const int32_t* inputs, int B, int T);  // forward up to lnf_ (the final layernorm's output)
  void backward_from_dlogits();                              // backward once logits_ holds dlogits
  void layernorm_1(int l, const float* residual);
  void attention_core(int l);
  void attention_in(int l, const float* residual);
  void attention_out(int l, const float* residual);
  void mlp_in(int l);
  void mlp_out(int l);

  ModelConfig config_;
  Backend& backend_;
  Recompute recompute_ = Recompute::none;
  MatmulPrecision precision_;  // the backend's at construction; the dense layers' products under int8 and fp8
                               // quantize the fp32 masters, and int8 dithers the output gradients
  bool bf16_storage_ = false;
  WeightHome home_ = WeightHome::device;
  const BFloat16* host_bf16_ = nullptr;           // under host_dense: set_host_weight_copy
  uint64_t dither_seed_ = 0, dither_sample_ = 0;  // set_dither_seed, set_dither_sample
  bool bf16_attention_out_ = false;  // attention's output is stored in bf16 (bf16 storage and attention_in_bf16)
  size_t weight_bytes_ = 0, activation_bytes_ = 0;
  ParamTable table_;
  PackedFp32Layout packed_;
  std::vector<size_t> fp32_offset_;  // each table row's first element in params_: its arena offset, or packed
  std::vector<size_t> bf16_offset_;  // and in params_bf16_ (packed under host_dense)
  size_t arena_numel_ = 0;
  std::function<void(int)> backward_hook_;
  int max_B_, max_T_;
  int B_ = 0, T_ = 0;
  bool have_targets_ = false;
  std::vector<void*> allocations_;

  float* params_ = nullptr;  // (arena_numel) the fp32 weights; with host masters (packed_.numel()) the packed ones
  float* grads_ = nullptr;
  BFloat16* params_bf16_ = nullptr;                 // (arena_numel, or packed) the working copy under bf16 storage
  bool weights_changed_ = true;                     // since the working copy was cast
  int32_t *inputs_ = nullptr, *targets_ = nullptr;  // (B, T)
  float* encoded_ = nullptr;                        // (B, T, C) block 0 input
  TensorOut attproj_;                               // (B, T, C) scratch: attention projection output, as GEMM inputs
  TensorOut fcproj_;                                // (B, T, C) scratch: MLP projection output, as GEMM inputs
  std::vector<LayerActs> layers_;
  TensorOut lnf_;                                    // (B, T, C), a GEMM input
  float *lnf_mean_ = nullptr, *lnf_rstd_ = nullptr;  // (B, T), (B, T)
  TensorOut logits_;                                 // (B, T, V padded)
  float* losses_ = nullptr;                          // (B, T)
  std::vector<float> losses_host_;
  size_t losses_n_ = 0;  // the losses the last forward with targets left in losses_host_
  // Backward scratch: each written whole by the op that produces it, except the residual's, zeroed once per pass.
  float* dresidual_ = nullptr;  // (B, T, C) gradient of the residual stream
  TensorOut dC_;                // (B, T, C) a dense layer's dinp, stored as qkv is: bf16 where attention is
  TensorOut d3C_;               // (B, T, 3C), stored as qkv is
  TensorOut d4C_;               // (B, T, 4C) at the GELU's output, stored as GEMM inputs are
};

}  // namespace ember
