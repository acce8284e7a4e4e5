// CUDA backend: the Backend op methods, each handing its arguments to the launcher of its op family (cuda_<family>.cu)
// with the backend's stream and scratch.
#include <algorithm>
#include <cmath>

#include "core/dtype.h"
#include "core/error.h"
#include "cuda_backend.h"
#include "cuda_check.h"
#include "cuda_ops.h"

namespace ember {

// --- encoder ---
void CudaBackend::encoder_forward(float* out,          // (B, T, C)
                                  const int32_t* inp,  // (B, T)
                                  const float* wte,    // (V, C)
                                  const float* wpe,    // (maxT, C)
                                  int B, int T, int C) {
  cuda::launch_encoder_forward(out, inp, wte, wpe, B, T, C, stream_);
}

void CudaBackend::encoder_backward(float* dwte,         // (V, C) +=
                                   float* dwpe,         // (maxT, C) +=
                                   const float* dout,   // (B, T, C)
                                   const int32_t* inp,  // (B, T)
                                   int B, int T, int C) {
  cuda::launch_encoder_backward(dwte, dwpe, dout, inp, B, T, C, stream_);
}

// --- layernorm ---
void CudaBackend::layernorm_forward(TensorOut out,        // (N, C)
                                    float* mean,          // (N)
                                    float* rstd,          // (N)
                                    const float* inp,     // (N, C)
                                    const float* weight,  // (C)
                                    const float* bias,    // (C)
                                    int N, int C) {
  cuda::launch_layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, stream_);
}

void CudaBackend::residual_layernorm_forward(float* residual,      // (N, C)
                                             TensorOut out,        // (N, C)
                                             float* mean,          // (N)
                                             float* rstd,          // (N)
                                             const float* a,       // (N, C)
                                             const float* b,       // (N, C)
                                             const float* weight,  // (C)
                                             const float* bias,    // (C)
                                             int N, int C) {
  cuda::launch_residual_layernorm_forward(residual, out, mean, rstd, a, b, weight, bias, N, C, stream_);
}

void CudaBackend::layernorm_backward(float* dinp,          // (N, C) +=
                                     float* dweight,       // (C) +=
                                     float* dbias,         // (C) +=
                                     const float* dout,    // (N, C)
                                     const float* inp,     // (N, C)
                                     const float* weight,  // (C)
                                     const float* mean,    // (N)
                                     const float* rstd,    // (N)
                                     int N, int C) {
  cuda::launch_layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, stream_);
}

// --- gelu ---
void CudaBackend::gelu_forward(TensorOut out, TensorIn inp, size_t n) {  // (n)
  cuda::launch_gelu_forward(out, inp, n, stream_);
}
void CudaBackend::gelu_backward(float* dinp, TensorIn inp, const float* dout, size_t n) {  // (n) +=
  cuda::launch_gelu_backward(dinp, inp, dout, n, stream_);
}

// --- loss ---
void CudaBackend::crossentropy_forward(float* losses,           // (N)
                                       TensorIn logits,         // (N, V)
                                       const int32_t* targets,  // (N)
                                       int N, int V) {
  cuda::launch_crossentropy_forward(losses, logits, targets, N, V, stream_);
}

void CudaBackend::crossentropy_backward(TensorOut dlogits,       // (N, V), may alias logits
                                        TensorIn logits,         // (N, V)
                                        const int32_t* targets,  // (N)
                                        float dloss, int N, int V) {
  cuda::launch_crossentropy_backward(dlogits, logits, targets, dloss, N, V, stream_);
}

void CudaBackend::softmax_forward(float* probs,         // (N, V)
                                  const float* logits,  // (N, V)
                                  float temperature, int N, int V) {
  cuda::launch_softmax_forward(probs, logits, temperature, N, V, stream_);
}

// --- optim ---
double CudaBackend::sum_squares(const float* x,  // (n)
                                size_t n) {
  cuda::launch_sum_squares(reduce_, x, n, stream_);
  double total = 0.0;
  EMBER_CUDA_CHECK(
      cudaMemcpyAsync(&total, reduce_ + cuda::kSumSquaresBlocks, sizeof(double), cudaMemcpyDeviceToHost, stream_));
  EMBER_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return total;
}

void CudaBackend::adamw_update(float* params,       // (n)
                               const float* grads,  // (n)
                               float* m,            // (n)
                               float* v,            // (n)
                               size_t n, float lr, float beta1, float beta2, float eps, float weight_decay, int t) {
  EMBER_ASSERT(t >= 1, "adamw_update: the step t is 1-based");
  cuda::launch_adamw_update(params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay,
                            cuda::adamw_inv_bias_correction(beta1, t), cuda::adamw_inv_bias_correction(beta2, t),
                            stream_);
}

void CudaBackend::adamw_update_segments(float* params, const float* grads, float* m, float* v, const AdamWSegment* segs,
                                        size_t nseg, float lr, float beta1, float beta2, float eps, int t) {
  EMBER_ASSERT(t >= 1, "adamw_update_segments: the step t is 1-based");
  if (nseg == 0) return;
  for (size_t k = 0; k < nseg; ++k)
    EMBER_ASSERT(segs[k].begin <= segs[k].end && (k == 0 || segs[k - 1].end <= segs[k].begin),
                 "adamw_update_segments: segments must be ascending and must not overlap");
  EMBER_ASSERT(nseg <= size_t(INT32_MAX), "adamw_update_segments: too many segments");
  if (nseg > segments_capacity_) {
    EMBER_CUDA_CHECK(cudaStreamSynchronize(stream_));  // a queued update may still read the old copy
    track_free(segments_);
    EMBER_CUDA_CHECK(cudaFree(segments_));
    segments_ = nullptr;
    segments_capacity_ = 0;
    EMBER_CUDA_CHECK(cudaMalloc(&segments_, nseg * sizeof(AdamWSegment)));
    track_alloc(segments_, nseg * sizeof(AdamWSegment));
    segments_capacity_ = nseg;
  }
  // From pageable memory the copy has read segs when it returns; stream order puts it after any update still queued.
  EMBER_CUDA_CHECK(cudaMemcpyAsync(segments_, segs, nseg * sizeof(AdamWSegment), cudaMemcpyHostToDevice, stream_));
  cuda::launch_adamw_update_segments(params, grads, m, v, segments_, int(nseg), segs[nseg - 1].end - segs[0].begin, lr,
                                     beta1, beta2, eps, cuda::adamw_inv_bias_correction(beta1, t),
                                     cuda::adamw_inv_bias_correction(beta2, t), stream_);
}

// --- elementwise ---
void CudaBackend::add(float* out, const float* a, const float* b, size_t n) { cuda::launch_add(out, a, b, n, stream_); }
void CudaBackend::accumulate(float* dst, const float* src, size_t n) { cuda::launch_accumulate(dst, src, n, stream_); }
void CudaBackend::scale(float* x, float s, size_t n) { cuda::launch_scale(x, s, n, stream_); }
void CudaBackend::cast_to_bf16(BFloat16* out, const float* inp, size_t n) {
  cuda::launch_cast_to_bf16(out, inp, n, stream_);
}

// --- matmul ---
void CudaBackend::matmul_forward(TensorOut out,    // (N, OC)
                                 TensorIn inp,     // (N, IC)
                                 TensorIn weight,  // (IC, OC)
                                 TensorIn bias,    // (OC) or null
                                 int N, int IC, int OC) {
  check_gemm_inputs(inp, weight, "matmul_forward");
  check_gemm_output(out, bias, "matmul_forward");
  const size_t bytes = cuda::matmul_scratch_bytes(bf16(), inp, size_t(N) * IC, size_t(IC) * OC, N, 0, false, 0);
  cuda::launch_matmul_forward(out, inp, weight, bias, N, IC, OC, bf16(), cublas_, lt_.get(),
                              bytes ? scratch(bytes) : nullptr, bytes, stream_);
}

void CudaBackend::matmul_backward(float* dinp,        // (N, IC) +=
                                  float* dweight,     // (IC, OC) +=
                                  float* dbias,       // (OC) += or null
                                  const float* dout,  // (N, OC)
                                  TensorIn inp,       // (N, IC)
                                  TensorIn weight,    // (IC, OC)
                                  int N, int IC, int OC) {
  check_gemm_inputs(inp, weight, "matmul_backward");
  const size_t bytes =
      cuda::matmul_scratch_bytes(bf16(), inp, size_t(N) * IC, size_t(IC) * OC, N, OC, dbias, kDoutBlockBytes);
  cuda::launch_matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, IC, OC, bf16(), cublas_, lt_.get(),
                               bias_grad_, kBiasGradCapacity, bytes ? scratch(bytes) : nullptr, bytes, stream_);
}

void CudaBackend::matmul_forward_transposed(TensorOut out,  // (N, V)
                                            TensorIn inp,   // (N, C)
                                            TensorIn wte,   // (V, C)
                                            int N, int C, int V) {
  check_gemm_inputs(inp, wte, "matmul_forward_transposed");
  check_gemm_output(out, nullptr, "matmul_forward_transposed");
  const size_t bytes = cuda::matmul_scratch_bytes(bf16(), inp, size_t(N) * C, size_t(V) * C, N, 0, false, 0);
  cuda::launch_matmul_forward_transposed(out, inp, wte, N, C, V, bf16(), cublas_, bytes ? scratch(bytes) : nullptr,
                                         bytes, stream_);
}

void CudaBackend::matmul_backward_transposed(float* dinp,    // (N, C) +=
                                             float* dwte,    // (V, C) +=
                                             TensorIn dout,  // (N, V)
                                             TensorIn inp,   // (N, C)
                                             TensorIn wte,   // (V, C)
                                             int N, int C, int V) {
  check_gemm_inputs(inp, wte, "matmul_backward_transposed");
  check_gemm_dout(dout, "matmul_backward_transposed");
  const size_t bytes = cuda::matmul_scratch_bytes(bf16(), inp, size_t(N) * C, size_t(V) * C, N, dout.bf16 ? 0 : V,
                                                  false, kDoutBlockBytes);
  cuda::launch_matmul_backward_transposed(dinp, dwte, dout, inp, wte, N, C, V, bf16(), cublas_,
                                          bytes ? scratch(bytes) : nullptr, bytes, stream_);
}

// --- attention ---
// Before sm_80 attention_in_bf16 runs the fp32 kernels, which take fp32 qkv and out: bf16-stored ones go through fp32
// scratch there (qkv widened, out rounded from it).
void CudaBackend::attention_forward(TensorOut out,  // (B, T, C)
                                    float* lse,     // (B, NH, T)
                                    TensorIn qkv,   // (B, T, 3C)
                                    int B, int T, int C, int NH) {
  check_attention_storage(qkv, out, C, NH, "attention_forward");
  if (tensor_core_attention(C, NH)) {
    cuda::launch_attention_forward_tc(out, lse, qkv, B, T, C, NH, stream_);
  } else if (!out.bf16) {
    cuda::launch_attention_forward(out.f32(), lse, qkv.f32(), B, T, C, NH, stream_);
  } else {
    const size_t n = size_t(B) * T * C;
    float* out32 = static_cast<float*>(scratch(sizeof(float) * 4 * n));  // (B, T, C), then qkv (B, T, 3C)
    float* qkv32 = out32 + n;
    cuda::launch_widen_bf16(qkv32, qkv.b16(), 3 * n, stream_);
    cuda::launch_attention_forward(out32, lse, qkv32, B, T, C, NH, stream_);
    cuda::launch_cast_to_bf16(out.b16(), out32, n, stream_);
  }
}

void CudaBackend::attention_backward(float* dqkv,        // (B, T, 3C) +=
                                     const float* dout,  // (B, T, C)
                                     TensorIn qkv,       // (B, T, 3C)
                                     TensorIn out,       // (B, T, C)
                                     const float* lse,   // (B, NH, T)
                                     int B, int T, int C, int NH) {
  check_attention_storage(qkv, out, C, NH, "attention_backward");
  const bool widen = !tensor_core_attention(C, NH) && out.bf16;
  const size_t nd = size_t(B) * NH * T, n = size_t(B) * T * C;
  // (B, NH, T) for D, then where needed out and qkv widened
  float* delta = static_cast<float*>(scratch(sizeof(float) * (nd + (widen ? 4 * n : 0))));
  if (tensor_core_attention(C, NH)) {
    cuda::launch_attention_backward_tc(dqkv, delta, dout, qkv, out, lse, B, T, C, NH, stream_);
  } else if (!widen) {
    cuda::launch_attention_backward(dqkv, delta, dout, qkv.f32(), out.f32(), lse, B, T, C, NH, stream_);
  } else {
    float *out32 = delta + nd, *qkv32 = out32 + n;
    cuda::launch_widen_bf16(out32, out.b16(), n, stream_);
    cuda::launch_widen_bf16(qkv32, qkv.b16(), 3 * n, stream_);
    cuda::launch_attention_backward(dqkv, delta, dout, qkv32, out32, lse, B, T, C, NH, stream_);
  }
}

bool CudaBackend::tensor_core_attention(int C, int NH) const {
  return compute_major_ >= 8 && NH > 0 && C % NH == 0 && attention_in_bf16(matmul_precision_, C / NH);
}

}  // namespace ember
