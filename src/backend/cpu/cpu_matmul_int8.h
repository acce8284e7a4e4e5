// The int8 products of the dense layers under matmul precision int8 (backend.h): the exact int8 GEMM
// (cpu_gemm_int8.h) and the epilogue that scales its result by the two operands' scales and adds the bias.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/int8_quant.h"

namespace ember::cpu {

// A quantized matrix: its int8 values and one scale per row (or column).
struct Int8Matrix {
  std::vector<int8_t> q;
  std::vector<float> scales;
};

// A dense weight's int8 copy (per output channel for the forward product, per input channel for the input-gradient
// product), and whether it still matches the weight (Backend::weights_changed).
struct Int8Weight : Int8Matrix {
  bool current = false;
};

// out (R, N) = (float(qa @ op(qb)) * a_scales[r]) * b_scales[n] + bias[n], each operation rounded to fp32 in that
// order (bias may be null, or stored in bf16). qa (R, K); qb (K, N), or (N, K) where b_transposed.
void int8_product_rows(float* out, const int8_t* qa, const float* a_scales, const int8_t* qb, bool b_transposed,
                       const float* b_scales, TensorIn bias, int R, int K, int N);

// The weight gradient of a dense layer in int8 (training.int8_weight_gradient), over tiles of kInt8WeightGradientTile
// tokens (core/int8_quant.h): in each tile x (N, IC) is quantized per input channel (to nearest) and dout (N, OC) per
// output channel (dithered where `dither` is set: element (n, o) draws index N * OC + n * OC + o of the key's stream,
// after those the input-gradient product drew), and dweight (IC, OC) += (float(qx_tile^T @ qd_tile) * sx[i]) * sd[o],
// each operation rounded to fp32 in that order, tile after tile. `scratch` holds a tile's quantized operands and their
// sums.
struct Int8WeightGradientScratch {
  Int8Matrix x, dout;
  std::vector<float> acc;
};
void int8_weight_gradient(float* dweight, const float* x, const float* dout, int N, int IC, int OC,
                          const DitherKey* dither, Int8WeightGradientScratch& scratch);

}  // namespace ember::cpu
