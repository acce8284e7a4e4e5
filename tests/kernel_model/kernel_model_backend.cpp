// A Backend whose ops run the CUDA backend's own kernels and launchers (cuda/cuda_<family>.cu, compiled here as
// plain C++) under the kernel model (kernel_model.h), on host memory (the CPU backend's). The matmul launchers call
// a model of cuBLAS's two GEMM entry points (below) and never cuBLASLt. Its op methods are CudaBackend's own
// (cuda/cuda_op_methods.h: the same argument checks, and the ops with a decision to make, matmul, attention and AdamW,
// through the adapter functions of cuda/cuda_dispatch.h) for an emulated compute capability. test_cuda_ops_model
// runs the gpu op tests (tests/gpu/test_cuda_ops_*.cpp) against it, so every kernel, launcher, op method and adapter
// path is exercised wherever the CUDA headers are.
//
// The launchers keep their names: this translation unit renames the namespace ember::cuda to ember::cuda_model with
// a macro, so its copies never meet the CUDA backend's at link time. System headers come first, before the macro.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/backend.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/fp8.h"
#include "kernel_model_backend.h"

#define cuda cuda_model
#include "kernel_model.h"  // before the kernels

// cuBLAS's two GEMM entry points, as cuda_matmul.cu's launchers call them, computed from their column-major
// definition: C (m, n) = alpha op(A) op(B) + beta C with op(X) = X or X^T, element (i, j) of X at X[i + j ld]:
// cublasSgemm in fp32, and cublasGemmEx with bf16 inputs (widened exactly), fp32 accumulation and an fp32 or bf16 C
// (alpha A B + beta C formed in fp32, then rounded to nearest even); any other cublasGemmEx call is refused, as the
// launchers never make one. This checks the launchers' transposes, leading
// dimensions and row blocks, and the casts, bias and column-sum kernels around them; cuBLAS itself (and cuBLASLt's
// fused epilogues, which the model backend leaves out) is for the gpu tests.
namespace ember::kernel_model {
template <typename In, typename Out>
inline cublasStatus_t gemm(cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k, float alpha,
                           const In* A, int lda, const In* B, int ldb, float beta, Out* C, int ldc) {
  if (count_only) {
    ++gemms_counted;
    return CUBLAS_STATUS_SUCCESS;
  }
  auto in = [](auto v) {
    if constexpr (std::is_same_v<decltype(v), BFloat16>)
      return from_bf16(v);
    else
      return v;
  };
  // Row i of op(A) and column j of op(B), each copied out contiguous (and widened) once.
  std::vector<float> a(size_t(m) * k), b(size_t(n) * k);
  for (int i = 0; i < m; ++i)
    for (int l = 0; l < k; ++l)
      a[size_t(i) * k + l] = in(op_a == CUBLAS_OP_N ? A[i + size_t(l) * lda] : A[l + size_t(i) * lda]);
  for (int j = 0; j < n; ++j)
    for (int l = 0; l < k; ++l)
      b[size_t(j) * k + l] = in(op_b == CUBLAS_OP_N ? B[l + size_t(j) * ldb] : B[j + size_t(l) * ldb]);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      float acc = 0.0f;
      for (int l = 0; l < k; ++l) acc += a[size_t(i) * k + l] * b[size_t(j) * k + l];
      Out& c = C[i + size_t(j) * ldc];
      const float v = alpha * acc + (beta == 0.0f ? 0.0f : beta * in(c));  // beta = 0: C is not read, as in cuBLAS
      if constexpr (std::is_same_v<Out, BFloat16>)
        c = to_bf16(v);
      else
        c = v;
    }
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t sgemm(cublasHandle_t, cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k,
                            const float* alpha, const float* A, int lda, const float* B, int ldb, const float* beta,
                            float* C, int ldc) {
  return gemm(op_a, op_b, m, n, k, *alpha, A, lda, B, ldb, *beta, C, ldc);
}
// int8: C (m, n) int32 = alpha op(A) op(B) + beta C with int8 A and B, the sums exact (in int64 here, then wrapped to
// int32 as the tensor cores' int32 accumulators would; a GEMM whose sums overflow int32 is the caller's bug). cuBLAS
// takes only the "TN" form with m, k and the leading dimensions multiples of 4 on the tensor cores; the model refuses
// anything else, so a launcher that would fall off that path fails here.
inline cublasStatus_t gemm_s8(cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k, int32_t alpha,
                              const int8_t* A, int lda, const int8_t* B, int ldb, int32_t beta, int32_t* C, int ldc) {
  if (op_a != CUBLAS_OP_T || op_b != CUBLAS_OP_N || m % 4 || k % 4 || lda % 4 || ldb % 4 || ldc % 4)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (count_only) {
    ++gemms_counted;
    return CUBLAS_STATUS_SUCCESS;
  }
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      int64_t acc = 0;
      for (int l = 0; l < k; ++l) acc += int64_t(A[l + size_t(i) * lda]) * int64_t(B[l + size_t(j) * ldb]);
      int32_t& c = C[i + size_t(j) * ldc];
      c = int32_t(int64_t(alpha) * acc + (beta == 0 ? 0 : int64_t(beta) * c));
    }
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t gemm_ex(cublasHandle_t, cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k,
                              const void* alpha, const void* A, cudaDataType a_type, int lda, const void* B,
                              cudaDataType b_type, int ldb, const void* beta, void* C, cudaDataType c_type, int ldc,
                              cublasComputeType_t compute, cublasGemmAlgo_t) {
  if (a_type == CUDA_R_8I && b_type == CUDA_R_8I && c_type == CUDA_R_32I && compute == CUBLAS_COMPUTE_32I)
    return gemm_s8(op_a, op_b, m, n, k, *static_cast<const int32_t*>(alpha), static_cast<const int8_t*>(A), lda,
                   static_cast<const int8_t*>(B), ldb, *static_cast<const int32_t*>(beta), static_cast<int32_t*>(C),
                   ldc);
  if (a_type != CUDA_R_16BF || b_type != CUDA_R_16BF || (c_type != CUDA_R_32F && c_type != CUDA_R_16BF) ||
      compute != CUBLAS_COMPUTE_32F)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  const float a = *static_cast<const float*>(alpha), b = *static_cast<const float*>(beta);
  const auto* a16 = static_cast<const BFloat16*>(A);
  const auto* b16 = static_cast<const BFloat16*>(B);
  if (c_type == CUDA_R_16BF) return gemm(op_a, op_b, m, n, k, a, a16, lda, b16, ldb, b, static_cast<BFloat16*>(C), ldc);
  return gemm(op_a, op_b, m, n, k, a, a16, lda, b16, ldb, b, static_cast<float*>(C), ldc);
}
}  // namespace ember::kernel_model
#undef cublasSgemm
#define cublasSgemm ::ember::kernel_model::sgemm
#define cublasGemmEx ::ember::kernel_model::gemm_ex
#include "cuda_lt_gemm.cu"
#include "cuda_matmul.cu"
#include "cuda_matmul_quant.cu"
#undef cublasGemmEx
#undef cublasSgemm

#include "cuda_attention.cu"
#include "cuda_attention_tc.cu"
#include "cuda_dispatch.h"  // the adapter decisions, over the launchers above
#include "cuda_elementwise.cu"
#include "cuda_encoder.cu"
#include "cuda_gelu.cu"
#include "cuda_kv_cache.cu"
#include "cuda_layernorm.cu"
#include "cuda_loss.cu"
#include "cuda_op_methods.h"  // CudaBackend's op methods, over both
#include "cuda_optim.cu"
#include "cuda_quant.cu"
#undef cuda

// The fp8 GEMM (cuda_gemm_fp8.cu, cuBLASLt on the device), computed from its definition: D (m, n) fp32 = A^T B, each
// product of two fp8 values exact in fp32 and summed in fp32 in order of k (the tensor cores' order and accumulation
// are their own), refused unless every dimension and leading dimension is a multiple of 16 and the operands are not
// both E5M2, as cuBLASLt refuses them. In count-only mode one GEMM with its cost.
namespace ember::cuda_model {
void launch_gemm_fp8(LtGemm*, int m, int n, int k, const uint8_t* a, Fp8Format fa, int lda, const uint8_t* b,
                     Fp8Format fb, int ldb, float* d, int ldd, cudaStream_t) {
  EMBER_ASSERT(m % 16 == 0 && n % 16 == 0 && k % 16 == 0 && lda % 16 == 0 && ldb % 16 == 0 && ldd % 16 == 0,
               "fp8 GEMM: m, n, k and the leading dimensions must be multiples of 16");
  EMBER_ASSERT(fa == Fp8Format::e4m3 || fb == Fp8Format::e4m3, "fp8 GEMM: E5M2 times E5M2 has no kernel");
  report_launch("gemm_fp8", double(m) * k + double(k) * n, 4.0 * double(m) * n, 2.0 * double(m) * n * k, true,
                FlopUnit::fp8);
  if (kernel_model::count_only) {
    ++kernel_model::gemms_counted;
    return;
  }
  std::vector<float> wa(size_t(m) * k), wb(size_t(n) * k);
  for (int i = 0; i < m; ++i)
    for (int l = 0; l < k; ++l) wa[size_t(i) * k + l] = from_fp8(a[l + size_t(i) * lda], fa);
  for (int j = 0; j < n; ++j)
    for (int l = 0; l < k; ++l) wb[size_t(j) * k + l] = from_fp8(b[l + size_t(j) * ldb], fb);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      float acc = 0.0f;
      for (int l = 0; l < k; ++l) acc += wa[size_t(i) * k + l] * wb[size_t(j) * k + l];
      d[i + size_t(j) * ldd] = acc;
    }
}
}  // namespace ember::cuda_model

// CUB's stable radix sort (cuda_sort.cu, whose device code only nvcc compiles), as the encoder's backward pass calls
// it: the same contract from std::stable_sort, on host memory. In count-only mode one launch with its cost.
namespace ember::cuda_model {
size_t sort_pairs_temp_bytes(int n) { return sizeof(int32_t) * size_t(n); }
void launch_sort_pairs(int32_t* keys_out, int32_t* values_out, const int32_t* keys_in, const int32_t* values_in, int n,
                       void* temp, size_t temp_bytes, cudaStream_t) {
  if (n == 0) return;
  report_launch("sort_pairs", 4 * 8.0 * n, 4 * 8.0 * n, 0.0);
  if (kernel_model::count_only) {
    ++kernel_model::launches_counted;
    return;
  }
  EMBER_ASSERT(temp_bytes >= sort_pairs_temp_bytes(n), "sort_pairs: working space too small");
  auto* order = static_cast<int32_t*>(temp);
  for (int i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order, order + n, [&](int32_t a, int32_t b) { return keys_in[a] < keys_in[b]; });
  for (int i = 0; i < n; ++i) keys_out[i] = keys_in[order[i]], values_out[i] = values_in[order[i]];
}
}  // namespace ember::cuda_model

namespace ember {
namespace {

namespace k = cuda_model;
cudaStream_t const kNoStream = nullptr;

class KernelModelBackend final : public k::OpMethods {
  struct PendingCopy {
    void* dst;
    const void* src;
    std::vector<unsigned char> issued;  // the source as it was at the issue
  };
  std::mutex copies_mutex_;  // the copies may come from two host threads (Backend::copy_to_host_async)
  std::map<CopyTicket, PendingCopy> pending_;
  CopyTicket next_ticket_ = 1;
  CopyTicket defer(void* dst, const void* src, size_t bytes) {
    std::lock_guard<std::mutex> lock(copies_mutex_);
    EMBER_ASSERT(pending_.size() < size_t(kCopyTickets), "kernel model: more than kCopyTickets copies outstanding");
    PendingCopy c{dst, src, {}};
    if (!count_only_) {
      const auto* s = static_cast<const unsigned char*>(src);
      c.issued.assign(s, s + bytes);
      std::memset(dst, 0xff, bytes);
    }
    pending_.emplace(next_ticket_, std::move(c));
    return next_ticket_++;
  }

 public:
  KernelModelBackend(int compute_capability, bool count_only)
      : compute_capability_(compute_capability), count_only_(count_only) {
    kernel_model::count_only = count_only;
  }
  ~KernelModelBackend() override {
    if (count_only_) kernel_model::count_only = false;
  }
  std::string name() const override {
    return "kernel model sm_" + std::to_string(compute_capability_) + (count_only_ ? " (count-only)" : "") +
           " (CUDA kernels on the CPU)";
  }

  // Count-only: buffers are addresses that are never dereferenced (no kernel runs), so a GPT-2 step needs no memory;
  // host copies do nothing, and device copies and zero fills report the traffic cudaMemcpyAsync and cudaMemsetAsync
  // would make.
  void* alloc(size_t bytes) override { return count_only_ ? fake(bytes) : cpu_->alloc(bytes); }
  void free(void* ptr) override {
    weights_changed();  // a weight allocated later at this address is another weight
    if (!count_only_) cpu_->free(ptr);
  }
  void copy_to_device(void* dst, const void* src, size_t bytes) override {
    if (!count_only_) cpu_->copy_to_device(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    if (count_only_)
      std::memset(dst, 0, bytes);
    else
      cpu_->copy_to_host(dst, src, bytes);
  }
  // Asynchronous copies as a GPU may run them at the latest: the destination holds NaN (all bits set) from the issue
  // until the wait, which copies; the source is kept as issued, and a source changed before the wait aborts.
  CopyTicket copy_to_host_async(void* dst, const void* src, size_t bytes) override { return defer(dst, src, bytes); }
  CopyTicket copy_to_device_async(void* dst, const void* src, size_t bytes) override { return defer(dst, src, bytes); }
  void wait_copy(CopyTicket ticket) override {
    std::lock_guard<std::mutex> lock(copies_mutex_);
    auto it = pending_.find(ticket);
    EMBER_ASSERT(it != pending_.end(), "kernel model: waiting for an unknown copy");
    const PendingCopy& c = it->second;
    if (!count_only_) {
      if (std::memcmp(c.src, c.issued.data(), c.issued.size()) != 0) {
        std::fprintf(stderr, "kernel model: the source of an asynchronous copy changed before its wait\n");
        std::abort();
      }
      std::memcpy(c.dst, c.issued.data(), c.issued.size());
    }
    pending_.erase(it);
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (count_only_)
      report_launch("memcpy", double(bytes), double(bytes), 0.0);
    else
      cpu_->copy(dst, src, bytes);
  }
  void zero(void* ptr, size_t bytes) override {
    if (count_only_)
      report_launch("memset", 0.0, double(bytes), 0.0);
    else
      cpu_->zero(ptr, bytes);
  }
  void synchronize() override {}

  // The op methods are CudaBackend's own (cuda_op_methods.h), over the launchers compiled here; only sum_squares
  // reads its total back from memory, which here is the host's.
  double sum_squares(const float* x, size_t n) override {
    std::vector<double> partials(k::kSumSquaresBlocks + 1);  // stays 0 in count-only mode
    k::launch_sum_squares(partials.data(), x, n, kNoStream);
    return partials.back();
  }

 private:
  // The scratch a bf16 backward pass may take for dout rounded to bf16: 512 bytes, a few rows at the tests' sizes
  // (67 or 101 columns: 3 or 2 rows; 50257: one), so those passes go in several blocks of rows, as the lm_head's does
  // on the GPU.
  static constexpr size_t kDoutBlockBytes = 512;

  // Count-only takes the CUDA backend's own sizes and a count-only cuBLASLt, so the launches are the device's.
  k::OpContext op_context() override {
    if (count_only_)
      return {*this,
              kNoStream,
              nullptr,
              &count_lt_,
              count_bias_grad_,
              k::kBiasGradCapacity,
              k::kDoutBlockBytes,
              compute_capability_ / 10,
              matmul_precision()};
    return {
        *this, kNoStream, nullptr, nullptr, nullptr, 0, kDoutBlockBytes, compute_capability_ / 10, matmul_precision()};
  }
  int compute_major() const override { return compute_capability_ / 10; }
  // Host memory stands for device memory here: 256-byte aligned, as the device's, and grown only, as CudaBackend's.
  void* scratch(size_t bytes) override {
    if (count_only_) return fake(bytes);
    if (bytes + 256 > scratch_.size()) scratch_.resize(bytes + 256);
    return scratch_.data() + (256 - reinterpret_cast<uintptr_t>(scratch_.data()) % 256) % 256;
  }
  const AdamWSegment* kernel_segments(const AdamWSegment* segs, size_t) override { return segs; }
  // New memory whenever it grows, as the device's (the copies in the old block are dropped).
  char* weight_copy_memory(size_t bytes) override {
    if (count_only_) return static_cast<char*>(fake(bytes));
    if (bytes > weight_copies_bytes_) {
      weight_copies_ = std::make_unique<char[]>(bytes + 256);
      weight_copies_bytes_ = bytes;
    }
    char* p = weight_copies_.get();
    return p + (256 - reinterpret_cast<uintptr_t>(p) % 256) % 256;
  }

  float* rope_table_memory(size_t floats) override {
    if (count_only_) return static_cast<float*>(fake(floats * sizeof(float)));
    if (floats > rope_table_.size()) rope_table_.assign(floats, 0.0f);
    return rope_table_.data();
  }

  // A fresh address range for `bytes`, 256-byte aligned, that nothing ever reads or writes (count-only mode).
  void* fake(size_t bytes) {
    void* p = reinterpret_cast<void*>(next_fake_);
    next_fake_ += (bytes + 511) / 256 * 256;
    return p;
  }

  int compute_capability_;  // emulated, e.g. 75 or 90: the attention path depends on it
  bool count_only_;
  uintptr_t next_fake_ = uintptr_t(1) << 44;
  k::LtGemm count_lt_;  // count-only: reports each GEMM with a fused epilogue as accepted
  float* count_bias_grad_ = static_cast<float*>(fake(sizeof(float) * k::kBiasGradCapacity));  // count-only
  std::vector<char> scratch_;
  std::unique_ptr<char[]> weight_copies_;
  std::vector<float> rope_table_;
  size_t weight_copies_bytes_ = 0;
  std::unique_ptr<Backend> cpu_ = make_cpu_backend();  // memory
};

}  // namespace

std::unique_ptr<Backend> make_kernel_model_backend(int compute_capability, bool count_only) {
  return std::make_unique<KernelModelBackend>(compute_capability, count_only);
}

KernelModelCounts kernel_model_counts() { return {kernel_model::launches_counted, kernel_model::gemms_counted}; }

}  // namespace ember
