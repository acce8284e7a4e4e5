// CUDA backend (core): device selection, the stream and cuBLAS handle, device memory and copies, and the factory.
// The op families' kernels and launchers live in cuda_<family>.cu next to this file, the op methods in
// cuda_op_methods.h.
#include "cuda_backend.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>

#include "backend/device.h"
#include "cuda_check.h"
#include "cuda_ops.h"

namespace ember {

CudaBackend::CudaBackend(int device) : device_(device) {
  const int count = cuda_device_count();
  if (device < 0 || device >= count)
    throw_error("CUDA backend: device " + std::to_string(device) + " requested but " + std::to_string(count) +
                    " CUDA device(s) are visible",
                "check nvidia-smi and CUDA_VISIBLE_DEVICES, or run on the CPU backend");
  EMBER_CUDA_CHECK(cudaSetDevice(device));
  device_name_ = cuda_device_name(device);
  EMBER_CUDA_CHECK(cudaDeviceGetAttribute(&compute_major_, cudaDevAttrComputeCapabilityMajor, device));
  EMBER_CUDA_CHECK(cudaDeviceGetAttribute(&compute_minor_, cudaDevAttrComputeCapabilityMinor, device));
  EMBER_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  EMBER_CUBLAS_CHECK(cublasCreate(&cublas_));
  EMBER_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
  // Plain fp32 FMA GEMMs: no TF32 tensor cores (10-bit mantissa), so results match the CPU reference to fp32
  // rounding. Atomics stay disallowed (cuBLAS's default), which keeps split-K reductions deterministic.
  EMBER_CUBLAS_CHECK(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));
  EMBER_CUBLAS_CHECK(cublasSetAtomicsMode(cublas_, CUBLAS_ATOMICS_NOT_ALLOWED));
  EMBER_CUDA_CHECK(cudaMalloc(&reduce_, sizeof(double) * (cuda::kSumSquaresBlocks + 1)));
  track_alloc(reduce_, sizeof(double) * (cuda::kSumSquaresBlocks + 1));
  EMBER_CUDA_CHECK(cudaMalloc(&lt_workspace_, kLtWorkspaceBytes));
  track_alloc(lt_workspace_, kLtWorkspaceBytes);
  EMBER_CUDA_CHECK(cudaMalloc(&bias_grad_, sizeof(float) * kBiasGradCapacity));
  track_alloc(bias_grad_, sizeof(float) * kBiasGradCapacity);
  lt_ = std::make_unique<cuda::LtGemm>(stream_, lt_workspace_, kLtWorkspaceBytes);
}

CudaBackend::~CudaBackend() {
  // No checks here: a destructor must not throw, and after a sticky device fault every call below fails anyway.
  cudaStreamSynchronize(stream_);
  lt_.reset();
  cudaFree(bias_grad_);
  cudaFree(lt_workspace_);
  cudaFree(scratch_);
  cudaFree(weight_copies_);
  cudaFree(rope_table_);
  cudaFree(segments_);
  cudaFree(reduce_);
  cublasDestroy(cublas_);
  if (copy_stream_) {
    cudaStreamSynchronize(copy_stream_);
    for (cudaEvent_t e : copy_events_) cudaEventDestroy(e);
    cudaEventDestroy(order_);
    cudaStreamDestroy(copy_stream_);
  }
  cudaStreamDestroy(stream_);
}

void CudaBackend::bind_thread() { EMBER_CUDA_CHECK(cudaSetDevice(device_)); }

std::string CudaBackend::name() const { return "cuda:" + std::to_string(device_) + " (" + device_name_ + ")"; }

void* CudaBackend::alloc(size_t bytes) {
  // cudaMalloc aligns to at least 256 bytes; a zero-byte request still gets a valid, distinct pointer.
  void* ptr = nullptr;
  const cudaError_t rc = cudaMalloc(&ptr, bytes == 0 ? 64 : bytes);
  if (rc == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear it, so later calls do not report it again
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    throw_error("CUDA backend: out of device memory allocating " + std::to_string(bytes) + " bytes on " + name() +
                    " (" + std::to_string(free_bytes >> 20) + " MiB free of " + std::to_string(total_bytes >> 20) +
                    " MiB)",
                "reduce batch_size or seq_len, or use a smaller model config");
  }
  EMBER_CUDA_CHECK(rc);
  EMBER_CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, stream_));  // ordered before every later op on stream_
  track_alloc(ptr, bytes == 0 ? 64 : bytes);
  return ptr;
}

void CudaBackend::free(void* ptr) {
  if (!ptr) return;
  weights_changed();                                 // a weight allocated later at this address is another weight
  EMBER_CUDA_CHECK(cudaStreamSynchronize(stream_));  // ops still queued may use the memory
  track_free(ptr);
  EMBER_CUDA_CHECK(cudaFree(ptr));
}

void CudaBackend::set_deterministic(bool on) {
  Backend::set_deterministic(on);
  // Every kernel of this backend reduces in a fixed order; cuBLAS is the one part with a faster, timing-dependent
  // choice (split-K with atomic accumulation), which it may take only when allowed.
  EMBER_CUBLAS_CHECK(cublasSetAtomicsMode(cublas_, on ? CUBLAS_ATOMICS_NOT_ALLOWED : CUBLAS_ATOMICS_ALLOWED));
}

bool CudaBackend::device_memory(size_t* used, size_t* total) const {
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
    cudaGetLastError();  // not sticky, but do not leave it for the next check to report
    return false;
  }
  *used = total_bytes - free_bytes;
  *total = total_bytes;
  return true;
}

void* CudaBackend::alloc_host(size_t bytes) {
  void* ptr = nullptr;
  if (cudaMallocHost(&ptr, bytes == 0 ? 64 : bytes) != cudaSuccess) {
    cudaGetLastError();
    throw_error("CUDA backend: cannot allocate " + std::to_string(bytes) + " bytes of page-locked host memory",
                "free host memory (page-locked memory cannot be swapped), or leave training.offload at none");
  }
  std::memset(ptr, 0, bytes);
  return ptr;
}

void CudaBackend::free_host(void* ptr) {
  if (!ptr) return;
  // Copies still queued, on either stream, may use the memory.
  EMBER_CUDA_CHECK(cudaStreamSynchronize(stream_));
  {
    std::lock_guard<std::mutex> lock(copy_mutex_);
    if (copy_stream_) EMBER_CUDA_CHECK(cudaStreamSynchronize(copy_stream_));
  }
  EMBER_CUDA_CHECK(cudaFreeHost(ptr));
}

Backend::CopyTicket CudaBackend::enqueue_copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  std::lock_guard<std::mutex> lock(copy_mutex_);
  if (!copy_stream_) {
    EMBER_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
    EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&order_, cudaEventDisableTiming));
    for (cudaEvent_t& e : copy_events_) EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  const auto slot = std::find(std::begin(copy_ticket_), std::end(copy_ticket_), CopyTicket(0));
  EMBER_ASSERT(slot != std::end(copy_ticket_), "CUDA backend: more than kCopyTickets asynchronous copies outstanding");
  const CopyTicket ticket = next_ticket_++;
  EMBER_CUDA_CHECK(cudaEventRecord(order_, stream_));  // after the ops enqueued so far
  EMBER_CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, order_, 0));
  if (bytes) EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, copy_stream_));
  EMBER_CUDA_CHECK(cudaEventRecord(copy_events_[slot - std::begin(copy_ticket_)], copy_stream_));
  *slot = ticket;
  return ticket;
}

Backend::CopyTicket CudaBackend::copy_to_host_async(void* dst_host, const void* src, size_t bytes) {
  return enqueue_copy(dst_host, src, bytes, cudaMemcpyDeviceToHost);
}

Backend::CopyTicket CudaBackend::copy_to_device_async(void* dst, const void* src_host, size_t bytes) {
  return enqueue_copy(dst, src_host, bytes, cudaMemcpyHostToDevice);
}

// The slot stays taken while the host waits (outside the lock, so the other thread's copies go on).
void CudaBackend::wait_copy(CopyTicket ticket) {
  cudaEvent_t event = nullptr;
  CopyTicket* slot = nullptr;
  {
    std::lock_guard<std::mutex> lock(copy_mutex_);
    slot = std::find(std::begin(copy_ticket_), std::end(copy_ticket_), ticket);
    EMBER_ASSERT(ticket > 0 && slot != std::end(copy_ticket_), "CUDA backend: waiting for an unknown copy");
    event = copy_events_[slot - std::begin(copy_ticket_)];
  }
  EMBER_CUDA_CHECK(cudaEventSynchronize(event));
  std::lock_guard<std::mutex> lock(copy_mutex_);
  *slot = 0;
}

void CudaBackend::copy_to_device(void* dst, const void* src_host, size_t bytes) {
  if (!bytes) return;
  EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, src_host, bytes, cudaMemcpyHostToDevice, stream_));
  // The caller may overwrite or free its buffer as soon as we return (a pinned buffer would be read later).
  EMBER_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::copy_to_host(void* dst_host, const void* src, size_t bytes) {
  if (!bytes) return;
  EMBER_CUDA_CHECK(cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDeviceToHost, stream_));
  EMBER_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::copy(void* dst, const void* src, size_t bytes) {
  if (!bytes || dst == src) return;
  const auto d = reinterpret_cast<uintptr_t>(dst), s = reinterpret_cast<uintptr_t>(src);
  if (d < s + bytes && s < d + bytes) {
    // Overlapping ranges (memmove semantics, as on the CPU): cudaMemcpy leaves them undefined, so stage through
    // scratch. The scratch must not itself be src or dst, which holds because callers never see scratch memory.
    void* tmp = scratch(bytes);
    EMBER_CUDA_CHECK(cudaMemcpyAsync(tmp, src, bytes, cudaMemcpyDeviceToDevice, stream_));
    EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, tmp, bytes, cudaMemcpyDeviceToDevice, stream_));
    return;
  }
  EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
}

void CudaBackend::zero(void* ptr, size_t bytes) {
  if (bytes) EMBER_CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, stream_));
}

void CudaBackend::synchronize() { EMBER_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

void CudaBackend::grow(void*& buffer, size_t& capacity, size_t bytes) {
  if (bytes <= capacity) return;
  EMBER_CUDA_CHECK(cudaStreamSynchronize(stream_));  // queued ops may still read the old buffer
  track_free(buffer);
  EMBER_CUDA_CHECK(cudaFree(buffer));
  buffer = nullptr;
  capacity = 0;
  EMBER_CUDA_CHECK(cudaMalloc(&buffer, bytes));
  track_alloc(buffer, bytes);
  capacity = bytes;
}

void* CudaBackend::scratch(size_t bytes) {
  grow(scratch_, scratch_bytes_, bytes);
  return scratch_;
}

double CudaBackend::sum_squares(const float* x, size_t n) {
  cuda::launch_sum_squares(reduce_, x, n, stream_);
  double total = 0.0;
  EMBER_CUDA_CHECK(
      cudaMemcpyAsync(&total, reduce_ + cuda::kSumSquaresBlocks, sizeof(double), cudaMemcpyDeviceToHost, stream_));
  EMBER_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return total;
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

char* CudaBackend::weight_copy_memory(size_t bytes) {
  grow(weight_copies_, weight_copies_bytes_, bytes);
  return static_cast<char*>(weight_copies_);
}

std::string CudaBackend::precision_unsupported(MatmulPrecision p) const {
  const std::string sm = "sm_" + std::to_string(compute_major_) + std::to_string(compute_minor_);
  if (p == MatmulPrecision::int8 && compute_major_ * 10 + compute_minor_ < 75)
    return "int8 products need int8 tensor cores (sm_75 or newer); " + name() + " is " + sm;
  if (p == MatmulPrecision::fp8 && compute_major_ * 10 + compute_minor_ < 89)
    return "fp8 products need fp8 tensor cores (sm_89 or newer); " + name() + " is " + sm;
  return "";
}

float* CudaBackend::rope_table_memory(size_t floats) {
  grow(rope_table_, rope_table_bytes_, floats * sizeof(float));
  return static_cast<float*>(rope_table_);
}

std::string CudaBackend::int8_engine() const {
  if (cuda::int8_products_fused(compute_major_))
    return "Ember's mma.sync int8 kernels (exact int32 sums, the scales applied in registers)";
  return "cuBLAS int8 GEMMs (exact int32 sums on the tensor cores) and an epilogue pass";
}

cuda::OpContext CudaBackend::op_context() {
  return {*this,           stream_,        cublas_,          lt_.get(), bias_grad_, kBiasGradCapacity,
          kDoutBlockBytes, compute_major_, matmul_precision_};
}

std::unique_ptr<Backend> make_cuda_backend(int device) { return std::make_unique<CudaBackend>(device); }

}  // namespace ember
