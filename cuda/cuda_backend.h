// The CUDA backend: every op of backend.h on one device (fp32 storage, bf16 where the caller stores GEMM inputs so;
// bf16 GEMM and attention inputs with matmul precision bf16), one stream, and the cuBLAS and cuBLASLt handles.
// Kernels and launchers live in one .cu per op family (encoder, layernorm, matmul, attention, KV cache, gelu, loss,
// optim, elementwise); the op methods that call them in cuda_op_methods.h, shared with the kernel-model backend.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>
#include <mutex>
#include <string>

#include "backend/backend.h"
#include "cuda_dispatch.h"
#include "cuda_op_methods.h"

namespace ember {

// Every op is enqueued on stream_ and returns without waiting, except where host data must be ready: copy_to_host,
// copy_to_device (the caller may reuse its buffer at once), sum_squares and synchronize. Results are deterministic:
// no float atomics, fixed reduction trees, and cuBLAS with atomics disallowed (its default).
// The op methods with a decision to make (attention, matmul, AdamW) are the shared adapter functions of
// cuda_dispatch.h, run with this backend's op_context(); the rest call their launcher directly.
class CudaBackend final : public cuda::OpMethods {
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
  void* alloc_host(size_t bytes) override;
  void free_host(void* ptr) override;
  CopyTicket copy_to_host_async(void* dst_host, const void* src, size_t bytes) override;
  CopyTicket copy_to_device_async(void* dst, const void* src_host, size_t bytes) override;
  void wait_copy(CopyTicket ticket) override;
  void synchronize() override;
  void bind_thread() override;
  bool device_memory(size_t* used, size_t* total) const override;
  void set_deterministic(bool on) override;
  std::string precision_unsupported(MatmulPrecision p) const override;
  float* rope_table_memory(size_t floats) override;
  std::string int8_engine() const override;

  // The op methods are cuda::OpMethods' (cuda_op_methods.h); sum_squares reads its total back from the device.
  double sum_squares(const float* x, size_t n) override;

 private:
  // What the op methods run with: the stream, handles, scratch and device.
  cuda::OpContext op_context() override;
  int compute_major() const override { return compute_major_; }
  // Device scratch of at least `bytes`, reused across ops on stream_; growing it waits for the stream first.
  void* scratch(size_t bytes) override;
  // A device copy of the segments in segments_, grown as needed.
  const AdamWSegment* kernel_segments(const AdamWSegment* segs, size_t nseg) override;
  // The weights' quantized copies, in weight_copies_, grown as needed.
  char* weight_copy_memory(size_t bytes) override;
  // `buffer` (device memory of `capacity` bytes) replaced by one of `bytes` where it is smaller, after the stream.
  void grow(void*& buffer, size_t& capacity, size_t bytes);
  static constexpr size_t kDoutBlockBytes = cuda::kDoutBlockBytes;

  int device_ = 0;
  int compute_major_ = 0, compute_minor_ = 0;  // the device's compute capability
  std::string device_name_;
  cudaStream_t stream_ = nullptr;
  // The asynchronous copies' stream, which waits for stream_'s work before each copy (order_), and one event per
  // outstanding copy, in the slot whose copy_ticket_ is its ticket (0: free); created at the first copy. copy_mutex_
  // guards them: the copies may come from two host threads.
  std::mutex copy_mutex_;
  cudaStream_t copy_stream_ = nullptr;
  cudaEvent_t order_ = nullptr;
  cudaEvent_t copy_events_[kCopyTickets] = {};
  CopyTicket copy_ticket_[kCopyTickets] = {};
  CopyTicket next_ticket_ = 1;
  CopyTicket enqueue_copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
  cublasHandle_t cublas_ = nullptr;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  double* reduce_ = nullptr;          // (kSumSquaresBlocks + 1) partial sums of sum_squares
  AdamWSegment* segments_ = nullptr;  // device copy of adamw_update_segments' segments
  size_t segments_capacity_ = 0;
  void* weight_copies_ = nullptr;  // the int8 and fp8 weight copies (cuda_dispatch.h's WeightCopies)
  size_t weight_copies_bytes_ = 0;
  void* rope_table_ = nullptr;  // the attention's rotary table (cuda_op_methods.h)
  size_t rope_table_bytes_ = 0;
  // cuBLASLt for the dense layers' fused bias epilogues: its workspace, and the bias gradient its epilogue writes
  // before it is added to dbias (layers wider than the capacity take the plain path).
  static constexpr size_t kLtWorkspaceBytes = size_t(32) << 20;
  static constexpr size_t kBiasGradCapacity = cuda::kBiasGradCapacity;
  void* lt_workspace_ = nullptr;
  float* bias_grad_ = nullptr;
  std::unique_ptr<cuda::LtGemm> lt_;
};

}  // namespace ember
