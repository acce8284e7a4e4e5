// CUDA backend: the fp64 sum of squares behind gradient clipping, and the AdamW parameter update.
// The sum is a fixed two-pass tree (1024 block partials, then one block), so it is bitwise reproducible.
#include <cmath>

#include "backend/backend.h"  // AdamWSegment
#include "core/error.h"
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

// The CPU formula, in the same order: the gradient times grad_scale, m, v, bias-corrected mhat and vhat, then
// p -= lr (mhat / (sqrt(vhat) + eps) + wd p), with the decoupled decay inside the same update.
__device__ inline void adamw_element(float* params, const float* grads, float* m, float* v, size_t i, float lr,
                                     float beta1, float beta2, float eps, float weight_decay, float inv_bc1,
                                     float inv_bc2, float grad_scale) {
  const float g = grads[i] * grad_scale;
  const float mi = beta1 * m[i] + (1.0f - beta1) * g;
  const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
  m[i] = mi;
  v[i] = vi;
  const float mhat = mi * inv_bc1, vhat = vi * inv_bc2;
  params[i] -= lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * params[i]);
}

__global__ void adamw_kernel(float* params,       // (n)
                             const float* grads,  // (n)
                             float* m,            // (n)
                             float* v,            // (n)
                             size_t n, float lr, float beta1, float beta2, float eps, float weight_decay, float inv_bc1,
                             float inv_bc2, float grad_scale) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    adamw_element(params, grads, m, v, i, lr, beta1, beta2, eps, weight_decay, inv_bc1, inv_bc2, grad_scale);
}

// All segments in one grid-stride pass over [segs[0].begin, segs[nseg - 1].end): each thread finds the segment of
// its first element by bisection, then walks forward (its elements only grow); elements in gaps are skipped.
__global__ void adamw_segments_kernel(float* params, const float* grads, float* m, float* v,
                                      const AdamWSegment* segs,  // (nseg) device copy, ascending
                                      int nseg, float lr, float beta1, float beta2, float eps, float inv_bc1,
                                      float inv_bc2, float grad_scale) {
  const size_t first = segs[0].begin, last = segs[nseg - 1].end;
  size_t i = first + size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= last) return;
  int lo = 0, hi = nseg - 1;
  while (lo < hi) {  // the first segment whose end lies past i
    const int mid = (lo + hi) / 2;
    if (segs[mid].end > i)
      hi = mid;
    else
      lo = mid + 1;
  }
  int k = lo;
  for (; i < last; i += size_t(gridDim.x) * blockDim.x) {
    while (segs[k].end <= i) ++k;  // stops at nseg - 1 at the latest, since i < last
    if (i < segs[k].begin) continue;
    adamw_element(params, grads, m, v, i, lr, beta1, beta2, eps, segs[k].weight_decay, inv_bc1, inv_bc2, grad_scale);
  }
}

}  // namespace

void launch_sum_squares(double* partials, const float* x, size_t n, cudaStream_t stream) {
  // n = 0 still runs both passes: every partial is then 0 and the result slot is written.
  report_launch("sum_squares_partial", 4.0 * double(n), 8.0 * kSumSquaresBlocks, 2.0 * double(n));
  report_launch("sum_squares_final", 8.0 * kSumSquaresBlocks, 8.0, double(kSumSquaresBlocks));
  EMBER_KERNEL_LAUNCH(sum_squares_partial_kernel, kSumSquaresBlocks, kSumSquaresThreads, stream, partials, x, n);
  EMBER_CUDA_LAUNCH_CHECK();
  EMBER_KERNEL_LAUNCH(sum_squares_final_kernel, 1, kSumSquaresThreads, stream, partials);
  EMBER_CUDA_LAUNCH_CHECK();
}

void launch_adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr, float beta1,
                         float beta2, float eps, float weight_decay, float inv_bc1, float inv_bc2, float grad_scale,
                         cudaStream_t stream) {
  if (n == 0) return;
  // params, grads, m and v read; params, m and v written.
  report_launch("adamw_update", 16.0 * double(n), 12.0 * double(n), 12.0 * double(n));
  EMBER_KERNEL_LAUNCH(adamw_kernel, elementwise_blocks(n), kElementwiseThreads, stream, params, grads, m, v, n, lr,
                      beta1, beta2, eps, weight_decay, inv_bc1, inv_bc2, grad_scale);
  EMBER_CUDA_LAUNCH_CHECK();
}

void launch_adamw_update_segments(float* params, const float* grads, float* m, float* v, const AdamWSegment* segs,
                                  int nseg, size_t span, float lr, float beta1, float beta2, float eps, float inv_bc1,
                                  float inv_bc2, float grad_scale, cudaStream_t stream) {
  if (nseg == 0 || span == 0) return;
  // Over the span: params, grads, m and v read; params, m and v written (gaps between segments counted too).
  report_launch("adamw_update_segments", 16.0 * double(span), 12.0 * double(span), 12.0 * double(span));
  EMBER_KERNEL_LAUNCH(adamw_segments_kernel, elementwise_blocks(span), kElementwiseThreads, stream, params, grads, m, v,
                      segs, nseg, lr, beta1, beta2, eps, inv_bc1, inv_bc2, grad_scale);
  EMBER_CUDA_LAUNCH_CHECK();
}

}  // namespace cuda

}  // namespace ember
