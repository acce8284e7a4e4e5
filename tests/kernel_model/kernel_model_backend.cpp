// A Backend whose ops run the CUDA backend's own kernels and launchers (cuda/cuda_<family>.cu, compiled here as
// plain C++) under the kernel model (kernel_model.h), on host memory (the CPU backend's). The matmul launchers call
// a model of cuBLAS's two GEMM entry points (below) and never cuBLASLt. test_cuda_ops_model runs the gpu op tests
// (tests/gpu/test_cuda_ops_*.cpp) against it, so every kernel and launcher is exercised wherever the CUDA headers are.
//
// The launchers keep their names: this translation unit renames the namespace ember::cuda to ember::cuda_model with
// a macro, so its copies never meet the CUDA backend's at link time. System headers come first, before the macro.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/backend.h"
#include "core/dtype.h"
#include "core/error.h"
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
inline cublasStatus_t gemm_ex(cublasHandle_t, cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k,
                              const void* alpha, const void* A, cudaDataType a_type, int lda, const void* B,
                              cudaDataType b_type, int ldb, const void* beta, void* C, cudaDataType c_type, int ldc,
                              cublasComputeType_t compute, cublasGemmAlgo_t) {
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
#include "cuda_matmul.cu"
#undef cublasGemmEx
#undef cublasSgemm

#include "cuda_attention.cu"
#include "cuda_attention_tc.cu"
#include "cuda_elementwise.cu"
#include "cuda_encoder.cu"
#include "cuda_gelu.cu"
#include "cuda_layernorm.cu"
#include "cuda_loss.cu"
#include "cuda_optim.cu"
#undef cuda

namespace ember {
namespace {

namespace k = cuda_model;
cudaStream_t const kNoStream = nullptr;

class KernelModelBackend final : public Backend {
 public:
  std::string name() const override { return "kernel model (CUDA kernels on the CPU)"; }

  void* alloc(size_t bytes) override { return cpu_->alloc(bytes); }
  void free(void* ptr) override { cpu_->free(ptr); }
  void copy_to_device(void* dst, const void* src, size_t bytes) override { cpu_->copy_to_device(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { cpu_->copy_to_host(dst, src, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override { cpu_->copy(dst, src, bytes); }
  void zero(void* ptr, size_t bytes) override { cpu_->zero(ptr, bytes); }
  void synchronize() override {}

  void encoder_forward(float* out, const int32_t* inp, const float* wte, const float* wpe, int B, int T,
                       int C) override {
    k::launch_encoder_forward(out, inp, wte, wpe, B, T, C, kNoStream);
  }
  void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp, int B, int T, int C) override {
    k::launch_encoder_backward(dwte, dwpe, dout, inp, B, T, C, kNoStream);
  }

  void layernorm_forward(TensorOut out, float* mean, float* rstd, const float* inp, const float* weight,
                         const float* bias, int N, int C) override {
    k::launch_layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, kNoStream);
  }
  void residual_layernorm_forward(float* residual, TensorOut out, float* mean, float* rstd, const float* a,
                                  const float* b, const float* weight, const float* bias, int N, int C) override {
    k::launch_residual_layernorm_forward(residual, out, mean, rstd, a, b, weight, bias, N, C, kNoStream);
  }
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, const float* mean, const float* rstd, int N, int C) override {
    k::launch_layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, kNoStream);
  }

  // The dense layers and the lm_head through cuda_matmul.cu's launchers on the cuBLAS model above, without
  // cuBLASLt (no fused epilogues: the bias and column-sum kernels instead). The scratch for dout in bf16 holds
  // kScratchRows rows, so that bf16 backward passes go in several blocks of rows, as the lm_head's does on the GPU.
  static constexpr int kScratchRows = 3;
  struct Scratch {  // 256-byte aligned, as the device's
    std::vector<char> bytes;
    void* get(size_t n) {
      bytes.resize(n + 256);
      return bytes.data() + (256 - reinterpret_cast<uintptr_t>(bytes.data()) % 256) % 256;
    }
  } scratch_;
  void matmul_forward(TensorOut out, TensorIn inp, TensorIn weight, TensorIn bias, int N, int IC, int OC) override {
    check_gemm_inputs(inp, weight, "matmul_forward");
    check_gemm_output(out, bias, "matmul_forward");
    const size_t n = k::matmul_scratch_bytes(bf16(), inp, size_t(N) * IC, size_t(IC) * OC, N, 0, false, 0);
    k::launch_matmul_forward(out, inp, weight, bias, N, IC, OC, bf16(), nullptr, nullptr, scratch_.get(n), n,
                             kNoStream);
  }
  void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, TensorIn inp, TensorIn weight,
                       int N, int IC, int OC) override {
    check_gemm_inputs(inp, weight, "matmul_backward");
    const size_t n = k::matmul_scratch_bytes(bf16(), inp, size_t(N) * IC, size_t(IC) * OC, N, OC, dbias != nullptr,
                                             size_t(kScratchRows) * OC * sizeof(BFloat16));
    k::launch_matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, IC, OC, bf16(), nullptr, nullptr, nullptr, 0,
                              scratch_.get(n), n, kNoStream);
  }
  void matmul_forward_transposed(TensorOut out, TensorIn inp, TensorIn wte, int N, int C, int V) override {
    check_gemm_inputs(inp, wte, "matmul_forward_transposed");
    check_gemm_output(out, nullptr, "matmul_forward_transposed");
    const size_t n = k::matmul_scratch_bytes(bf16(), inp, size_t(N) * C, size_t(V) * C, N, 0, false, 0);
    k::launch_matmul_forward_transposed(out, inp, wte, N, C, V, bf16(), nullptr, scratch_.get(n), n, kNoStream);
  }
  void matmul_backward_transposed(float* dinp, float* dwte, TensorIn dout, TensorIn inp, TensorIn wte, int N, int C,
                                  int V) override {
    check_gemm_inputs(inp, wte, "matmul_backward_transposed");
    check_gemm_dout(dout, "matmul_backward_transposed");
    const size_t n = k::matmul_scratch_bytes(bf16(), inp, size_t(N) * C, size_t(V) * C, N, dout.bf16 ? 0 : V, false,
                                             size_t(kScratchRows) * V * sizeof(BFloat16));
    k::launch_matmul_backward_transposed(dinp, dwte, dout, inp, wte, N, C, V, bf16(), nullptr, scratch_.get(n), n,
                                         kNoStream);
  }

  // Attention as CudaBackend chooses it on sm_80 and newer: the tensor-core kernels where attention_in_bf16 holds,
  // which bf16-stored qkv and out require (the fp32 kernels take fp32 ones).
  void attention_forward(TensorOut out, float* lse, TensorIn qkv, int B, int T, int C, int NH) override {
    check_attention_storage(qkv, out, C, NH, "attention_forward");
    if (attention_in_bf16(matmul_precision(), C / NH))
      k::launch_attention_forward_tc(out, lse, qkv, B, T, C, NH, kNoStream);
    else
      k::launch_attention_forward(out.f32(), lse, qkv.f32(), B, T, C, NH, kNoStream);
  }
  void attention_backward(float* dqkv, const float* dout, TensorIn qkv, TensorIn out, const float* lse, int B, int T,
                          int C, int NH) override {
    check_attention_storage(qkv, out, C, NH, "attention_backward");
    std::vector<float> delta(size_t(B) * NH * T);
    if (attention_in_bf16(matmul_precision(), C / NH))
      k::launch_attention_backward_tc(dqkv, delta.data(), dout, qkv, out, lse, B, T, C, NH, kNoStream);
    else
      k::launch_attention_backward(dqkv, delta.data(), dout, qkv.f32(), out.f32(), lse, B, T, C, NH, kNoStream);
  }

  void gelu_forward(TensorOut out, TensorIn inp, size_t n) override { k::launch_gelu_forward(out, inp, n, kNoStream); }
  void gelu_backward(float* dinp, TensorIn inp, const float* dout, size_t n) override {
    k::launch_gelu_backward(dinp, inp, dout, n, kNoStream);
  }

  void add(float* out, const float* a, const float* b, size_t n) override { k::launch_add(out, a, b, n, kNoStream); }
  void accumulate(float* dst, const float* src, size_t n) override { k::launch_accumulate(dst, src, n, kNoStream); }
  void scale(float* x, float s, size_t n) override { k::launch_scale(x, s, n, kNoStream); }
  void cast_to_bf16(BFloat16* out, const float* inp, size_t n) override {
    k::launch_cast_to_bf16(out, inp, n, kNoStream);
  }

  void crossentropy_forward(float* losses, TensorIn logits, const int32_t* targets, int N, int V) override {
    k::launch_crossentropy_forward(losses, logits, targets, N, V, kNoStream);
  }
  void crossentropy_backward(TensorOut dlogits, TensorIn logits, const int32_t* targets, float dloss, int N,
                             int V) override {
    k::launch_crossentropy_backward(dlogits, logits, targets, dloss, N, V, kNoStream);
  }
  void softmax_forward(float* probs, const float* logits, float temperature, int N, int V) override {
    k::launch_softmax_forward(probs, logits, temperature, N, V, kNoStream);
  }

  double sum_squares(const float* x, size_t n) override {
    std::vector<double> partials(k::kSumSquaresBlocks + 1);
    k::launch_sum_squares(partials.data(), x, n, kNoStream);
    return partials.back();
  }
  void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr, float beta1, float beta2,
                    float eps, float weight_decay, int t) override {
    k::launch_adamw_update(params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay,
                           k::adamw_inv_bias_correction(beta1, t), k::adamw_inv_bias_correction(beta2, t), kNoStream);
  }
  void adamw_update_segments(float* params, const float* grads, float* m, float* v, const AdamWSegment* segs,
                             size_t nseg, float lr, float beta1, float beta2, float eps, int t) override {
    if (nseg == 0) return;
    k::launch_adamw_update_segments(params, grads, m, v, segs, int(nseg), segs[nseg - 1].end - segs[0].begin, lr, beta1,
                                    beta2, eps, k::adamw_inv_bias_correction(beta1, t),
                                    k::adamw_inv_bias_correction(beta2, t), kNoStream);
  }

 private:
  bool bf16() const { return matmul_precision() == MatmulPrecision::bf16; }
  std::unique_ptr<Backend> cpu_ = make_cpu_backend();  // memory
};

}  // namespace

std::unique_ptr<Backend> make_kernel_model_backend() { return std::make_unique<KernelModelBackend>(); }

}  // namespace ember
