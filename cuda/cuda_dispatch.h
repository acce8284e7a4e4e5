// The CUDA backend's adapter decisions, as plain inline C++ over the launchers of cuda_ops.h: which attention kernels
// run (tensor cores, fp32, or fp32 on bf16 storage widened through scratch), how much scratch each op takes and in what
// blocks the bf16 dout casts go, the checks on AdamW segments, and which launcher each op calls with what.
// CudaBackend's op methods (cuda_op_methods.h) are these functions on the device; the kernel-model backend
// (tests/kernel_model) compiles the same launchers for the CPU and calls the same functions, so the paths the model
// tests are the paths the device takes, at the compute capability it emulates.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/backend.h"  // AdamWSegment
#include "core/dtype.h"
#include "core/error.h"
#include "cuda_ops.h"

namespace ember::cuda {

// The CUDA backend's sizes that decide an op's launches (the cost ledger's count-only backend takes the same):
// - the most scratch a matmul backward pass under bf16 takes for dout rounded to bf16 (cuda_ops.h): the dense
//   layers' dout fits whole at GPT-2 sizes (16K tokens x 3072 x 2 bytes is 96 MiB); the lm_head's (16K x 50304 x 2 =
//   1.6 GiB) goes in blocks of ~1300 rows;
// - the widest layer whose fp32 bias gradient cuBLASLt's epilogue writes (wider ones take the plain path).
inline constexpr size_t kDoutBlockBytes = size_t(128) << 20;
inline constexpr size_t kBiasGradCapacity = 65536;

// What the ops take from the backend that runs them, beyond their arguments.
class OpResources {
 public:
  // Scratch of at least `bytes` (256-byte aligned), reused across ops on the stream; no op argument lives in it.
  virtual void* scratch(size_t bytes) = 0;
  // `segs` (host memory) where the update kernel can read them, ordered after any update still queued.
  virtual const AdamWSegment* kernel_segments(const AdamWSegment* segs, size_t nseg) = 0;

 protected:
  ~OpResources() = default;
};

// The backend's state an op runs with.
struct OpContext {
  OpResources& resources;
  cudaStream_t stream;
  cublasHandle_t cublas;
  LtGemm* lt;        // cuBLASLt's fused bias epilogues; null: the bias and column-sum kernels instead
  float* bias_grad;  // (bias_grad_capacity) the bias gradient cuBLASLt's epilogue writes
  size_t bias_grad_capacity;
  size_t dout_block_bytes;  // the most scratch a bf16 backward pass takes for dout rounded to bf16
  int compute_major;        // the device's compute capability, major part
  MatmulPrecision precision;

  bool bf16() const { return precision == MatmulPrecision::bf16; }
  void* scratch(size_t bytes) const { return bytes ? resources.scratch(bytes) : nullptr; }
};

// --- encoder ---
inline void encoder_backward(const OpContext& ctx, float* dwte,  // (V, C) +=
                             float* dwpe,                        // (maxT, C) +=
                             const float* dout,                  // (B, T, C)
                             const int32_t* inp,                 // (B, T)
                             int B, int T, int C) {
  const size_t bytes = encoder_backward_scratch_bytes(B * T);
  launch_encoder_backward(dwte, dwpe, dout, inp, B, T, C, ctx.scratch(bytes), bytes, ctx.stream);
}

// --- layernorm ---
inline void layernorm_backward(const OpContext& ctx, float* dinp,  // (N, C) +=
                               float* dweight,                     // (C) +=
                               float* dbias,                       // (C) +=
                               TensorIn dout,                      // (N, C)
                               const float* inp,                   // (N, C)
                               const float* weight,                // (C)
                               const float* mean,                  // (N)
                               const float* rstd,                  // (N)
                               int N, int C) {
  auto* partial = static_cast<float*>(ctx.scratch(sizeof(float) * layernorm_backward_scratch_floats(N, C)));
  launch_layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, partial, ctx.stream);
}

// --- attention ---
enum class AttentionPath {
  tensor_core,   // the bf16 tensor-core kernels: attention_in_bf16 (core/dtype.h) on sm_80 or newer
  fp32,          // the fp32 kernels on fp32-stored qkv and out
  fp32_widened,  // before sm_80, bf16-stored qkv and out: the fp32 kernels on copies widened into fp32 scratch
};

inline AttentionPath attention_path(int compute_major, MatmulPrecision p, int C, int NH, bool bf16_storage) {
  if (compute_major >= 8 && NH > 0 && C % NH == 0 && attention_in_bf16(p, C / NH)) return AttentionPath::tensor_core;
  return bf16_storage ? AttentionPath::fp32_widened : AttentionPath::fp32;
}

// Scratch floats: forward, out (B, T, C) then qkv (B, T, 3C) widened; backward, the row sums D (B, NH, T), then out
// and qkv widened, then dout (B, T, C) widened where it is stored in bf16.
inline size_t attention_forward_scratch_floats(AttentionPath path, int B, int T, int C) {
  return path == AttentionPath::fp32_widened ? 4 * size_t(B) * T * C : 0;
}
inline size_t attention_backward_scratch_floats(AttentionPath path, int B, int T, int C, int NH) {
  const size_t widened = path == AttentionPath::fp32_widened ? 5 * size_t(B) * T * C : 0;
  return size_t(B) * NH * T + widened;
}

inline void attention_forward(const OpContext& ctx, TensorOut out,  // (B, T, C)
                              float* lse,                           // (B, NH, T)
                              TensorIn qkv,                         // (B, T, 3C)
                              int B, int T, int C, int NH) {
  const AttentionPath path = attention_path(ctx.compute_major, ctx.precision, C, NH, out.bf16);
  if (path == AttentionPath::tensor_core) {
    launch_attention_forward_tc(out, lse, qkv, B, T, C, NH, ctx.stream);
  } else if (path == AttentionPath::fp32) {
    launch_attention_forward(out.f32(), lse, qkv.f32(), B, T, C, NH, ctx.stream);
  } else {
    const size_t n = size_t(B) * T * C;
    float* out32 = static_cast<float*>(ctx.scratch(sizeof(float) * attention_forward_scratch_floats(path, B, T, C)));
    float* qkv32 = out32 + n;
    launch_widen_bf16(qkv32, qkv.b16(), 3 * n, ctx.stream);
    launch_attention_forward(out32, lse, qkv32, B, T, C, NH, ctx.stream);
    launch_cast_to_bf16(out.b16(), out32, n, ctx.stream);
  }
}

inline void attention_backward(const OpContext& ctx, TensorOut dqkv,  // (B, T, 3C) =
                               TensorIn dout,                         // (B, T, C)
                               TensorIn qkv,                          // (B, T, 3C)
                               TensorIn out,                          // (B, T, C)
                               const float* lse,                      // (B, NH, T)
                               int B, int T, int C, int NH) {
  const AttentionPath path = attention_path(ctx.compute_major, ctx.precision, C, NH, out.bf16);
  const size_t nd = size_t(B) * NH * T, n = size_t(B) * T * C;
  float* delta = static_cast<float*>(ctx.scratch(sizeof(float) * attention_backward_scratch_floats(path, B, T, C, NH)));
  if (path == AttentionPath::tensor_core) {
    launch_attention_backward_tc(dqkv, delta, dout, qkv, out, lse, B, T, C, NH, ctx.stream);
  } else if (path == AttentionPath::fp32) {
    launch_attention_backward(dqkv, delta, dout.f32(), qkv.f32(), out.f32(), lse, B, T, C, NH, ctx.stream);
  } else {
    float *out32 = delta + nd, *qkv32 = out32 + n, *dout32 = qkv32 + 3 * n;
    launch_widen_bf16(out32, out.b16(), n, ctx.stream);
    launch_widen_bf16(qkv32, qkv.b16(), 3 * n, ctx.stream);
    if (dout.bf16) launch_widen_bf16(dout32, dout.b16(), n, ctx.stream);
    launch_attention_backward(dqkv, delta, dout.bf16 ? dout32 : dout.f32(), qkv32, out32, lse, B, T, C, NH, ctx.stream);
  }
}

// --- matmul ---
// Scratch bytes of each matmul op (matmul_scratch_bytes, cuda_ops.h): under bf16, fp32-stored inputs rounded, and in
// the backward passes dout rounded in blocks of rows within ctx.dout_block_bytes (none for a bf16-stored dout);
// dbias's partial column sums.
inline size_t matmul_forward_scratch_bytes(const OpContext& ctx, TensorIn inp, int N, int IC, int OC) {
  return matmul_scratch_bytes(ctx.bf16(), inp, size_t(N) * IC, size_t(IC) * OC, N, 0, false, false, 0);
}
inline size_t matmul_backward_scratch_bytes(const OpContext& ctx, TensorIn dout, TensorIn inp, bool dbias, int N,
                                            int IC, int OC) {
  return matmul_scratch_bytes(ctx.bf16(), inp, size_t(N) * IC, size_t(IC) * OC, N, OC, dout.bf16, dbias,
                              ctx.dout_block_bytes);
}
inline size_t matmul_forward_transposed_scratch_bytes(const OpContext& ctx, TensorIn inp, int N, int C, int V) {
  return matmul_scratch_bytes(ctx.bf16(), inp, size_t(N) * C, size_t(V) * C, N, 0, false, false, 0);
}
inline size_t matmul_backward_transposed_scratch_bytes(const OpContext& ctx, TensorIn dout, TensorIn inp, int N, int C,
                                                       int V) {
  return matmul_scratch_bytes(ctx.bf16(), inp, size_t(N) * C, size_t(V) * C, N, V, dout.bf16, false,
                              ctx.dout_block_bytes);
}

inline void matmul_forward(const OpContext& ctx, TensorOut out,  // (N, OC)
                           TensorIn inp,                         // (N, IC)
                           TensorIn weight,                      // (IC, OC)
                           TensorIn bias,                        // (OC) or null
                           int N, int IC, int OC) {
  const size_t bytes = matmul_forward_scratch_bytes(ctx, inp, N, IC, OC);
  launch_matmul_forward(out, inp, weight, bias, N, IC, OC, ctx.bf16(), ctx.cublas, ctx.lt, ctx.scratch(bytes), bytes,
                        ctx.stream);
}

inline void matmul_backward(const OpContext& ctx, TensorOut dinp,  // (N, IC) =
                            float* dweight,                        // (IC, OC) +=
                            float* dbias,                          // (OC) += or null
                            TensorIn dout,                         // (N, OC)
                            TensorIn inp,                          // (N, IC)
                            TensorIn weight,                       // (IC, OC)
                            int N, int IC, int OC) {
  const size_t bytes = matmul_backward_scratch_bytes(ctx, dout, inp, dbias != nullptr, N, IC, OC);
  launch_matmul_backward(dinp, dweight, dbias, dout, nullptr, inp, weight, N, IC, OC, ctx.bf16(), ctx.cublas, ctx.lt,
                         ctx.bias_grad, ctx.bias_grad_capacity, ctx.scratch(bytes), bytes, ctx.stream);
}

// Backend::matmul_gelu_backward: under bf16 with a dbias, the GELU's derivative is applied in the pass that casts dout
// (fp32 or bf16) and sums dbias; otherwise gelu_backward runs in place over an fp32 dout first (fp32 has no such pass
// to fuse into; a bf16-stored dout without a dbias is refused).
inline void matmul_gelu_backward(const OpContext& ctx, TensorOut dinp,  // (N, IC) =
                                 float* dweight,                        // (IC, OC) +=
                                 float* dbias,                          // (OC) += or null
                                 TensorOut dout,                        // (N, OC) at the GELU's output; clobbered
                                 TensorIn pre,                          // (N, OC) the GELU's input
                                 TensorIn inp,                          // (N, IC)
                                 TensorIn weight,                       // (IC, OC)
                                 int N, int IC, int OC) {
  const bool fused = ctx.bf16() && dbias != nullptr;
  EMBER_ASSERT(fused || !dout.bf16, "matmul_gelu_backward: a bf16-stored dout needs a dbias on the CUDA backend");
  if (!fused) launch_gelu_backward(dout.f32(), pre, dout.f32(), size_t(N) * OC, ctx.stream);
  // The fused pass rounds dout into scratch blocks whatever its storage.
  const size_t bytes = matmul_scratch_bytes(ctx.bf16(), inp, size_t(N) * IC, size_t(IC) * OC, N, OC, false,
                                            dbias != nullptr, ctx.dout_block_bytes);
  launch_matmul_backward(dinp, dweight, dbias, dout, fused ? pre : nullptr, inp, weight, N, IC, OC, ctx.bf16(),
                         ctx.cublas, ctx.lt, ctx.bias_grad, ctx.bias_grad_capacity, ctx.scratch(bytes), bytes,
                         ctx.stream);
}

inline void matmul_forward_transposed(const OpContext& ctx, TensorOut out,  // (N, V)
                                      TensorIn inp,                         // (N, C)
                                      TensorIn wte,                         // (V, C)
                                      int N, int C, int V) {
  const size_t bytes = matmul_forward_transposed_scratch_bytes(ctx, inp, N, C, V);
  launch_matmul_forward_transposed(out, inp, wte, N, C, V, ctx.bf16(), ctx.cublas, ctx.scratch(bytes), bytes,
                                   ctx.stream);
}

inline void matmul_backward_transposed(const OpContext& ctx, TensorOut dinp,  // (N, C) =
                                       float* dwte,                           // (V, C) +=
                                       TensorIn dout,                         // (N, V)
                                       TensorIn inp,                          // (N, C)
                                       TensorIn wte,                          // (V, C)
                                       int N, int C, int V) {
  const size_t bytes = matmul_backward_transposed_scratch_bytes(ctx, dout, inp, N, C, V);
  launch_matmul_backward_transposed(dinp, dwte, dout, inp, wte, N, C, V, ctx.bf16(), ctx.cublas, ctx.scratch(bytes),
                                    bytes, ctx.stream);
}

// --- optim ---
inline void adamw_update(const OpContext& ctx, float* params,  // (n)
                         const float* grads,                   // (n)
                         float* m,                             // (n)
                         float* v,                             // (n)
                         size_t n, float lr, float beta1, float beta2, float eps, float weight_decay, int t,
                         float grad_scale) {
  EMBER_ASSERT(t >= 1, "adamw_update: the step t is 1-based");
  launch_adamw_update(params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, adamw_inv_bias_correction(beta1, t),
                      adamw_inv_bias_correction(beta2, t), grad_scale, ctx.stream);
}

// The elements the segments span, from the first one's begin to the last one's end, once they are checked: ascending,
// not overlapping, and few enough for the kernel's int count.
inline size_t adamw_segments_span(const AdamWSegment* segs, size_t nseg) {
  for (size_t k = 0; k < nseg; ++k)
    EMBER_ASSERT(segs[k].begin <= segs[k].end && (k == 0 || segs[k - 1].end <= segs[k].begin),
                 "adamw_update_segments: segments must be ascending and must not overlap");
  EMBER_ASSERT(nseg <= size_t(INT32_MAX), "adamw_update_segments: too many segments");
  return nseg ? segs[nseg - 1].end - segs[0].begin : 0;
}

inline void adamw_update_segments(const OpContext& ctx, float* params, const float* grads, float* m, float* v,
                                  const AdamWSegment* segs,  // (nseg), host memory
                                  size_t nseg, float lr, float beta1, float beta2, float eps, int t, float grad_scale) {
  EMBER_ASSERT(t >= 1, "adamw_update_segments: the step t is 1-based");
  if (nseg == 0) return;
  const size_t span = adamw_segments_span(segs, nseg);
  launch_adamw_update_segments(params, grads, m, v, ctx.resources.kernel_segments(segs, nseg), int(nseg), span, lr,
                               beta1, beta2, eps, adamw_inv_bias_correction(beta1, t),
                               adamw_inv_bias_correction(beta2, t), grad_scale, ctx.stream);
}

}  // namespace ember::cuda
