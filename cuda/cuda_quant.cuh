// CUDA kernels of the int8 and fp8 quantization schemes (core/int8_quant.h, core/fp8_quant.h), bit for bit what the
// CPU backend computes: int8 per row, to nearest or dithered with the same Philox words (core/dither.h); fp8 with one
// scale per tensor, its largest magnitude reduced over blocks and then in one block. Every product is rounded on its
// own (__fmul_rn, __fadd_rn: never contracted into an FMA), divisions are IEEE-rounded (nvcc's default), and fp8
// conversion is CUDA's own (__nv_cvt_float_to_fp8, saturating), which the kernel model runs through the same header's
// host code. Included by cuda_quant.cu and, as plain C++, by the kernel model's tests.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "core/dither.h"
#include "core/fp8.h"
#include "cuda_common.cuh"

namespace ember::cuda {

constexpr int kQuantThreads = 256;

// |x| for a largest-magnitude reduction: a NaN counts as +infinity, which gives the same scale (NaN) a NaN does on
// the CPU, and keeps the reduction's max free of NaN's order-dependent handling.
__device__ inline float magnitude(float x) {
  const float a = fabsf(x);
  return isnan(a) ? INFINITY : a;
}

// int8's inverse scale 127 / amax and scale amax / 127 (core/int8_quant.cpp's row_scale): 0 and NaN where amax is not
// finite, 0 and 0 where the inverse overflows (a zero or vanishingly small row).
__device__ inline void int8_row_scale(float amax, float* inverse, float* scale) {
  if (!isfinite(amax)) {
    *inverse = 0.0f, *scale = NAN;
    return;
  }
  const float inv = 127.0f / amax;
  if (!isfinite(inv)) {
    *inverse = 0.0f, *scale = 0.0f;
    return;
  }
  *inverse = inv, *scale = amax / 127.0f;
}

// A rounded int8 value kept within [-127, 127]; a NaN (its row's inverse was 0) becomes 0.
__device__ inline int8_t clamp_int8(float r) { return isnan(r) ? int8_t(0) : int8_t(fminf(fmaxf(r, -127.0f), 127.0f)); }

// One block per row of x (rows, cols): the row's scale into scales[row] and its values into q, rounded to nearest
// (ties to even) or, with kDither, dithered: element i = row * cols + c draws word i % 4 of the key's block i / 4.
template <typename InT, bool kDither>
__global__ void quantize_int8_rows_kernel(int8_t* q, float* scales, const InT* x, int cols, DitherKey key) {
  __shared__ float scratch[32];
  const size_t row = blockIdx.x;
  const InT* xr = x + row * size_t(cols);
  float m = 0.0f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, magnitude(load(&xr[c])));
  m = block_reduce<float, true>(m, scratch);
  float inverse = 0.0f, scale = 0.0f;
  int8_row_scale(m, &inverse, &scale);
  if (threadIdx.x == 0) scales[row] = scale;
  int8_t* qr = q + row * size_t(cols);
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    const float y = __fmul_rn(load(&xr[c]), inverse);
    if constexpr (kDither) {
      const uint64_t i = row * uint64_t(cols) + uint64_t(c);
      qr[c] = clamp_int8(floorf(__fadd_rn(y, dither_word_uniform(dither_block(key, i / 4)[i % 4]))));
    } else {
      qr[c] = clamp_int8(rintf(y));
    }
  }
}

// The first pass of an fp8 tensor's largest magnitude: block b's over its grid-stride share of x (n values).
template <typename InT>
__global__ void amax_partial_kernel(float* partial, const InT* x, size_t n) {
  __shared__ float scratch[32];
  float m = 0.0f;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    m = fmaxf(m, magnitude(load(&x[i])));
  m = block_reduce<float, true>(m, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = m;
}

// The second pass, one block: scale_inverse[0] = amax / M (the dequantizing scale, as cuBLASLt's scale pointers take
// it) and scale_inverse[1] = M / amax, M the format's largest finite value; NaN and 0 where amax is not finite, 0 and
// 0 where M / amax overflows (core/fp8_quant.cpp).
__global__ void fp8_scale_kernel(float* scale_inverse, const float* partial, unsigned nparts, float max_finite) {
  __shared__ float scratch[32];
  float m = 0.0f;
  for (unsigned i = threadIdx.x; i < nparts; i += blockDim.x) m = fmaxf(m, partial[i]);
  m = block_reduce<float, true>(m, scratch);
  if (threadIdx.x != 0) return;
  if (!isfinite(m)) {
    scale_inverse[0] = NAN, scale_inverse[1] = 0.0f;
    return;
  }
  const float inverse = max_finite / m;
  if (!isfinite(inverse)) {
    scale_inverse[0] = 0.0f, scale_inverse[1] = 0.0f;
    return;
  }
  scale_inverse[0] = m / max_finite, scale_inverse[1] = inverse;
}

// q[i] = fp8(x[i] * inverse), saturating; all zeros where the inverse is 0 (a zero or non-finite tensor).
template <typename InT>
__global__ void quantize_fp8_kernel(uint8_t* q, const InT* x, size_t n, const float* scale_inverse, Fp8Format f) {
  const float inverse = scale_inverse[1];
  const __nv_fp8_interpretation_t kind = f == Fp8Format::e4m3 ? __NV_E4M3 : __NV_E5M2;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    q[i] = inverse == 0.0f ? uint8_t(0)
                           : uint8_t(__nv_cvt_float_to_fp8(__fmul_rn(load(&x[i]), inverse), __NV_SATFINITE, kind));
}

}  // namespace ember::cuda
