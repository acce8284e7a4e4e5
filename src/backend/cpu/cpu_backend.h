// The CPU backend: every op of backend.h in fp32 with OpenMP loops and OpenBLAS GEMMs. It is the reference that
// other backends are tested against, so every loop uses a static split and results are reproducible bit for bit.
#pragma once

#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_matmul_fp8.h"
#include "backend/cpu/cpu_matmul_int8.h"

namespace ember {

// Ops are defined across one file per family: cpu_backend.cpp (memory, elementwise), cpu_encoder.cpp,
// cpu_layernorm.cpp, cpu_matmul.cpp, cpu_attention.cpp, cpu_kv_cache.cpp, cpu_gelu.cpp, cpu_loss.cpp, cpu_optim.cpp.
// Bitwise determinism holds for a fixed OpenMP thread count (a few reductions keep one partial sum per thread).
class CpuBackend final : public Backend {
 public:
  CpuBackend();
  std::string name() const override;

  void* alloc(size_t bytes) override;
  void free(void* ptr) override;
  void copy_to_device(void* dst, const void* src_host, size_t bytes) override;
  void copy_to_host(void* dst_host, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void zero(void* ptr, size_t bytes) override;
  void synchronize() override;
  bool host_addressable() const override { return true; }

  void encoder_forward(float* out, const int32_t* inp, const float* wte, const float* wpe, int B, int T,
                       int C) override;
  void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp, int B, int T, int C) override;

  void layernorm_forward(TensorOut out, float* mean, float* rstd, const float* inp, const float* weight,
                         const float* bias, int N, int C) override;
  void layernorm_backward(float* dinp, float* dweight, float* dbias, TensorIn dout, const float* inp,
                          const float* weight, const float* mean, const float* rstd, int N, int C) override;

  void matmul_forward(TensorOut out, TensorIn inp, TensorIn weight, TensorIn bias, int N, int IC, int OC) override;
  void matmul_gelu_backward(TensorOut dinp, float* dweight, float* dbias, TensorOut dout, TensorIn pre, TensorIn inp,
                            TensorIn weight, int N, int IC, int OC) override;
  void matmul_backward(TensorOut dinp, float* dweight, float* dbias, TensorIn dout, TensorIn inp, TensorIn weight,
                       int N, int IC, int OC) override;
  void matmul_forward_transposed(TensorOut out, TensorIn inp, TensorIn wte, int N, int C, int V) override;
  void matmul_backward_transposed(TensorOut dinp, float* dwte, TensorIn dout, TensorIn inp, TensorIn wte, int N, int C,
                                  int V) override;

  using Backend::attention_backward;
  using Backend::attention_forward;
  void attention_forward(TensorOut out, float* lse, TensorIn qkv, int B, int T, int C, int NH,
                         const AttentionLayer& layer) override;
  void attention_backward(TensorOut dqkv, TensorIn dout, TensorIn qkv, TensorIn out, const float* lse, int B, int T,
                          int C, int NH, const AttentionLayer& layer) override;

  void encoder_forward_positions(float* out, const int32_t* inp, const int32_t* pos, const float* wte, const float* wpe,
                                 int N, int C) override;
  using Backend::attention_kv_forward;
  using Backend::kv_cache_write;
  void kv_cache_write(float* k_cache, float* v_cache, const float* qkv, const int32_t* slot, const int32_t* pos, int N,
                      int C, int NH, const KvAttention& a) override;
  void attention_kv_forward(float* out, const float* qkv, const float* k_cache, const float* v_cache,
                            const int32_t* slot, const int32_t* pos, int N, int C, int NH,
                            const KvAttention& a) override;

  void gelu_forward(TensorOut out, TensorIn inp, size_t n) override;
  void gelu_backward(float* dinp, TensorIn inp, const float* dout, size_t n) override;

  void add(float* out, const float* a, TensorIn b, size_t n) override;
  void accumulate(float* dst, const float* src, size_t n) override;
  void scale(float* x, float s, size_t n) override;
  void cast_to_bf16(BFloat16* out, const float* inp, size_t n) override;

  void crossentropy_forward(float* losses, TensorIn logits, const int32_t* targets, int N, int V, int ld) override;
  void crossentropy_backward(TensorOut dlogits, TensorIn logits, const int32_t* targets, float dloss, int N, int V,
                             int ld) override;
  void softmax_forward(float* probs, const float* logits, float temperature, int N, int V) override;

  std::string int8_engine() const override;
  void weights_changed() override;
  size_t quantized_weight_copy_bytes() const override;

  double sum_squares(const float* x, size_t n) override;
  void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr, float beta1, float beta2,
                    float eps, float weight_decay, int t, float grad_scale) override;
  void adamw_update_segments_bf16(float* params, BFloat16* params_bf16, const float* grads, float* m, float* v,
                                  const AdamWSegment* segs, size_t nseg, float lr, float beta1, float beta2, float eps,
                                  int t, float grad_scale) override;

 private:
  // The matmul ops' widened or rounded copies of their inputs under bf16 (inp, weight, dout), then a bf16-stored
  // output's fp32 result, kept between calls so that a step does not allocate and fault in fresh pages for each GEMM.
  std::vector<float> gemm_scratch_[4];
  // The rotary table (core/rope.h) of the last rotated attention: its base, half the head size, and its positions.
  struct RopeCache {
    float theta = 0.0f;
    int half = 0, positions = 0;
    std::vector<float> cos, sin;
  } rope_cache_;
  const RopeCache* rope_for(const AttentionLayer& layer, int HS, int T);  // null for a layer without rotation
  std::vector<float> gelu_scratch_;    // matmul_gelu_backward's gradient, formed from a bf16-stored dout
  cpu::Int8Matrix int8_rows_;          // under int8, the last product's activations or gradients quantized per row
  cpu::Fp8Matrix fp8_inp_, fp8_dout_;  // under fp8, the last product's activations and output gradients
  std::vector<float> fp8_scratch_;     // under fp8, the widened operands (and a product to accumulate)
  cpu::Int8WeightGradientScratch int8_weight_gradient_scratch_;  // under int8 with int8 weight gradients
  // Under int8, the weights' int8 copies by address: per output channel (forward), per input channel (backward).
  std::unordered_map<const void*, cpu::Int8Weight> int8_forward_weights_, int8_backward_weights_;
  std::unordered_map<const void*, cpu::Fp8Weight> fp8_weights_;  // under fp8, the weights' fp8 copies by address
  // What the memory accounting counts of those copies (under one entry), brought up to date when a copy is made.
  size_t quantized_tracked_bytes_ = 0;
  void track_quantized_copies();
  const cpu::Int8Weight& int8_weight(TensorIn weight, int IC, int OC, bool per_output_channel);
  const cpu::Int8Weight& int8_lm_head_weight(TensorIn wte, int C, int V);
  const cpu::Fp8Weight& fp8_weight(TensorIn weight, int IC, int OC);
};

}  // namespace ember
