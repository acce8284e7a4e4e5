// int8 quantization per row or per column, rounded to nearest or dithered; see int8_quant.h.
#include "core/int8_quant.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "core/error.h"

namespace ember {

namespace {

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
int8_t clamp_int8(float y) { return std::isnan(y) ? int8_t(0) : int8_t(std::clamp(y, -127.0f, 127.0f)); }

// Largest magnitude of n values `stride` apart; NaN if any is a NaN.
float amax_of(const float* x, size_t n, size_t stride) {
  float m = 0.0f;
  for (size_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i * stride]);
    if (std::isnan(a)) return a;
    m = std::max(m, a);
  }
  return m;
}

// Quantizes each row of x with its own scale: q = round(x * 127 / max|x|), where make_rounder(r) gives row r's
// rounding of y = x * (127 / max|x|) (an fp32 product, rounded on its own: this file is compiled without FMA
// contraction) at column c. Rows are split over threads when there are at least `parallel_from` elements.
template <typename MakeRounder>
void quantize_rows(const float* x, size_t rows, size_t cols, int8_t* q, float* scales, size_t parallel_from,
                   MakeRounder make_rounder) {
#pragma omp parallel for schedule(static) if (rows * cols >= parallel_from)
  for (size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    int8_t* qr = q + r * cols;
    const RowScale s = row_scale(amax_of(xr, cols, 1));
    scales[r] = s.scale;
    auto round = make_rounder(r);
    for (size_t c = 0; c < cols; ++c) qr[c] = clamp_int8(round(xr[c] * s.inverse, c));
  }
}

// Each column's scale into `scales` and its 127 / max|column| returned (row_scale), the maxima read row by row (a
// column at a time would touch a cache line per element).
std::vector<float> column_scales(const float* x, size_t rows, size_t cols, float* scales) {
  std::vector<float> amax(cols, 0.0f);
  std::vector<unsigned char> nan(cols, 0);
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) {
      const float a = std::fabs(x[r * cols + c]);
      nan[c] |= std::isnan(a);
      amax[c] = std::max(amax[c], a);
    }
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
  quantize_rows(x, rows, cols, q, scales, (size_t(1) << 16),
                [](size_t) { return [](float y, size_t) { return std::nearbyint(y); }; });
}

void quantize_int8_rows_dithered(const float* x, size_t rows, size_t cols, const DitherKey& key, int8_t* q,
                                 float* scales) {
  EMBER_ASSERT(key.stream < kDitherStreams && rows * cols / 4 < kDitherBlocksPerStream, "a dither key out of range");
  // A row's rounder keeps the Philox block it drew last: one block serves four elements.
  quantize_rows(x, rows, cols, q, scales, (size_t(1) << 14), [&](size_t r) {
    return [&key, first = r * cols, block = UINT64_MAX, words = std::array<uint32_t, 4>{}](float y, size_t c) mutable {
      const uint64_t i = first + c;
      if (i / 4 != block) words = dither_block(key, block = i / 4);
      return std::floor(y + dither_word_uniform(words[i % 4]));  // a second rounding: y was rounded once already
    };
  });
}

void quantize_int8_columns(const float* x, size_t rows, size_t cols, int8_t* q, float* scales) {
  const std::vector<float> inverse = column_scales(x, rows, cols, scales);
#pragma omp parallel for schedule(static) if (rows * cols >= (size_t(1) << 16))
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) q[r * cols + c] = clamp_int8(std::nearbyint(x[r * cols + c] * inverse[c]));
}

void quantize_int8_columns_dithered(const float* x, size_t rows, size_t cols, const DitherKey& key, uint64_t first,
                                    int8_t* q, float* scales) {
  EMBER_ASSERT(key.stream < kDitherStreams && (first + rows * cols) / 4 < kDitherBlocksPerStream,
               "a dither key out of range");
  const std::vector<float> inverse = column_scales(x, rows, cols, scales);
#pragma omp parallel for schedule(static) if (rows * cols >= (size_t(1) << 14))
  for (size_t r = 0; r < rows; ++r) {
    uint64_t block = UINT64_MAX;
    std::array<uint32_t, 4> words{};
    for (size_t c = 0; c < cols; ++c) {
      const uint64_t i = first + r * cols + c;
      if (i / 4 != block) words = dither_block(key, block = i / 4);
      const float y = x[r * cols + c] * inverse[c];  // rounded once, then dithered
      q[r * cols + c] = clamp_int8(std::floor(y + dither_word_uniform(words[i % 4])));
    }
  }
}

void dequantize_int8_rows(const int8_t* q, const float* scales, size_t rows, size_t cols, float* x) {
#pragma omp parallel for schedule(static) if (rows * cols >= (size_t(1) << 16))
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) x[r * cols + c] = float(q[r * cols + c]) * scales[r];
}

}  // namespace ember
