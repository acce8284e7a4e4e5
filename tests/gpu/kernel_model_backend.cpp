// A Backend whose ops run the CUDA backend's own kernels and launchers (cuda/cuda_<family>.cu, compiled here as
// plain C++) under the kernel model (kernel_model.h), on host memory. The matmul ops, which the CUDA backend hands to
// cuBLAS and cuBLASLt, are the CPU backend's here, and memory is the CPU backend's. test_cuda_ops_model runs the
// gpu op tests (test_cuda_ops.cpp) against it, so every kernel is exercised wherever the CUDA headers are.
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
#include <vector>

#include "backend/backend.h"
#include "core/dtype.h"
#include "core/error.h"
#include "kernel_model_backend.h"

#define cuda cuda_model
#include "kernel_model.h"  // before the kernels
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
  void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp, int B, int T,
                        int C) override {
    k::launch_encoder_backward(dwte, dwpe, dout, inp, B, T, C, kNoStream);
  }

  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                         int N, int C) override {
    k::launch_layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, kNoStream);
  }
  void residual_layernorm_forward(float* residual, float* out, float* mean, float* rstd, const float* a, const float* b,
                                  const float* weight, const float* bias, int N, int C) override {
    k::launch_residual_layernorm_forward(residual, out, mean, rstd, a, b, weight, bias, N, C, kNoStream);
  }
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, const float* mean, const float* rstd, int N, int C) override {
    k::launch_layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, kNoStream);
  }

  // GEMMs: the CPU backend's, at this backend's matmul precision.
  void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int IC,
                      int OC) override {
    cpu_->set_matmul_precision(matmul_precision());
    cpu_->matmul_forward(out, inp, weight, bias, N, IC, OC);
  }
  void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                       const float* weight, int N, int IC, int OC) override {
    cpu_->set_matmul_precision(matmul_precision());
    cpu_->matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, IC, OC);
  }
  void matmul_forward_transposed(float* out, const float* inp, const float* wte, int N, int C, int V) override {
    cpu_->set_matmul_precision(matmul_precision());
    cpu_->matmul_forward_transposed(out, inp, wte, N, C, V);
  }
  void matmul_backward_transposed(float* dinp, float* dwte, const float* dout, const float* inp, const float* wte,
                                  int N, int C, int V) override {
    cpu_->set_matmul_precision(matmul_precision());
    cpu_->matmul_backward_transposed(dinp, dwte, dout, inp, wte, N, C, V);
  }

  // Attention as CudaBackend chooses it on sm_80 and newer: the tensor-core kernels where attention_in_bf16 holds.
  void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH) override {
    if (NH > 0 && C % NH == 0 && attention_in_bf16(matmul_precision(), C / NH))
      k::launch_attention_forward_tc(out, lse, qkv, B, T, C, NH, kNoStream);
    else
      k::launch_attention_forward(out, lse, qkv, B, T, C, NH, kNoStream);
  }
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse, int B,
                          int T, int C, int NH) override {
    std::vector<float> delta(size_t(B) * NH * T);
    if (NH > 0 && C % NH == 0 && attention_in_bf16(matmul_precision(), C / NH))
      k::launch_attention_backward_tc(dqkv, delta.data(), dout, qkv, out, lse, B, T, C, NH, kNoStream);
    else
      k::launch_attention_backward(dqkv, delta.data(), dout, qkv, out, lse, B, T, C, NH, kNoStream);
  }

  void gelu_forward(float* out, const float* inp, size_t n) override { k::launch_gelu_forward(out, inp, n, kNoStream); }
  void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) override {
    k::launch_gelu_backward(dinp, inp, dout, n, kNoStream);
  }

  void add(float* out, const float* a, const float* b, size_t n) override { k::launch_add(out, a, b, n, kNoStream); }
  void accumulate(float* dst, const float* src, size_t n) override { k::launch_accumulate(dst, src, n, kNoStream); }
  void scale(float* x, float s, size_t n) override { k::launch_scale(x, s, n, kNoStream); }

  void crossentropy_forward(float* losses, const float* logits, const int32_t* targets, int N, int V) override {
    k::launch_crossentropy_forward(losses, logits, targets, N, V, kNoStream);
  }
  void crossentropy_backward(float* dlogits, const float* logits, const int32_t* targets, float dloss, int N,
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
    k::launch_adamw_update_segments(params, grads, m, v, segs, int(nseg), segs[nseg - 1].end - segs[0].begin, lr,
                                    beta1, beta2, eps, k::adamw_inv_bias_correction(beta1, t),
                                    k::adamw_inv_bias_correction(beta2, t), kNoStream);
  }

 private:
  std::unique_ptr<Backend> cpu_ = make_cpu_backend();
};

}  // namespace

std::unique_ptr<Backend> make_kernel_model_backend() { return std::make_unique<KernelModelBackend>(); }

}  // namespace ember
