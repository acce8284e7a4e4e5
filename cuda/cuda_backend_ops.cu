// CUDA backend: the Backend op methods, each handing its arguments to the launcher of its op family (cuda_<family>.cu)
// with the backend's stream, or, where the adapter decides something, to the shared functions of cuda_dispatch.h.
#include <algorithm>
#include <cmath>

#include "core/dtype.h"
#include "core/error.h"
#include "cuda_backend.h"
#include "cuda_check.h"
#include "cuda_dispatch.h"
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
  cuda::encoder_backward(op_context(), dwte, dwpe, dout, inp, B, T, C);
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
                                             TensorIn b,           // (N, C)
                                             const float* weight,  // (C)
                                             const float* bias,    // (C)
                                             int N, int C) {
  cuda::launch_residual_layernorm_forward(residual, out, mean, rstd, a, b, weight, bias, N, C, stream_);
}

void CudaBackend::layernorm_backward(float* dinp,          // (N, C) +=
                                     float* dweight,       // (C) +=
                                     float* dbias,         // (C) +=
                                     TensorIn dout,        // (N, C)
                                     const float* inp,     // (N, C)
                                     const float* weight,  // (C)
                                     const float* mean,    // (N)
                                     const float* rstd,    // (N)
                                     int N, int C) {
  check_gemm_dout(dout, "layernorm_backward");
  cuda::layernorm_backward(op_context(), dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

// --- KV-cache inference ---
void CudaBackend::encoder_forward_positions(float* out,          // (N, C)
                                            const int32_t* inp,  // (N)
                                            const int32_t* pos,  // (N)
                                            const float* wte,    // (V, C)
                                            const float* wpe,    // (maxT, C)
                                            int N, int C) {
  cuda::launch_encoder_forward_positions(out, inp, pos, wte, wpe, N, C, stream_);
}

void CudaBackend::kv_cache_write(float* k_cache,       // (S, max_T, C)
                                 float* v_cache,       // (S, max_T, C)
                                 const float* qkv,     // (N, 3C)
                                 const int32_t* slot,  // (N)
                                 const int32_t* pos,   // (N)
                                 int N, int C, int max_T) {
  cuda::launch_kv_cache_write(k_cache, v_cache, qkv, slot, pos, N, C, max_T, stream_);
}

void CudaBackend::attention_kv_forward(float* out,            // (N, C)
                                       const float* qkv,      // (N, 3C)
                                       const float* k_cache,  // (S, max_T, C)
                                       const float* v_cache,  // (S, max_T, C)
                                       const int32_t* slot,   // (N)
                                       const int32_t* pos,    // (N)
                                       int N, int C, int NH, int max_T) {
  cuda::launch_attention_kv_forward(out, qkv, k_cache, v_cache, slot, pos, N, C, NH, max_T, stream_);
}

// --- gelu ---
void CudaBackend::gelu_forward(TensorOut out, TensorIn inp, size_t n) {  // (n)
  cuda::launch_gelu_forward(out, inp, n, stream_);
}
void CudaBackend::gelu_backward(float* dinp, TensorIn inp, const float* dout, size_t n) {  // (n) =
  cuda::launch_gelu_backward(dinp, inp, dout, n, stream_);
}

// --- loss ---
void CudaBackend::crossentropy_forward(float* losses,           // (N)
                                       TensorIn logits,         // (N, V)
                                       const int32_t* targets,  // (N)
                                       int N, int V, int ld) {
  cuda::launch_crossentropy_forward(losses, logits, targets, N, V, ld, stream_);
}

void CudaBackend::crossentropy_backward(TensorOut dlogits,       // (N, V), may alias logits
                                        TensorIn logits,         // (N, V)
                                        const int32_t* targets,  // (N)
                                        float dloss, int N, int V, int ld) {
  cuda::launch_crossentropy_backward(dlogits, logits, targets, dloss, N, V, ld, stream_);
}

void CudaBackend::crossentropy_forward_backward(float* losses,           // (N)
                                                TensorOut logits,        // (N, V) in: logits; out: dlogits
                                                const int32_t* targets,  // (N)
                                                float dloss, int N, int V, int ld) {
  cuda::launch_crossentropy_forward_backward(losses, logits, targets, dloss, N, V, ld, stream_);
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

void CudaBackend::adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr, float beta1,
                               float beta2, float eps, float weight_decay, int t, float grad_scale) {
  cuda::adamw_update(op_context(), params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, t, grad_scale);
}

void CudaBackend::adamw_update_segments(float* params, const float* grads, float* m, float* v, const AdamWSegment* segs,
                                        size_t nseg, float lr, float beta1, float beta2, float eps, int t,
                                        float grad_scale) {
  cuda::adamw_update_segments(op_context(), params, grads, m, v, segs, nseg, lr, beta1, beta2, eps, t, grad_scale);
}

const AdamWSegment* CudaBackend::kernel_segments(const AdamWSegment* segs, size_t nseg) {
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
  return segments_;
}

// --- elementwise ---
void CudaBackend::add(float* out, const float* a, TensorIn b, size_t n) { cuda::launch_add(out, a, b, n, stream_); }
void CudaBackend::accumulate(float* dst, const float* src, size_t n) { cuda::launch_accumulate(dst, src, n, stream_); }
void CudaBackend::scale(float* x, float s, size_t n) { cuda::launch_scale(x, s, n, stream_); }
void CudaBackend::cast_to_bf16(BFloat16* out, const float* inp, size_t n) {
  cuda::launch_cast_to_bf16(out, inp, n, stream_);
}

// --- matmul and attention: the shared adapter functions (cuda_dispatch.h) after the Backend's argument checks ---
void CudaBackend::matmul_forward(TensorOut out, TensorIn inp, TensorIn weight, TensorIn bias, int N, int IC, int OC) {
  check_gemm_inputs(inp, weight, "matmul_forward");
  check_gemm_output(out, bias, "matmul_forward");
  cuda::matmul_forward(op_context(), out, inp, weight, bias, N, IC, OC);
}

void CudaBackend::matmul_backward(TensorOut dinp, float* dweight, float* dbias, TensorIn dout, TensorIn inp,
                                  TensorIn weight, int N, int IC, int OC) {
  check_gemm_inputs(inp, weight, "matmul_backward");
  check_gemm_dout(dout, "matmul_backward");
  cuda::matmul_backward(op_context(), dinp, dweight, dbias, dout, inp, weight, N, IC, OC);
}

void CudaBackend::matmul_gelu_backward(TensorOut dinp, float* dweight, float* dbias, TensorOut dout, TensorIn pre,
                                       TensorIn inp, TensorIn weight, int N, int IC, int OC) {
  check_gemm_inputs(inp, weight, "matmul_gelu_backward");
  cuda::matmul_gelu_backward(op_context(), dinp, dweight, dbias, dout, pre, inp, weight, N, IC, OC);
}

void CudaBackend::matmul_forward_transposed(TensorOut out, TensorIn inp, TensorIn wte, int N, int C, int V) {
  check_gemm_inputs(inp, wte, "matmul_forward_transposed");
  check_gemm_output(out, nullptr, "matmul_forward_transposed");
  cuda::matmul_forward_transposed(op_context(), out, inp, wte, N, C, V);
}

void CudaBackend::matmul_backward_transposed(TensorOut dinp, float* dwte, TensorIn dout, TensorIn inp, TensorIn wte,
                                             int N, int C, int V) {
  check_gemm_inputs(inp, wte, "matmul_backward_transposed");
  check_gemm_dout(dout, "matmul_backward_transposed");
  cuda::matmul_backward_transposed(op_context(), dinp, dwte, dout, inp, wte, N, C, V);
}

void CudaBackend::attention_forward(TensorOut out, float* lse, TensorIn qkv, int B, int T, int C, int NH) {
  check_attention_storage(qkv, out, C, NH, "attention_forward");
  cuda::attention_forward(op_context(), out, lse, qkv, B, T, C, NH);
}

void CudaBackend::attention_backward(TensorOut dqkv, TensorIn dout, TensorIn qkv, TensorIn out, const float* lse, int B,
                                     int T, int C, int NH) {
  check_attention_storage(qkv, out, C, NH, "attention_backward");
  check_attention_grad_storage(dqkv, dout, qkv, "attention_backward");
  cuda::attention_backward(op_context(), dqkv, dout, qkv, out, lse, B, T, C, NH);
}

cuda::OpContext CudaBackend::op_context() {
  return {*this,           stream_,        cublas_,          lt_.get(), bias_grad_, kBiasGradCapacity,
          kDoutBlockBytes, compute_major_, matmul_precision_};
}

}  // namespace ember
