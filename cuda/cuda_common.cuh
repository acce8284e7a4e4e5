// Device helpers shared by the CUDA op families: grid sizing and deterministic warp and block reductions.
// Every reduction is a fixed tree (xor butterfly, then one warp over the per-warp results): no atomics anywhere.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>

#include "core/dtype.h"
#include "cuda_ops.h"  // piece_bytes
#include "launch_cost.h"

// Every kernel launch: kernel<<<grid, block, 0, stream>>>(args...). A macro, so that the kernels and their launchers
// also compile as plain C++ under tests/kernel_model/kernel_model.h (EMBER_KERNEL_MODEL), which runs them on the CPU.
#ifdef EMBER_KERNEL_MODEL
#define EMBER_KERNEL_LAUNCH(kernel, grid, block, stream, ...)            \
  ((void)(stream), ::ember::kernel_model::count_only                     \
                       ? void(++::ember::kernel_model::launches_counted) \
                       : ::ember::kernel_model::launch(kernel, dim3(grid), dim3(block), __VA_ARGS__))
#else
#define EMBER_KERNEL_LAUNCH(kernel, grid, block, stream, ...) kernel<<<grid, block, 0, stream>>>(__VA_ARGS__)
#endif

namespace ember::cuda {

constexpr int kWarpSize = 32;
constexpr unsigned kFullMask = 0xffffffffu;

// Blocks for n items at `per_block` items each; asserts in the launchers keep the result within the grid limits.
inline unsigned ceil_div(size_t n, size_t per_block) { return unsigned((n + per_block - 1) / per_block); }

// Elementwise kernels use grid-stride loops with at most this many blocks of 256 threads: 4096 x 256 = 1M threads
// is ~8 waves of 2048 resident threads on 132 SMs (H100), enough to saturate memory bandwidth.
constexpr int kElementwiseThreads = 256;
constexpr size_t kMaxElementwiseBlocks = 4096;
inline unsigned elementwise_blocks(size_t n) {
  const size_t b = (n + kElementwiseThreads - 1) / kElementwiseThreads;
  return unsigned(b < 1 ? 1 : (b > kMaxElementwiseBlocks ? kMaxElementwiseBlocks : b));
}

// Column sums over rows (the bias and layernorm parameter gradients): blocks of kColTile columns x kRowLanes row
// lanes; lane y sums rows y, y + kRowLanes, ... in order, then the lanes' partials are added in lane order. The split
// depends only on the shape, so the sums are deterministic.
constexpr int kColTile = 32, kRowLanes = 16;

// Stores an fp32 result into fp32 or bf16 storage (core/dtype.h's TensorOut): bf16 rounds to nearest even.
__device__ inline void store(float* p, float v) { *p = v; }
__device__ inline void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

// An element of fp32 or bf16 storage in bf16: an fp32 one rounded to nearest even, a bf16 one as it is.
__device__ inline __nv_bfloat16 as_bf16(float v) { return __float2bfloat16_rn(v); }
__device__ inline __nv_bfloat16 as_bf16(__nv_bfloat16 v) { return v; }
// The same element's value as a float: rounded to bf16, or widened (exactly).
template <typename T>
__device__ inline float bf16_value(T v) {
  return __bfloat162float(as_bf16(v));
}
// Rotary position embeddings (core/rope.h): the pair (a, b) = (x_d, x_{d+half}) of a head's row rotated by the angle
// with cosine c and sine s (rope_rotate), and a gradient's pair carried back through it (rope_rotate_back). The
// products are kept out of FMAs, so that both are the CPU's bit for bit.
__device__ inline float rope_first(float a, float b, float c, float s) {
  return __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
}
__device__ inline float rope_second(float a, float b, float c, float s) {
  return __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
}
__device__ inline float rope_back_first(float a, float b, float c, float s) {
  return __fadd_rn(__fmul_rn(a, c), __fmul_rn(b, s));
}
__device__ inline float rope_back_second(float a, float b, float c, float s) {
  return __fsub_rn(__fmul_rn(b, c), __fmul_rn(a, s));
}
// Element d of a head's row x rotated by its position, and of a gradient row g carried back; cos and sin are the
// position's table row of half = HS/2 values.
__device__ inline float rope_value(const float* x, int d, int half, const float* cos, const float* sin) {
  if (d < half) return rope_first(x[d], x[d + half], cos[d], sin[d]);
  const int e = d - half;
  return rope_second(x[e], x[d], cos[e], sin[e]);
}
__device__ inline float rope_back_value(const float* g, int d, int half, const float* cos, const float* sin) {
  if (d < half) return rope_back_first(g[d], g[d + half], cos[d], sin[d]);
  const int e = d - half;
  return rope_back_second(g[e], g[d], cos[e], sin[e]);
}

// A layer's attention schedule (cuda_ops.h AttentionSchedule) as every attention kernel applies it: the first key
// query i sees, and the score of key j for query i from its product q . k, scaled and with its ALiBi bias.
__host__ __device__ inline int attention_first_key(const AttentionSchedule& sch, int i) {
  return sch.window > 0 && i > sch.window ? i - sch.window : 0;
}
// How far back query i sees: key j when i - j <= window_reach (every earlier key without a window).
__host__ __device__ inline int window_reach(const AttentionSchedule& sch) {
  return sch.window > 0 ? sch.window : 0x7fffffff;
}
__device__ inline float biased_score(float dot, float scale, const AttentionSchedule& sch, int i, int j) {
  const float s = dot * scale;
  return sch.alibi_slope != 0.0f ? __fsub_rn(s, __fmul_rn(sch.alibi_slope, float(i - j))) : s;
}

// An element of fp32 or bf16 storage as a float, as stored.
__device__ inline float load(const float* p) { return *p; }
__device__ inline float load(const __nv_bfloat16* p) { return __bfloat162float(*p); }

// A bf16-stored TensorIn or TensorOut (core/dtype.h) as the device's bf16 type.
inline const __nv_bfloat16* device_bf16(TensorIn t) { return reinterpret_cast<const __nv_bfloat16*>(t.b16()); }
inline __nv_bfloat16* device_bf16(TensorOut t) { return reinterpret_cast<__nv_bfloat16*>(t.b16()); }

// Xor butterflies: addition and max are commutative, so every lane ends with the bitwise-same result.
template <typename T>
__device__ inline T warp_sum(T v) {
  for (int o = kWarpSize / 2; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}
__device__ inline float warp_max(float v) {
  for (int o = kWarpSize / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// Block-wide sum or max for blockDim.x a multiple of 32 (up to 1024); every thread gets the result. `scratch` is
// 32 elements of shared memory; the trailing barrier lets the caller reuse it at once.
template <typename T, bool kMax>
__device__ inline T block_reduce(T v, T* scratch) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize, nwarps = blockDim.x / kWarpSize;
  if constexpr (kMax)
    v = warp_max(v);
  else
    v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const T identity = kMax ? T(-INFINITY) : T(0);
  T r = lane < nwarps ? scratch[lane] : identity;
  if constexpr (kMax)
    r = warp_max(r);
  else
    r = warp_sum(r);
  __syncthreads();
  return r;
}

}  // namespace ember::cuda
