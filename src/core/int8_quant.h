// int8 quantization with one scale per row (or per column) of a matrix: the scheme of training.precision = int8.
// A row's scale is s = max|x| / 127 and its values become q = x * (127 / max|x|), rounded and kept within [-127, 127]
// (never -128, so the range is symmetric); q * s is the value the int8 product stands for. Rounding is to nearest,
// ties to even (CUDA's cvt.rni), or dithered (stochastic rounding, unbiased: E[q] = x * 127 / max|x|), with the
// uniform for each element drawn from Philox by its position, so any thread order and any resume draw the same.
// A row that is all zeros gets scale 0; a row holding a NaN or an infinity gets a NaN scale (its product is then NaN,
// as an fp32 product would be) and zeros.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dither.h"

namespace ember {

float dither_uniform(const DitherKey& key, uint64_t i);  // element i's uniform in [0, 1), 24 bits

// x (rows, cols) row-major; q the same shape; scales (rows).
void quantize_int8_rows(const float* x, size_t rows, size_t cols, int8_t* q, float* scales);
void quantize_int8_rows_dithered(const float* x, size_t rows, size_t cols, const DitherKey& key, int8_t* q,
                                 float* scales);
// One scale per column of x (rows, cols): a weight (IC, OC) quantized per output channel. scales (cols).
void quantize_int8_columns(const float* x, size_t rows, size_t cols, int8_t* q, float* scales);
// The same, dithered: element (r, c) draws the uniform of index first + r * cols + c of the key's stream, so a tile
// of rows of a larger tensor draws by its position in that tensor (first = its first row's index).
void quantize_int8_columns_dithered(const float* x, size_t rows, size_t cols, const DitherKey& key, uint64_t first,
                                    int8_t* q, float* scales);
// The dense layers' int8 weight-gradient products (training.int8_weight_gradient) scale their operands per channel
// over tiles of this many tokens, on every backend.
inline constexpr int kInt8WeightGradientTile = 256;

// x[i] = q[i] * scale of its row (rows, cols).
void dequantize_int8_rows(const int8_t* q, const float* scales, size_t rows, size_t cols, float* x);

}  // namespace ember
