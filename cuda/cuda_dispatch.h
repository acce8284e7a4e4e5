// The CUDA backend's adapter decisions, as plain inline C++ over the launchers of cuda_ops.h: which attention kernels
// run (tensor cores, fp32, or fp32 on bf16 storage widened through scratch), how much scratch each op takes and in what
// blocks the bf16 dout casts go, the checks on AdamW segments, and which launcher each op calls with what.
// CudaBackend's op methods (cuda_op_methods.h) are these functions on the device; the kernel-model backend
// (tests/kernel_model) compiles the same launchers for the CPU and calls the same functions, so the paths the model
// tests are the paths the device takes, at the compute capability it emulates.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <tuple>

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
  // Memory of at least `bytes` (256-byte aligned) for the weights' quantized copies (Int8WeightCopies): it keeps its
  // contents while it does not grow; when it grows it is new memory (the old released after the ops queued on it).
  virtual char* weight_copy_memory(size_t bytes) = 0;
  // Memory of at least `floats` floats for the attention's rotary table; new memory when it grows.
  virtual float* rope_table_memory(size_t floats) = 0;

 protected:
  ~OpResources() = default;
};

// The dense weights' quantized copies (cuda_ops.h's Int8WeightCopy and Fp8WeightCopy), known by the weight's address,
// its shape and the copy's kind, each made by the first product that reads it after Backend::weights_changed (once
// per step however many micro-batches read it), in one block of weight_copy_memory: a copy that does not fit grows
// the block, which drops every copy made in the old one (they are made again as they are read, from the same masters).
class WeightCopies {
 public:
  enum class Kind { int8_forward, int8_backward, fp8 };
  Int8WeightCopy int8(OpResources& resources, TensorIn weight, int IC, int OC, bool forward, cudaStream_t stream) {
    bool make = false;
    char* at = get(resources, weight, IC, OC, forward ? Kind::int8_forward : Kind::int8_backward, &make);
    const Int8WeightCopy copy = int8_weight_copy_at(at, IC, OC, forward);
    if (make) launch_int8_weight_copy(copy, weight, IC, OC, forward, stream);
    return copy;
  }
  Fp8WeightCopy fp8(OpResources& resources, TensorIn weight, int IC, int OC, bool scaled, cudaStream_t stream) {
    bool make = false;
    char* at = get(resources, weight, IC, OC, Kind::fp8, &make);
    const Fp8WeightCopy copy = fp8_weight_copy_at(at, IC, OC);
    if (make) launch_fp8_weight_copy(copy, weight, IC, OC, scaled, stream);
    return copy;
  }
  void changed() {
    for (auto& [key, e] : entries_) e.current = false;
  }
  size_t bytes() const { return used_; }

 private:
  // The copy's memory; *make: whether it must be made (it is current from here on).
  char* get(OpResources& resources, TensorIn weight, int IC, int OC, Kind kind, bool* make) {
    Entry& e = entries_[Key{weight.ptr, IC, OC, kind}];
    if (e.bytes == 0) {
      e.offset = used_;
      e.bytes = kind == Kind::fp8 ? fp8_weight_copy_bytes(IC, OC)
                                  : int8_weight_copy_bytes(IC, OC, kind == Kind::int8_forward);
      used_ += e.bytes;
    }
    if (used_ > capacity_ || !base_) {  // new memory: every copy in the old block is gone
      capacity_ = std::max(used_, 2 * capacity_);
      base_ = resources.weight_copy_memory(capacity_);
      changed();
    }
    *make = !e.current;
    e.current = true;
    return base_ + e.offset;
  }
  struct Key {
    const void* weight;
    int IC, OC;
    Kind kind;
    bool operator<(const Key& o) const {
      return std::tie(weight, IC, OC, kind) < std::tie(o.weight, o.IC, o.OC, o.kind);
    }
  };
  struct Entry {
    size_t offset = 0, bytes = 0;
    bool current = false;
  };
  std::map<Key, Entry> entries_;
  size_t used_ = 0, capacity_ = 0;
  char* base_ = nullptr;
};

// What the int8 and fp8 products take beyond the OpContext's resources: the weights' copies, the dither key of the
// next int8 backward pass (null: to nearest), whether int8 weight gradients are int8 too and whether fp8 scales its
// tensors (backend.h).
struct QuantState {
  WeightCopies* copies = nullptr;
  const DitherKey* dither = nullptr;
  bool int8_weight_gradient = false;
  bool fp8_scaling = true;
  bool int8_lm_head = false;
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
  QuantState quant{};  // under int8 and fp8, set by the op methods

  // bf16 products: under bf16, and under int8 and fp8 for every product but the dense layers' quantized ones.
  bool bf16() const { return gemm_inputs_in_bf16(precision); }
  bool int8_products() const { return precision == MatmulPrecision::int8; }
  bool fp8_products() const { return precision == MatmulPrecision::fp8; }
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
                              int B, int T, int C, int NH, const AttentionSchedule& sch) {
  const AttentionPath path = attention_path(ctx.compute_major, ctx.precision, C, NH, out.bf16);
  if (path == AttentionPath::tensor_core) {
    launch_attention_forward_tc(out, lse, qkv, B, T, C, NH, sch, ctx.stream);
  } else if (path == AttentionPath::fp32) {
    launch_attention_forward(out.f32(), lse, qkv.f32(), B, T, C, NH, sch, ctx.stream);
  } else {
    const size_t n = size_t(B) * T * C;
    float* out32 = static_cast<float*>(ctx.scratch(sizeof(float) * attention_forward_scratch_floats(path, B, T, C)));
    float* qkv32 = out32 + n;
    launch_widen_bf16(qkv32, qkv.b16(), 3 * n, ctx.stream);
    launch_attention_forward(out32, lse, qkv32, B, T, C, NH, sch, ctx.stream);
    launch_cast_to_bf16(out.b16(), out32, n, ctx.stream);
  }
}

inline void attention_backward(const OpContext& ctx, TensorOut dqkv,  // (B, T, 3C) =
                               TensorIn dout,                         // (B, T, C)
                               TensorIn qkv,                          // (B, T, 3C)
                               TensorIn out,                          // (B, T, C)
                               const float* lse,                      // (B, NH, T)
                               int B, int T, int C, int NH, const AttentionSchedule& sch) {
  const AttentionPath path = attention_path(ctx.compute_major, ctx.precision, C, NH, out.bf16);
  const size_t nd = size_t(B) * NH * T, n = size_t(B) * T * C;
  float* delta = static_cast<float*>(ctx.scratch(sizeof(float) * attention_backward_scratch_floats(path, B, T, C, NH)));
  if (path == AttentionPath::tensor_core) {
    launch_attention_backward_tc(dqkv, delta, dout, qkv, out, lse, B, T, C, NH, sch, ctx.stream);
  } else if (path == AttentionPath::fp32) {
    launch_attention_backward(dqkv, delta, dout.f32(), qkv.f32(), out.f32(), lse, B, T, C, NH, sch, ctx.stream);
  } else {
    float *out32 = delta + nd, *qkv32 = out32 + n, *dout32 = qkv32 + 3 * n;
    launch_widen_bf16(out32, out.b16(), n, ctx.stream);
    launch_widen_bf16(qkv32, qkv.b16(), 3 * n, ctx.stream);
    if (dout.bf16) launch_widen_bf16(dout32, dout.b16(), n, ctx.stream);
    launch_attention_backward(dqkv, delta, dout.bf16 ? dout32 : dout.f32(), qkv32, out32, lse, B, T, C, NH, sch,
                              ctx.stream);
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
  if (ctx.int8_products()) {
    const Int8WeightCopy w = ctx.quant.copies->int8(ctx.resources, weight, IC, OC, true, ctx.stream);
    const bool fused = int8_products_fused(ctx.compute_major);
    const size_t bytes = matmul_int8_forward_scratch_bytes(N, IC, OC, fused);
    launch_matmul_forward_int8(out, inp, w, bias, N, IC, OC, fused, ctx.cublas, ctx.scratch(bytes), bytes, ctx.stream);
    return;
  }
  if (ctx.fp8_products()) {
    const Fp8WeightCopy w = ctx.quant.copies->fp8(ctx.resources, weight, IC, OC, ctx.quant.fp8_scaling, ctx.stream);
    const size_t bytes = matmul_fp8_forward_scratch_bytes(N, IC, OC);
    launch_matmul_forward_fp8(out, inp, w, bias, N, IC, OC, ctx.quant.fp8_scaling, ctx.lt, ctx.scratch(bytes), bytes,
                              ctx.stream);
    return;
  }
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
  if (ctx.int8_products()) {
    const Int8WeightCopy w = ctx.quant.copies->int8(ctx.resources, weight, IC, OC, false, ctx.stream);
    const bool fused = int8_products_fused(ctx.compute_major);
    const size_t bytes = matmul_int8_backward_scratch_bytes(dout, inp, dbias != nullptr, ctx.quant.int8_weight_gradient,
                                                            N, IC, OC, fused, ctx.dout_block_bytes);
    launch_matmul_backward_int8(dinp, dweight, dbias, dout, inp, w, N, IC, OC, ctx.quant.dither,
                                ctx.quant.int8_weight_gradient, fused, ctx.cublas, ctx.lt, ctx.bias_grad,
                                ctx.bias_grad_capacity, ctx.scratch(bytes), bytes, ctx.stream);
    return;
  }
  if (ctx.fp8_products()) {
    const Fp8WeightCopy w = ctx.quant.copies->fp8(ctx.resources, weight, IC, OC, ctx.quant.fp8_scaling, ctx.stream);
    const size_t bytes = matmul_fp8_backward_scratch_bytes(dbias != nullptr, N, IC, OC);
    launch_matmul_backward_fp8(dinp, dweight, dbias, dout, inp, w, N, IC, OC, ctx.quant.fp8_scaling, ctx.lt,
                               ctx.scratch(bytes), bytes, ctx.stream);
    return;
  }
  const size_t bytes = matmul_backward_scratch_bytes(ctx, dout, inp, dbias != nullptr, N, IC, OC);
  launch_matmul_backward(dinp, dweight, dbias, dout, nullptr, inp, weight, N, IC, OC, ctx.bf16(), ctx.cublas, ctx.lt,
                         ctx.bias_grad, ctx.bias_grad_capacity, ctx.scratch(bytes), bytes, ctx.stream);
}

// Backend::matmul_gelu_backward: under bf16 with a dbias, the GELU's derivative is applied in the pass that casts dout
// (fp32 or bf16) and sums dbias; otherwise gelu_backward runs in place over an fp32 dout first (fp32 has no such pass
// to fuse into; a bf16-stored dout without a dbias is refused). Under int8 and fp8 the gradient is formed in fp32
// first (a bf16-stored dout widened into scratch), as on the CPU, and the quantized backward pass takes it.
inline void matmul_gelu_backward(const OpContext& ctx, TensorOut dinp,  // (N, IC) =
                                 float* dweight,                        // (IC, OC) +=
                                 float* dbias,                          // (OC) += or null
                                 TensorOut dout,                        // (N, OC) at the GELU's output; clobbered
                                 TensorIn pre,                          // (N, OC) the GELU's input
                                 TensorIn inp,                          // (N, IC)
                                 TensorIn weight,                       // (IC, OC)
                                 int N, int IC, int OC) {
  if (ctx.int8_products() || ctx.fp8_products()) {
    // The gradient in fp32: over dout itself, or over dout widened into the front of the scratch (the backward pass's
    // own scratch then follows it, taken with an offset by the same scratch call).
    const size_t n = size_t(N) * OC, widened = dout.bf16 ? piece_bytes(n * sizeof(float)) : 0;
    const bool fused = int8_products_fused(ctx.compute_major);
    const size_t rest = ctx.int8_products() ? matmul_int8_backward_scratch_bytes(dout.f32(), inp, dbias != nullptr,
                                                                                 ctx.quant.int8_weight_gradient, N, IC,
                                                                                 OC, fused, ctx.dout_block_bytes)
                                            : matmul_fp8_backward_scratch_bytes(dbias != nullptr, N, IC, OC);
    char* scratch = static_cast<char*>(ctx.scratch(widened + rest));
    float* g = dout.bf16 ? reinterpret_cast<float*>(scratch) : dout.f32();
    if (dout.bf16) launch_widen_bf16(g, dout.b16(), n, ctx.stream);
    launch_gelu_backward(g, pre, g, n, ctx.stream);
    if (ctx.int8_products())
      launch_matmul_backward_int8(dinp, dweight, dbias, g, inp,
                                  ctx.quant.copies->int8(ctx.resources, weight, IC, OC, false, ctx.stream), N, IC, OC,
                                  ctx.quant.dither, ctx.quant.int8_weight_gradient, fused, ctx.cublas, ctx.lt,
                                  ctx.bias_grad, ctx.bias_grad_capacity, scratch + widened, rest, ctx.stream);
    else
      launch_matmul_backward_fp8(
          dinp, dweight, dbias, g, inp,
          ctx.quant.copies->fp8(ctx.resources, weight, IC, OC, ctx.quant.fp8_scaling, ctx.stream), N, IC, OC,
          ctx.quant.fp8_scaling, ctx.lt, scratch + widened, rest, ctx.stream);
    return;
  }
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
  if (ctx.int8_products() && ctx.quant.int8_lm_head) {  // wte (V, C) per row is the forward product's copy layout
    const Int8WeightCopy w = ctx.quant.copies->int8(ctx.resources, wte, V, C, false, ctx.stream);
    const bool fused = int8_products_fused(ctx.compute_major);
    const size_t bytes = matmul_int8_forward_scratch_bytes(N, C, V, fused);
    launch_matmul_forward_int8(out, inp, w, nullptr, N, C, V, fused, ctx.cublas, ctx.scratch(bytes), bytes, ctx.stream);
    return;
  }
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
