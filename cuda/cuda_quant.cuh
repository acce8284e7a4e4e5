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

// An element of x as the quantization reads it: as stored or, with `round` (a GEMM input under int8: activations and
// gradients, never the fp32 master weights), an fp32 value rounded to bf16 first, as the CPU backend's products read
// it.
template <typename InT>
__device__ inline float quant_input(const InT* x, size_t i, bool round) {
  return round ? bf16_value(x[i]) : load(&x[i]);
}

// int8 value of y = x * inverse: to nearest (ties to even) or, with kDither, plus the uniform of element i of the
// key's stream (word i % 4 of its block i / 4), rounded down.
template <bool kDither>
__device__ inline int8_t int8_value(float y, const DitherKey& key, uint64_t i) {
  if constexpr (kDither)
    return clamp_int8(floorf(__fadd_rn(y, dither_word_uniform(dither_block(key, i / 4)[i % 4]))));
  else
    return clamp_int8(rintf(y));
}

// One block per row of q: for a row of x (rows, cols), its scale into scales[row] and its values into row `row` of q,
// `ldq` bytes apart (ldq >= cols; the columns from cols to ldq are written 0, the zero padding of an int8 GEMM
// operand); the rows of q from `rows` on are written 0. Element i = row * cols + c draws index i of the key's stream.
// A row of up to kQuantRowValues values per thread is read once, into registers; a longer one twice.
constexpr int kQuantRowValues = 32;
template <typename InT, bool kDither>
__global__ void quantize_int8_rows_kernel(int8_t* q, int ldq, float* scales, const InT* x, int rows, int cols,
                                          bool round, DitherKey key) {
  __shared__ float scratch[32];
  const size_t row = blockIdx.x;
  const int tid = int(threadIdx.x), threads = int(blockDim.x);
  if (row >= size_t(rows)) {
    for (int c = tid; c < ldq; c += threads) q[row * size_t(ldq) + c] = 0;
    return;
  }
  const InT* xr = x + row * size_t(cols);
  int8_t* qr = q + row * size_t(ldq);
  const auto value = [&](float v, int c) { return int8_value<kDither>(v, key, row * uint64_t(cols) + uint64_t(c)); };
  float m = 0.0f, inverse = 0.0f, scale = 0.0f;
  if (cols <= kQuantRowValues * threads) {
    float held[kQuantRowValues];
#pragma unroll
    for (int j = 0; j < kQuantRowValues; ++j) {
      const int c = tid + j * threads;
      held[j] = c < cols ? quant_input(xr, c, round) : 0.0f;
      m = fmaxf(m, magnitude(held[j]));
    }
    m = block_reduce<float, true>(m, scratch);
    int8_row_scale(m, &inverse, &scale);
#pragma unroll
    for (int j = 0; j < kQuantRowValues; ++j) {
      const int c = tid + j * threads;
      if (c < ldq) qr[c] = c < cols ? value(__fmul_rn(held[j], inverse), c) : int8_t(0);
    }
    for (int c = tid + kQuantRowValues * threads; c < ldq; c += threads) qr[c] = 0;  // padding past the held span
  } else {
    for (int c = tid; c < cols; c += threads) m = fmaxf(m, magnitude(quant_input(xr, c, round)));
    m = block_reduce<float, true>(m, scratch);
    int8_row_scale(m, &inverse, &scale);
    for (int c = tid; c < ldq; c += threads)
      qr[c] = c < cols ? value(__fmul_rn(quant_input(xr, c, round), inverse), c) : int8_t(0);
  }
  if (tid == 0) scales[row] = scale;
}

// Per column, transposed: column c of x (rows, cols) gets scale scales[c] and lands in row c of q, `ldq` bytes apart
// (ldq >= rows; columns rows .. ldq - 1 of q written 0), and q's rows from cols to `qrows` are written 0. Element (r,
// c) draws index first + r * cols + c of the key's stream. A block takes kQuantColumns columns: their maxima over all
// rows (kQuantColumns x kQuantLanes threads, each warp reading a row's columns together), then tiles of kQuantColumns
// rows quantized and written transposed through shared memory, so both the reads and the writes go a row at a time.
// Where ldq is at most kQuantLanes * kQuantHeld (the int8 weight gradient's tiles of 256 tokens), each thread holds
// its values in registers between the two, so x is read once; otherwise twice.
constexpr int kQuantColumns = 32, kQuantLanes = 8, kQuantHeld = 32;
template <typename InT, bool kDither>
__global__ void quantize_int8_columns_transposed_kernel(int8_t* q, int ldq, int qrows, float* scales, const InT* x,
                                                        int rows, int cols, bool round, DitherKey key, uint64_t first) {
  __shared__ float part[kQuantLanes][kQuantColumns];
  __shared__ float inverse[kQuantColumns];
  __shared__ int8_t tile[kQuantColumns][kQuantColumns + 4];
  const int c = blockIdx.x * kQuantColumns + threadIdx.x;
  const bool held_path = ldq <= kQuantLanes * kQuantHeld;  // the same in every thread of the launch
  float held[kQuantHeld];                                  // row threadIdx.y + j * kQuantLanes in held[j]
  float m = 0.0f;
  if (held_path) {
#pragma unroll
    for (int j = 0; j < kQuantHeld; ++j) {
      const int r = threadIdx.y + j * kQuantLanes;
      held[j] = c < cols && r < rows ? quant_input(x, size_t(r) * cols + c, round) : 0.0f;
      m = fmaxf(m, magnitude(held[j]));
    }
  } else if (c < cols) {
    for (int r = threadIdx.y; r < rows; r += kQuantLanes)
      m = fmaxf(m, magnitude(quant_input(x, size_t(r) * cols + c, round)));
  }
  part[threadIdx.y][threadIdx.x] = m;
  __syncthreads();
  if (threadIdx.y == 0) {
    for (int y = 1; y < kQuantLanes; ++y) m = fmaxf(m, part[y][threadIdx.x]);
    float inv = 0.0f, scale = 0.0f;
    int8_row_scale(m, &inv, &scale);
    inverse[threadIdx.x] = inv;
    if (c < cols) scales[c] = scale;
  }
  __syncthreads();
  // Row r's value v of this thread's column into the tile (0 past the real rows and columns).
  const auto quantized = [&](int r, float v) {
    return c < cols && r < rows
               ? int8_value<kDither>(__fmul_rn(v, inverse[threadIdx.x]), key, first + uint64_t(r) * cols + uint64_t(c))
               : int8_t(0);
  };
  // The tile of rows r0 .. r0 + kQuantColumns - 1, filled, written transposed into q.
  const auto write_tile = [&](int r0) {
    __syncthreads();
    for (int y = threadIdx.y; y < kQuantColumns; y += kQuantLanes) {
      const int qc = blockIdx.x * kQuantColumns + y, r = r0 + threadIdx.x;  // row qc of q, its element r
      if (qc < qrows && r < ldq) q[size_t(qc) * ldq + r] = tile[threadIdx.x][y];
    }
    __syncthreads();
  };
  if (held_path) {
#pragma unroll
    for (int t0 = 0; t0 < kQuantLanes * kQuantHeld / kQuantColumns; ++t0) {
      const int r0 = t0 * kQuantColumns;
      if (r0 >= ldq) break;
#pragma unroll
      for (int i = 0; i < kQuantColumns / kQuantLanes; ++i) {
        const int y = threadIdx.y + i * kQuantLanes;  // row r0 + y: held[4 t0 + i]
        tile[y][threadIdx.x] = quantized(r0 + y, held[t0 * (kQuantColumns / kQuantLanes) + i]);
      }
      write_tile(r0);
    }
  } else {
    for (int r0 = 0; r0 < ldq; r0 += kQuantColumns) {
      for (int y = threadIdx.y; y < kQuantColumns; y += kQuantLanes) {
        const int r = r0 + y;
        tile[y][threadIdx.x] = quantized(r, c < cols && r < rows ? quant_input(x, size_t(r) * cols + c, round) : 0.0f);
      }
      write_tile(r0);
    }
  }
}

// The first pass of an fp8 tensor's largest magnitude: block b's over its grid-stride share of x (n values).
template <typename InT>
__global__ void amax_partial_kernel(float* partial, const InT* x, size_t n, bool round) {
  __shared__ float scratch[32];
  float m = 0.0f;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    m = fmaxf(m, magnitude(quant_input(x, i, round)));
  m = block_reduce<float, true>(m, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = m;
}

// The second pass, one block: scale_inverse[0] = amax / M (the dequantizing scale, as cuBLASLt's scale pointers take
// it) and scale_inverse[1] = M / amax, M the format's largest finite value; NaN and 0 where amax is not finite, 0 and
// 0 where M / amax overflows (core/fp8_quant.cpp). Without `scaled` (a test's weakened variant), 1 and 1.
__global__ void fp8_scale_kernel(float* scale_inverse, const float* partial, unsigned nparts, float max_finite,
                                 bool scaled) {
  if (!scaled) {
    if (threadIdx.x == 0) scale_inverse[0] = 1.0f, scale_inverse[1] = 1.0f;
    return;
  }
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

// fp8 code of v * inverse, saturating; 0 where the inverse is 0 (a zero or non-finite tensor).
__device__ inline uint8_t fp8_code(float v, float inverse, Fp8Format f) {
  const __nv_fp8_interpretation_t kind = f == Fp8Format::e4m3 ? __NV_E4M3 : __NV_E5M2;
  return inverse == 0.0f ? uint8_t(0) : uint8_t(__nv_cvt_float_to_fp8(__fmul_rn(v, inverse), __NV_SATFINITE, kind));
}

// q[i] = fp8(x[i] * inverse), saturating; all zeros where the inverse is 0 (a zero or non-finite tensor).
template <typename InT>
__global__ void quantize_fp8_kernel(uint8_t* q, const InT* x, size_t n, const float* scale_inverse, Fp8Format f) {
  const float inverse = scale_inverse[1];
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    q[i] = fp8_code(load(&x[i]), inverse, f);
}

// The codes of x (rows, cols) laid out as a GEMM operand: row r of q holds row r of x or, `transposed`, row c of q
// holds column c of x; rows ldq bytes apart, zeros after the values and in q's rows up to qrows. Tiles of
// kQuantColumns x kQuantColumns through shared memory, so reads and writes both go a row at a time.
template <typename InT>
__global__ void fp8_codes_kernel(uint8_t* q, int ldq, int qrows, const InT* x, int rows, int cols, bool transposed,
                                 bool round, const float* scale_inverse, Fp8Format f) {
  __shared__ uint8_t tile[kQuantColumns][kQuantColumns + 4];
  const float inverse = scale_inverse[1];
  // This block's tile of q: rows q0 .., columns j0 ..; it reads x's tile at (j0, q0) transposed, or (q0, j0).
  const int q0 = blockIdx.y * kQuantColumns, j0 = blockIdx.x * kQuantColumns;
  for (int y = threadIdx.y; y < kQuantColumns; y += kQuantLanes) {
    const int xr = (transposed ? j0 : q0) + y, xc = (transposed ? q0 : j0) + threadIdx.x;  // x's element, read
    tile[y][threadIdx.x] =
        xr < rows && xc < cols ? fp8_code(quant_input(x, size_t(xr) * cols + xc, round), inverse, f) : uint8_t(0);
  }
  __syncthreads();
  for (int y = threadIdx.y; y < kQuantColumns; y += kQuantLanes) {
    const int qr = q0 + y, qc = j0 + threadIdx.x;
    if (qr < qrows && qc < ldq) q[size_t(qr) * ldq + qc] = transposed ? tile[threadIdx.x][y] : tile[y][threadIdx.x];
  }
}

}  // namespace ember::cuda
