// The CUDA backend: every op of backend.h on one device (fp32 storage, bf16 where the caller stores GEMM inputs so;
// bf16 GEMM and attention inputs with matmul precision bf16), one stream, and the cuBLAS and cuBLASLt handles.
// Kernels and launchers live in one .cu per op family (encoder, layernorm, matmul, attention, KV cache, gelu, loss,
// optim, elementwise); the op methods that call them in cuda_backend_ops.cu.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "backend/backend.h"
#include "cuda_dispatch.h"

namespace ember {

// Every op is enqueued on stream_ and returns without waiting, except where host data must be ready: copy_to_host,
// copy_to_device (the caller may reuse its buffer at once), sum_squares and synchronize. Results are deterministic:
// no float atomics, fixed reduction trees, and cuBLAS with atomics disallowed (its default).
// The op methods with a decision to make (attention, matmul, AdamW) are the shared adapter functions of
// cuda_dispatch.h, run with this backend's op_context(); the rest call their launcher directly.
class CudaBackend final : public Backend, private cuda::OpResources {
 public:
  explicit CudaBackend(int device);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;
  std::string name() const override;
  // The device ordinal and the stream every op is enqueued on, for work that must order itself after the ops
  // (the NCCL and host-staged communicators wait on this stream before reading a buffer).
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }

  void* alloc(size_t bytes) override;
  void free(void* ptr) override;
  void copy_to_device(void* dst, const void* src_host, size_t bytes) override;
  void copy_to_host(void* dst_host, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void zero(void* ptr, size_t bytes) override;
  void synchronize() override;
  void bind_thread() override;
  bool device_memory(size_t* used, size_t* total) const override;
  void set_deterministic(bool on) override;

  void encoder_forward(float* out, const int32_t* inp, const float* wte, const float* wpe, int B, int T,
                       int C) override;
  void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp, int B, int T, int C) override;

  void layernorm_forward(TensorOut out, float* mean, float* rstd, const float* inp, const float* weight,
                         const float* bias, int N, int C) override;
  void residual_layernorm_forward(float* residual, TensorOut out, float* mean, float* rstd, const float* a, TensorIn b,
                                  const float* weight, const float* bias, int N, int C) override;
  void layernorm_backward(float* dinp, float* dweight, float* dbias, TensorIn dout, const float* inp,
                          const float* weight, const float* mean, const float* rstd, int N, int C) override;

  void matmul_forward(TensorOut out, TensorIn inp, TensorIn weight, TensorIn bias, int N, int IC, int OC) override;
  void matmul_backward(TensorOut dinp, float* dweight, float* dbias, TensorIn dout, TensorIn inp, TensorIn weight,
                       int N, int IC, int OC) override;
  void matmul_gelu_backward(TensorOut dinp, float* dweight, float* dbias, TensorOut dout, TensorIn pre, TensorIn inp,
                            TensorIn weight, int N, int IC, int OC) override;
  void matmul_forward_transposed(TensorOut out, TensorIn inp, TensorIn wte, int N, int C, int V) override;
  void matmul_backward_transposed(TensorOut dinp, float* dwte, TensorIn dout, TensorIn inp, TensorIn wte, int N, int C,
                                  int V) override;

  void attention_forward(TensorOut out, float* lse, TensorIn qkv, int B, int T, int C, int NH) override;
  void attention_backward(TensorOut dqkv, TensorIn dout, TensorIn qkv, TensorIn out, const float* lse, int B, int T,
                          int C, int NH) override;

  void encoder_forward_positions(float* out, const int32_t* inp, const int32_t* pos, const float* wte, const float* wpe,
                                 int N, int C) override;
  void kv_cache_write(float* k_cache, float* v_cache, const float* qkv, const int32_t* slot, const int32_t* pos, int N,
                      int C, int max_T) override;
  void attention_kv_forward(float* out, const float* qkv, const float* k_cache, const float* v_cache,
                            const int32_t* slot, const int32_t* pos, int N, int C, int NH, int max_T) override;

  void gelu_forward(TensorOut out, TensorIn inp, size_t n) override;
  void gelu_backward(float* dinp, TensorIn inp, const float* dout, size_t n) override;

  void add(float* out, const float* a, TensorIn b, size_t n) override;
  void accumulate(float* dst, const float* src, size_t n) override;
  void scale(float* x, float s, size_t n) override;
  void cast_to_bf16(BFloat16* out, const float* inp, size_t n) override;

  void crossentropy_forward(float* losses, TensorIn logits, const int32_t* targets, int N, int V, int ld) override;
  void crossentropy_backward(TensorOut dlogits, TensorIn logits, const int32_t* targets, float dloss, int N, int V,
                             int ld) override;
  void crossentropy_forward_backward(float* losses, TensorOut logits, const int32_t* targets, float dloss, int N, int V,
                                     int ld) override;
  void softmax_forward(float* probs, const float* logits, float temperature, int N, int V) override;

  double sum_squares(const float* x, size_t n) override;
  void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr, float beta1, float beta2,
                    float eps, float weight_decay, int t, float grad_scale) override;
  void adamw_update_segments(float* params, const float* grads, float* m, float* v, const AdamWSegment* segs,
                             size_t nseg, float lr, float beta1, float beta2, float eps, int t,
                             float grad_scale) override;

 private:
  // What the shared adapter functions (cuda_dispatch.h) run with: the stream, handles, scratch and device.
  cuda::OpContext op_context();
  // Device scratch of at least `bytes`, reused across ops on stream_; growing it waits for the stream first.
  void* scratch(size_t bytes) override;
  // A device copy of the segments in segments_, grown as needed.
  const AdamWSegment* kernel_segments(const AdamWSegment* segs, size_t nseg) override;
  static constexpr size_t kDoutBlockBytes = cuda::kDoutBlockBytes;

  int device_ = 0;
  int compute_major_ = 0;  // the device's compute capability, major part
  std::string device_name_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  double* reduce_ = nullptr;          // (kSumSquaresBlocks + 1) partial sums of sum_squares
  AdamWSegment* segments_ = nullptr;  // device copy of adamw_update_segments' segments
  size_t segments_capacity_ = 0;
  // cuBLASLt for the dense layers' fused bias epilogues: its workspace, and the bias gradient its epilogue writes
  // before it is added to dbias (layers wider than the capacity take the plain path).
  static constexpr size_t kLtWorkspaceBytes = size_t(32) << 20;
  static constexpr size_t kBiasGradCapacity = cuda::kBiasGradCapacity;
  void* lt_workspace_ = nullptr;
  float* bias_grad_ = nullptr;
  std::unique_ptr<cuda::LtGemm> lt_;
};

}  // namespace ember
