// CUDA backend: softmax cross-entropy (forward losses, backward dlogits) and the sampling softmax.
// One block per row with block-wide max and sum reductions (fixed trees), so any V works, 50257 included. The
// cross-entropy's logits and dlogits may be stored in fp32 or bf16 (read widened, written rounded; sums in fp32), in
// rows ld >= V apart, whose columns from V on are left out (and written as zero by the backward kernels).
#include <cmath>

#include "core/error.h"
#include "cuda_check.h"
#include "cuda_common.cuh"
#include "cuda_ops.h"

namespace ember {
namespace cuda {
namespace {

// 512 threads per row: at V = 50257 each thread walks ~98 elements per pass, and N = 8192 rows give 8192 blocks.
constexpr int kRowThreads = 512;

// -log softmax(x)[target] = max + log(sum e^(x - max)) - x[target]. An out-of-range target gives NaN: the ids
// are device data, so they cannot be checked on the host without a sync, and a NaN loss is reported downstream.
template <typename InT>
__global__ void __launch_bounds__(kRowThreads) crossentropy_forward_kernel(float* losses,           // (N)
                                                                           const InT* logits,       // (N, ld)
                                                                           const int32_t* targets,  // (N)
                                                                           int V, int ld) {
  __shared__ float scratch[kWarpSize];
  const InT* x = logits + size_t(blockIdx.x) * ld;
  float m = -INFINITY;
  for (int j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, load(&x[j]));
  m = block_reduce<float, true>(m, scratch);
  float sum = 0.0f;
  for (int j = threadIdx.x; j < V; j += blockDim.x) sum += expf(load(&x[j]) - m);
  sum = block_reduce<float, false>(sum, scratch);
  if (threadIdx.x == 0) {
    const int t = targets[blockIdx.x];
    losses[blockIdx.x] = t >= 0 && t < V ? m + logf(sum) - load(&x[t]) : NAN;
  }
}

// y = a * softmax(x * inv_t) - (j == target ? a : 0), y allowed to alias x: every thread reads x[j] before it
// writes y[j] at the same j, and the reductions finish (block barriers) before any write. y[V..ld) is zeroed.
template <typename OutT, typename InT>
__global__ void __launch_bounds__(kRowThreads) scaled_softmax_kernel(OutT* probs,        // (N, ld), may alias logits
                                                                     const InT* logits,  // (N, ld)
                                                                     const int32_t* targets,  // (N) or null
                                                                     float inv_t, float a, int V, int ld) {
  __shared__ float scratch[kWarpSize];
  const InT* x = logits + size_t(blockIdx.x) * ld;
  OutT* y = probs + size_t(blockIdx.x) * ld;
  for (int j = V + threadIdx.x; j < ld; j += blockDim.x) store(&y[j], 0.0f);  // never read below
  float m = -INFINITY;
  for (int j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, load(&x[j]));
  const float shift = block_reduce<float, true>(m, scratch) * inv_t;  // max(x / t) = max(x) / t for t > 0
  float sum = 0.0f;
  for (int j = threadIdx.x; j < V; j += blockDim.x) sum += expf(load(&x[j]) * inv_t - shift);
  sum = block_reduce<float, false>(sum, scratch);
  const float s = a / sum;
  int t = -1;
  if (targets) {
    t = targets[blockIdx.x];
    if (t < 0 || t >= V) {  // out of range: a NaN row (see crossentropy_forward_kernel)
      for (int j = threadIdx.x; j < V; j += blockDim.x) store(&y[j], NAN);
      return;
    }
  }
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    const float p = expf(load(&x[j]) * inv_t - shift) * s;
    store(&y[j], j == t ? p - a : p);
  }
}

// The softmax statistics of a set of values: their max m and the sum s of e^(x - m). Two sets merge into the
// statistics of their union; merging is commutative (bitwise), so xor butterflies leave every lane the same result.
struct MaxSum {
  float m, s;
};
__device__ inline MaxSum merge(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, 0.0f};
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}
// Block-wide merge for blockDim.x a multiple of 32; every thread gets the result; the trailing barrier lets the
// caller reuse the scratch (32 floats each).
__device__ inline MaxSum block_merge(MaxSum v, float* m_scratch, float* s_scratch) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize, nwarps = blockDim.x / kWarpSize;
  for (int o = kWarpSize / 2; o > 0; o >>= 1)
    v = merge(v, {__shfl_xor_sync(kFullMask, v.m, o), __shfl_xor_sync(kFullMask, v.s, o)});
  if (lane == 0) m_scratch[warp] = v.m, s_scratch[warp] = v.s;
  __syncthreads();
  MaxSum r = lane < nwarps ? MaxSum{m_scratch[lane], s_scratch[lane]} : MaxSum{-INFINITY, 0.0f};
  for (int o = kWarpSize / 2; o > 0; o >>= 1)
    r = merge(r, {__shfl_xor_sync(kFullMask, r.m, o), __shfl_xor_sync(kFullMask, r.s, o)});
  __syncthreads();
  return r;
}

// The fused classifier, one block per row: one pass takes the max and the sum of exponentials together (online
// softmax), the loss -log p[target] = m + log s - x[target] is taken before any element is overwritten, and a second
// pass writes dloss * (softmax - onehot) over the logits. An out-of-range target gives a NaN loss and row, as the
// two separate kernels do.
template <typename T>
__global__ void __launch_bounds__(kRowThreads) crossentropy_forward_backward_kernel(float* losses,  // (N)
                                                                                    T* logits,      // (N, ld) in/out
                                                                                    const int32_t* targets,  // (N)
                                                                                    float dloss, int V, int ld) {
  __shared__ float m_scratch[kWarpSize], s_scratch[kWarpSize];
  __shared__ float target_logit;
  T* x = logits + size_t(blockIdx.x) * ld;
  for (int j = V + threadIdx.x; j < ld; j += blockDim.x) store(&x[j], 0.0f);  // never read below
  MaxSum acc{-INFINITY, 0.0f};
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    const float v = load(&x[j]);
    if (v > acc.m) {
      acc.s = acc.s * expf(acc.m - v) + 1.0f;
      acc.m = v;
    } else if (v != -INFINITY) {  // e^-inf adds nothing (and -inf - -inf would be NaN)
      acc.s += expf(v - acc.m);
    }
  }
  acc = block_merge(acc, m_scratch, s_scratch);
  const int t = targets[blockIdx.x];
  const bool valid = t >= 0 && t < V;
  if (threadIdx.x == 0) target_logit = valid ? load(&x[t]) : NAN;
  __syncthreads();  // x[t] is read before the pass below overwrites it
  if (threadIdx.x == 0) losses[blockIdx.x] = valid ? acc.m + logf(acc.s) - target_logit : NAN;
  if (!valid) {
    for (int j = threadIdx.x; j < V; j += blockDim.x) store(&x[j], NAN);
    return;
  }
  const float scale = dloss / acc.s;
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    const float p = expf(load(&x[j]) - acc.m) * scale;
    store(&x[j], j == t ? p - dloss : p);
  }
}

template <typename OutT, typename InT>
void scaled_softmax(unsigned rows, cudaStream_t stream, OutT* probs, const InT* logits, const int32_t* targets,
                    float inv_t, float a, int V, int ld) {
  auto* const kernel = scaled_softmax_kernel<OutT, InT>;  // one macro argument
  // A row (V values, far more than L1 keeps per block at GPT-2's vocabulary) is read in three passes and written in
  // one, with its padding.
  const double nv = double(rows) * V;
  report_launch(targets ? "crossentropy_backward" : "softmax_forward", 3.0 * sizeof(InT) * nv + 4.0 * rows,
                double(sizeof(OutT)) * rows * ld, 6.0 * nv);
  EMBER_KERNEL_LAUNCH(kernel, rows, kRowThreads, stream, probs, logits, targets, inv_t, a, V, ld);
  EMBER_CUDA_LAUNCH_CHECK();
}

}  // namespace

void launch_crossentropy_forward(float* losses, TensorIn logits, const int32_t* targets, int N, int V, int ld,
                                 cudaStream_t stream) {
  EMBER_ASSERT(N > 0 && V > 0 && ld >= V, "crossentropy_forward: N and V must be positive, ld at least V");
  // Two passes over each row (max, then the sum of exponentials), a target and a loss per row.
  const double nv = double(N) * V;
  report_launch("crossentropy_forward", (logits.bf16 ? 2.0 : 4.0) * 2.0 * nv + 4.0 * N, 4.0 * N, 4.0 * nv);
  if (logits.bf16)
    EMBER_KERNEL_LAUNCH(crossentropy_forward_kernel<__nv_bfloat16>, unsigned(N), kRowThreads, stream, losses,
                        device_bf16(logits), targets, V, ld);
  else
    EMBER_KERNEL_LAUNCH(crossentropy_forward_kernel<float>, unsigned(N), kRowThreads, stream, losses, logits.f32(),
                        targets, V, ld);
  EMBER_CUDA_LAUNCH_CHECK();
}

void launch_crossentropy_backward(TensorOut dlogits, TensorIn logits, const int32_t* targets, float dloss, int N, int V,
                                  int ld, cudaStream_t stream) {
  EMBER_ASSERT(N > 0 && V > 0 && ld >= V, "crossentropy_backward: N and V must be positive, ld at least V");
  const unsigned grid = unsigned(N);
  if (dlogits.bf16 && logits.bf16)
    scaled_softmax(grid, stream, device_bf16(dlogits), device_bf16(logits), targets, 1.0f, dloss, V, ld);
  else if (dlogits.bf16)
    scaled_softmax(grid, stream, device_bf16(dlogits), logits.f32(), targets, 1.0f, dloss, V, ld);
  else if (logits.bf16)
    scaled_softmax(grid, stream, dlogits.f32(), device_bf16(logits), targets, 1.0f, dloss, V, ld);
  else
    scaled_softmax(grid, stream, dlogits.f32(), logits.f32(), targets, 1.0f, dloss, V, ld);
}

void launch_crossentropy_forward_backward(float* losses, TensorOut logits, const int32_t* targets, float dloss, int N,
                                          int V, int ld, cudaStream_t stream) {
  EMBER_ASSERT(N > 0 && V > 0 && ld >= V, "crossentropy_forward_backward: N and V must be positive, ld at least V");
  // Each row read twice (it is far more than L1 keeps per block at GPT-2's vocabulary) and written once, with its
  // padding.
  const double nv = double(N) * V, size = logits.bf16 ? 2.0 : 4.0;
  report_launch("crossentropy_forward_backward", 2.0 * size * nv + 4.0 * N, size * double(N) * ld + 4.0 * N, 7.0 * nv);
  if (logits.bf16)
    EMBER_KERNEL_LAUNCH(crossentropy_forward_backward_kernel<__nv_bfloat16>, unsigned(N), kRowThreads, stream, losses,
                        device_bf16(logits), targets, dloss, V, ld);
  else
    EMBER_KERNEL_LAUNCH(crossentropy_forward_backward_kernel<float>, unsigned(N), kRowThreads, stream, losses,
                        logits.f32(), targets, dloss, V, ld);
  EMBER_CUDA_LAUNCH_CHECK();
}

void launch_softmax_forward(float* probs, const float* logits, float temperature, int N, int V, cudaStream_t stream) {
  EMBER_ASSERT(N > 0 && V > 0, "softmax_forward: N and V must be positive");
  EMBER_ASSERT(temperature > 0.0f, "softmax: temperature must be positive");
  scaled_softmax(unsigned(N), stream, probs, logits, nullptr, 1.0f / temperature, 1.0f, V, V);
}

}  // namespace cuda

}  // namespace ember
