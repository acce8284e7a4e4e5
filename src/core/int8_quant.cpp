// int8 quantization per row or per column, rounded to nearest or dithered; see int8_quant.h. The element loops are
// per-ISA clones (core/cpu_clones.h) written so that they vectorise: every step is an fp32 operation on one element
// (this file is compiled without FMA contraction), so each clone gives bitwise the same values.
#include "core/int8_quant.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

#include "core/cpu_clones.h"
#include "core/dither_uniforms.h"
#include "core/error.h"

namespace ember {

namespace {

// Loops over fewer elements than these stay on one thread (a fork costs more): the dithered ones do more per element.
constexpr size_t kParallelFrom = size_t(1) << 16, kDitheredParallelFrom = size_t(1) << 14;

// 127 / max|x| for a row whose largest magnitude is `amax`, with its scale; 0 and 0 for a zero (or vanishingly
// small) row, whose values all become 0; NaN for a row holding a NaN or an infinity.
struct RowScale {
  float inverse, scale;
};
RowScale row_scale(float amax) {
  if (!std::isfinite(amax)) return {0.0f, NAN};
  const float inverse = 127.0f / amax;
  if (!std::isfinite(inverse)) return {0.0f, 0.0f};
  return {inverse, amax / 127.0f};
}

// A rounded value kept within [-127, 127]; a NaN (a row with a NaN or an infinity, whose inverse is 0) becomes 0.
// y is x * (127 / max|x|), rounded, so it lies within one of [-127, 127] (the product can exceed 127 by an ulp and
// dithering adds under 1): the clamp is on the integer, since GCC turns a float clamp into branches here, which keeps
// the loops from vectorising.
inline int8_t to_int8(float y) {
  const uint32_t keep = y == y ? ~0u : 0u;  // a mask, not a select: GCC makes a branch of `y == y ? y : 0` here
  int v = int(std::bit_cast<float>(std::bit_cast<uint32_t>(y) & keep));
  v = v < -127 ? -127 : v;
  v = v > 127 ? 127 : v;
  return int8_t(v);
}

// Largest magnitude of x[0, n); NaN if any is a NaN.
EMBER_CPU_CLONES float amax_of(const float* x, size_t n) {
  float m = 0.0f;
  int nan = 0;
#pragma omp simd reduction(max : m) reduction(| : nan)
  for (size_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    nan |= a != a;
    m = a > m ? a : m;
  }
  return nan ? NAN : m;
}

// The running maxima of columns [c0, c1) of x (rows, cols) into amax[c0, c1), NaNs flagged in nan[c0, c1).
EMBER_CPU_CLONES void column_amax(const float* x, size_t rows, size_t cols, size_t c0, size_t c1, float* amax,
                                  int* nan) {
  for (size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
#pragma omp simd
    for (size_t c = c0; c < c1; ++c) {
      const float a = std::fabs(xr[c]);
      nan[c] |= a != a;
      amax[c] = a > amax[c] ? a : amax[c];
    }
  }
}

// q = round(x * inverse) to nearest, ties to even, with one inverse for the span or one per element.
EMBER_CPU_CLONES void round_span(const float* x, size_t n, float inverse, int8_t* q) {
#pragma omp simd
  for (size_t i = 0; i < n; ++i) q[i] = to_int8(std::nearbyint(x[i] * inverse));
}
EMBER_CPU_CLONES void round_span_each(const float* x, size_t n, const float* inverse, int8_t* q) {
#pragma omp simd
  for (size_t i = 0; i < n; ++i) q[i] = to_int8(std::nearbyint(x[i] * inverse[i]));
}

// q = floor(x * inverse + u) with the element's uniform u: the product rounded once, then dithered.
EMBER_CPU_CLONES void dither_span(const float* x, size_t n, float inverse, const float* u, int8_t* q) {
#pragma omp simd
  for (size_t i = 0; i < n; ++i) q[i] = to_int8(std::floor(x[i] * inverse + u[i]));
}
EMBER_CPU_CLONES void dither_span_each(const float* x, size_t n, const float* inverse, const float* u, int8_t* q) {
#pragma omp simd
  for (size_t i = 0; i < n; ++i) q[i] = to_int8(std::floor(x[i] * inverse[i] + u[i]));
}

// A thread's buffer of n floats for a row's uniforms, kept between calls.
float* uniforms_buffer(size_t n) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

// Each column's scale into `scales` and its 127 / max|column| returned (row_scale). The maxima are read row by row
// (a column at a time would touch a cache line per element), each thread over its own blocks of columns.
std::vector<float> column_scales(const float* x, size_t rows, size_t cols, float* scales) {
  std::vector<float> amax(cols, 0.0f);
  std::vector<int> nan(cols, 0);
  constexpr size_t kBlock = 256;
  const long blocks = long((cols + kBlock - 1) / kBlock);
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelFrom)
  for (long b = 0; b < blocks; ++b)
    column_amax(x, rows, cols, size_t(b) * kBlock, std::min(cols, size_t(b + 1) * kBlock), amax.data(), nan.data());
  std::vector<float> inverse(cols);
  for (size_t c = 0; c < cols; ++c) {
    const RowScale s = row_scale(nan[c] ? NAN : amax[c]);
    scales[c] = s.scale;
    inverse[c] = s.inverse;
  }
  return inverse;
}

}  // namespace

float dither_uniform(const DitherKey& key, uint64_t i) {
  EMBER_ASSERT(key.stream < kDitherStreams && i / 4 < kDitherBlocksPerStream, "a dither index out of range");
  return dither_word_uniform(dither_block(key, i / 4)[i % 4]);
}

void quantize_int8_rows(const float* x, size_t rows, size_t cols, int8_t* q, float* scales) {
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelFrom)
  for (size_t r = 0; r < rows; ++r) {
    const RowScale s = row_scale(amax_of(x + r * cols, cols));
    scales[r] = s.scale;
    round_span(x + r * cols, cols, s.inverse, q + r * cols);
  }
}

void quantize_int8_rows_dithered(const float* x, size_t rows, size_t cols, const DitherKey& key, int8_t* q,
                                 float* scales) {
  EMBER_ASSERT(key.stream < kDitherStreams && rows * cols / 4 < kDitherBlocksPerStream, "a dither key out of range");
#pragma omp parallel for schedule(static) if (rows * cols >= kDitheredParallelFrom)
  for (size_t r = 0; r < rows; ++r) {
    const RowScale s = row_scale(amax_of(x + r * cols, cols));
    scales[r] = s.scale;
    float* u = uniforms_buffer(cols);
    dither_uniforms(key, r * cols, cols, u);
    dither_span(x + r * cols, cols, s.inverse, u, q + r * cols);
  }
}

void quantize_int8_columns(const float* x, size_t rows, size_t cols, int8_t* q, float* scales) {
  const std::vector<float> inverse = column_scales(x, rows, cols, scales);
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelFrom)
  for (size_t r = 0; r < rows; ++r) round_span_each(x + r * cols, cols, inverse.data(), q + r * cols);
}

void quantize_int8_columns_dithered(const float* x, size_t rows, size_t cols, const DitherKey& key, uint64_t first,
                                    int8_t* q, float* scales) {
  EMBER_ASSERT(key.stream < kDitherStreams && (first + rows * cols) / 4 < kDitherBlocksPerStream,
               "a dither key out of range");
  const std::vector<float> inverse = column_scales(x, rows, cols, scales);
#pragma omp parallel for schedule(static) if (rows * cols >= kDitheredParallelFrom)
  for (size_t r = 0; r < rows; ++r) {
    float* u = uniforms_buffer(cols);
    dither_uniforms(key, first + r * cols, cols, u);
    dither_span_each(x + r * cols, cols, inverse.data(), u, q + r * cols);
  }
}

namespace {
EMBER_CPU_CLONES void dequantize_span(const int8_t* q, size_t n, float scale, float* x) {
#pragma omp simd
  for (size_t i = 0; i < n; ++i) x[i] = float(q[i]) * scale;
}
}  // namespace

void dequantize_int8_rows(const int8_t* q, const float* scales, size_t rows, size_t cols, float* x) {
#pragma omp parallel for schedule(static) if (rows * cols >= kParallelFrom)
  for (size_t r = 0; r < rows; ++r) dequantize_span(q + r * cols, cols, scales[r], x + r * cols);
}

}  // namespace ember
