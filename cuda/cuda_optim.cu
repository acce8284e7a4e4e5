// CUDA backend: the fp64 sum of squares behind gradient clipping, and the AdamW parameter update.
// The sum is a fixed two-pass tree (1024 block partials, then one block), so it is bitwise reproducible.
#include <cmath>

#include "core/error.h"
#include "cuda_backend.h"
#include "cuda_check.h"
#include "cuda_common.cuh"
#include "cuda_ops.h"

namespace ember {
namespace cuda {
namespace {

// 1024 blocks x 256 threads is the fixed decomposition (independent of the device's SM count, so two GPUs agree):
// at 124M parameters each thread sums ~470 elements, ~8 waves of resident blocks on an H100.
constexpr int kSumSquaresThreads = 256;

__global__ void __launch_bounds__(kSumSquaresThreads)
    sum_squares_partial_kernel(double* partials,  // (kSumSquaresBlocks)
                               const float* x,    // (n)
                               size_t n) {
  __shared__ double scratch[kWarpSize];
  double acc = 0.0;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    acc += double(x[i]) * double(x[i]);
  acc = block_reduce<double, false>(acc, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__global__ void __launch_bounds__(kSumSquaresThreads)
    sum_squares_final_kernel(double* partials) {  // (kSumSquaresBlocks + 1); the total goes to the last slot
  __shared__ double scratch[kWarpSize];
  double acc = 0.0;
  for (int i = threadIdx.x; i < kSumSquaresBlocks; i += blockDim.x) acc += partials[i];
  acc = block_reduce<double, false>(acc, scratch);
  if (threadIdx.x == 0) partials[kSumSquaresBlocks] = acc;
}

// The CPU formula, in the same order: m, v, bias-corrected mhat and vhat, then p -= lr (mhat / (sqrt(vhat) + eps)
// + wd p), with the decoupled decay inside the same update.
__global__ void adamw_kernel(float* params,       // (n)
                             const float* grads,  // (n)
                             float* m,            // (n)
                             float* v,            // (n)
                             size_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                             float inv_bc1, float inv_bc2) {
  const float a1 = 1.0f - beta1, a2 = 1.0f - beta2;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float g = grads[i];
    const float mi = beta1 * m[i] + a1 * g;
    const float vi = beta2 * v[i] + a2 * g * g;
    m[i] = mi;
    v[i] = vi;
    const float mhat = mi * inv_bc1, vhat = vi * inv_bc2;
    params[i] -= lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * params[i]);
  }
}

}  // namespace

void launch_sum_squares(double* partials, const float* x, size_t n, cudaStream_t stream) {
  // n = 0 still runs both passes: every partial is then 0 and the result slot is written.
  sum_squares_partial_kernel<<<kSumSquaresBlocks, kSumSquaresThreads, 0, stream>>>(partials, x, n);
  EMBER_CUDA_LAUNCH_CHECK();
  sum_squares_final_kernel<<<1, kSumSquaresThreads, 0, stream>>>(partials);
  EMBER_CUDA_LAUNCH_CHECK();
}

void launch_adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr, float beta1,
                         float beta2, float eps, float weight_decay, float inv_bc1, float inv_bc2,
                         cudaStream_t stream) {
  if (n == 0) return;
  adamw_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(params, grads, m, v, n, lr, beta1, beta2,
                                                                          eps, weight_decay, inv_bc1, inv_bc2);
  EMBER_CUDA_LAUNCH_CHECK();
}

}  // namespace cuda

double CudaBackend::sum_squares(const float* x,  // (n)
                                size_t n) {
  cuda::launch_sum_squares(reduce_, x, n, stream_);
  double total = 0.0;
  EMBER_CUDA_CHECK(cudaMemcpyAsync(&total, reduce_ + cuda::kSumSquaresBlocks, sizeof(double),
                                   cudaMemcpyDeviceToHost, stream_));
  EMBER_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return total;
}

void CudaBackend::adamw_update(float* params,       // (n)
                               const float* grads,  // (n)
                               float* m,            // (n)
                               float* v,            // (n)
                               size_t n, float lr, float beta1, float beta2, float eps, float weight_decay, int t) {
  EMBER_ASSERT(t >= 1, "adamw_update: the step t is 1-based");
  // Bias corrections in fp64 on the host, exactly as the CPU backend computes them.
  const float inv_bc1 = float(1.0 / (1.0 - std::pow(double(beta1), t)));
  const float inv_bc2 = float(1.0 / (1.0 - std::pow(double(beta2), t)));
  cuda::launch_adamw_update(params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, inv_bc1, inv_bc2, stream_);
}

}  // namespace ember
