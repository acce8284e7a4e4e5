// The Backend op methods of the CUDA backend, written once: each hands its arguments to the launcher of its op family
// (cuda_<family>.cu) on the backend's stream or, where the adapter decides something, to the shared functions of
// cuda_dispatch.h after the Backend's argument checks. CudaBackend derives from OpMethods on the device; the
// kernel-model backend (tests/kernel_model) includes this header with the namespace renamed, over its CPU-compiled
// launchers, so the model runs exactly these methods, checks and dispatch.
//
// What differs between the two stays in them: memory (alloc, copies, zero fills), the scratch, the AdamW segments'
// copy, sum_squares' read-back, and the OpContext (stream, cuBLAS and cuBLASLt handles, device).
// Each op's arguments are documented where the op is declared, in backend/backend.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/dtype.h"
#include "core/rope.h"
#include "cuda_dispatch.h"
#include "cuda_ops.h"

namespace ember::cuda {

class OpMethods : public Backend, protected OpResources {
 public:
  // --- encoder ---
  void encoder_forward(float* out, const int32_t* inp, const float* wte, const float* wpe, int B, int T,
                       int C) override {
    launch_encoder_forward(out, inp, wte, wpe, B, T, C, op_context().stream);
  }
  void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp, int B, int T, int C) override {
    cuda::encoder_backward(op_context(), dwte, dwpe, dout, inp, B, T, C);
  }

  // --- layernorm ---
  void layernorm_forward(TensorOut out, float* mean, float* rstd, const float* inp, const float* weight,
                         const float* bias, int N, int C) override {
    launch_layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, op_context().stream);
  }
  void residual_layernorm_forward(float* residual, TensorOut out, float* mean, float* rstd, const float* a, TensorIn b,
                                  const float* weight, const float* bias, int N, int C) override {
    launch_residual_layernorm_forward(residual, out, mean, rstd, a, b, weight, bias, N, C, op_context().stream);
  }
  void layernorm_backward(float* dinp, float* dweight, float* dbias, TensorIn dout, const float* inp,
                          const float* weight, const float* mean, const float* rstd, int N, int C) override {
    check_gemm_dout(dout, "layernorm_backward");
    cuda::layernorm_backward(op_context(), dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
  }

  // --- matmul and attention: the shared adapter functions after the Backend's argument checks ---
  void matmul_forward(TensorOut out, TensorIn inp, TensorIn weight, TensorIn bias, int N, int IC, int OC) override {
    check_gemm_inputs(inp, weight, "matmul_forward");
    check_gemm_output(out, bias, "matmul_forward");
    cuda::matmul_forward(matmul_context(), out, inp, weight, bias, N, IC, OC);
  }
  void matmul_backward(TensorOut dinp, float* dweight, float* dbias, TensorIn dout, TensorIn inp, TensorIn weight,
                       int N, int IC, int OC) override {
    check_gemm_inputs(inp, weight, "matmul_backward");
    check_gemm_dout(dout, "matmul_backward");
    cuda::matmul_backward(matmul_context(), dinp, dweight, dbias, dout, inp, weight, N, IC, OC);
  }
  void matmul_gelu_backward(TensorOut dinp, float* dweight, float* dbias, TensorOut dout, TensorIn pre, TensorIn inp,
                            TensorIn weight, int N, int IC, int OC) override {
    check_gemm_inputs(inp, weight, "matmul_gelu_backward");
    cuda::matmul_gelu_backward(matmul_context(), dinp, dweight, dbias, dout, pre, inp, weight, N, IC, OC);
  }
  void matmul_forward_transposed(TensorOut out, TensorIn inp, TensorIn wte, int N, int C, int V) override {
    check_gemm_inputs(inp, wte, "matmul_forward_transposed");
    check_gemm_output(out, nullptr, "matmul_forward_transposed");
    cuda::matmul_forward_transposed(matmul_context(), out, inp, wte, N, C, V);
  }
  void matmul_backward_transposed(TensorOut dinp, float* dwte, TensorIn dout, TensorIn inp, TensorIn wte, int N, int C,
                                  int V) override {
    check_gemm_inputs(inp, wte, "matmul_backward_transposed");
    check_gemm_dout(dout, "matmul_backward_transposed");
    cuda::matmul_backward_transposed(op_context(), dinp, dwte, dout, inp, wte, N, C, V);
  }
  using Backend::attention_backward;
  using Backend::attention_forward;
  void attention_forward(TensorOut out, float* lse, TensorIn qkv, int B, int T, int C, int NH,
                         const AttentionLayer& layer) override {
    check_attention_storage(qkv, out, C, NH, "attention_forward");
    check_attention_layer(layer, C, NH, "attention_forward");
    cuda::attention_forward(op_context(), out, lse, qkv, B, T, C, NH, attention_schedule(layer, C / NH, T));
  }
  void attention_backward(TensorOut dqkv, TensorIn dout, TensorIn qkv, TensorIn out, const float* lse, int B, int T,
                          int C, int NH, const AttentionLayer& layer) override {
    check_attention_storage(qkv, out, C, NH, "attention_backward");
    check_attention_layer(layer, C, NH, "attention_backward");
    check_attention_grad_storage(dqkv, dout, qkv, "attention_backward");
    cuda::attention_backward(op_context(), dqkv, dout, qkv, out, lse, B, T, C, NH,
                             attention_schedule(layer, C / NH, T));
  }

  // --- KV-cache inference ---
  void encoder_forward_positions(float* out, const int32_t* inp, const int32_t* pos, const float* wte, const float* wpe,
                                 int N, int C) override {
    launch_encoder_forward_positions(out, inp, pos, wte, wpe, N, C, op_context().stream);
  }
  using Backend::attention_kv_forward;
  using Backend::kv_cache_write;
  void kv_cache_write(float* k_cache, float* v_cache, const float* qkv, const int32_t* slot, const int32_t* pos, int N,
                      int C, int NH, const KvAttention& a) override {
    launch_kv_cache_write(k_cache, v_cache, qkv, slot, pos, N, C, NH, a, op_context().stream);
  }
  void attention_kv_forward(float* out, const float* qkv, const float* k_cache, const float* v_cache,
                            const int32_t* slot, const int32_t* pos, int N, int C, int NH,
                            const KvAttention& a) override {
    launch_attention_kv_forward(out, qkv, k_cache, v_cache, slot, pos, N, C, NH, a, op_context().stream);
  }

  // --- gelu ---
  void gelu_forward(TensorOut out, TensorIn inp, size_t n) override {
    launch_gelu_forward(out, inp, n, op_context().stream);
  }
  void gelu_backward(float* dinp, TensorIn inp, const float* dout, size_t n) override {
    launch_gelu_backward(dinp, inp, dout, n, op_context().stream);
  }

  // --- elementwise ---
  void add(float* out, const float* a, TensorIn b, size_t n) override { launch_add(out, a, b, n, op_context().stream); }
  void accumulate(float* dst, const float* src, size_t n) override {
    launch_accumulate(dst, src, n, op_context().stream);
  }
  void scale(float* x, float s, size_t n) override { launch_scale(x, s, n, op_context().stream); }
  void cast_to_bf16(BFloat16* out, const float* inp, size_t n) override {
    launch_cast_to_bf16(out, inp, n, op_context().stream);
  }

  // --- loss ---
  void crossentropy_forward(float* losses, TensorIn logits, const int32_t* targets, int N, int V, int ld) override {
    launch_crossentropy_forward(losses, logits, targets, N, V, ld, op_context().stream);
  }
  void crossentropy_backward(TensorOut dlogits, TensorIn logits, const int32_t* targets, float dloss, int N, int V,
                             int ld) override {
    launch_crossentropy_backward(dlogits, logits, targets, dloss, N, V, ld, op_context().stream);
  }
  void crossentropy_forward_backward(float* losses, TensorOut logits, const int32_t* targets, float dloss, int N, int V,
                                     int ld) override {
    launch_crossentropy_forward_backward(losses, logits, targets, dloss, N, V, ld, op_context().stream);
  }
  void softmax_forward(float* probs, const float* logits, float temperature, int N, int V) override {
    launch_softmax_forward(probs, logits, temperature, N, V, op_context().stream);
  }

  // --- optim (sum_squares reads its total back from the backend's own memory: in the derived class) ---
  void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr, float beta1, float beta2,
                    float eps, float weight_decay, int t, float grad_scale) override {
    cuda::adamw_update(op_context(), params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, t, grad_scale);
  }
  void adamw_update_segments(float* params, const float* grads, float* m, float* v, const AdamWSegment* segs,
                             size_t nseg, float lr, float beta1, float beta2, float eps, int t,
                             float grad_scale) override {
    cuda::adamw_update_segments(op_context(), params, grads, m, v, segs, nseg, lr, beta1, beta2, eps, t, grad_scale);
  }

  // --- int8 and fp8: the dense weights' copies (cuda_dispatch.h), and the GEMMs that read them ---
  void weights_changed() override { weight_copies_.changed(); }
  size_t quantized_weight_copy_bytes() const override { return weight_copies_.bytes(); }

 protected:
  // The stream, handles, scratch and device the ops run with.
  virtual OpContext op_context() = 0;
  // The device's compute capability, major part.
  virtual int compute_major() const = 0;

 private:
  // The dense layers' ops: op_context() with the quantized products' state.
  OpContext matmul_context() {
    OpContext ctx = op_context();
    ctx.quant = {&weight_copies_, int8_stochastic_rounding_ ? &dither_key_ : nullptr, int8_weight_gradient_,
                 fp8_scaling_, int8_lm_head_};
    return ctx;
  }
  WeightCopies weight_copies_;

  // A layer's schedule for the kernels, its rotary table (core/rope.h) uploaded once per base, head size and length.
  AttentionSchedule attention_schedule(const AttentionLayer& layer, int HS, int T) {
    AttentionSchedule s;
    s.window = layer.window, s.alibi_slope = layer.alibi_slope;
    if (layer.rope_theta == 0.0f) return s;
    const int half = HS / 2;
    if (rope_theta_ != layer.rope_theta || rope_half_ != half || rope_positions_ < T) {
      std::vector<float> host(2 * size_t(T) * half);
      rope_table(layer.rope_theta, half, 0, T, host.data(), host.data() + size_t(T) * half);
      rope_ = rope_table_memory(host.size());
      copy_to_device(rope_, host.data(), host.size() * sizeof(float));
      rope_theta_ = layer.rope_theta, rope_half_ = half, rope_positions_ = T;
    }
    s.rope_cos = rope_, s.rope_sin = rope_ + size_t(rope_positions_) * half;
    return s;
  }
  float* rope_ = nullptr;  // (rope_positions_, rope_half_) cos, then sin
  float rope_theta_ = 0.0f;
  int rope_half_ = 0, rope_positions_ = 0;
};

}  // namespace ember::cuda
