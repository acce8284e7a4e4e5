// The int8 products of the dense layers under matmul precision int8 (backend.h): the exact int8 GEMM
// (cpu_gemm_int8.h) and the epilogue that scales its result by the two operands' scales and adds the bias.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"

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

}  // namespace ember::cpu
