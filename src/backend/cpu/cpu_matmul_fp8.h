// The fp8 products of the dense layers under matmul precision fp8 (backend.h): operands quantized with one scale per
// tensor (core/fp8_quant.h), their fp8 values multiplied exactly and summed in fp32, and the sum scaled by the two
// operands' scales.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/fp8.h"

namespace ember::cpu {

// A quantized tensor: its fp8 codes, their format and its one scale.
struct Fp8Matrix {
  std::vector<uint8_t> q;
  Fp8Format format = Fp8Format::e4m3;
  float scale = 0.0f;
};

// A dense weight's fp8 copy (E4M3), one for all three products, and whether it still matches the weight
// (Backend::weights_changed).
struct Fp8Weight : Fp8Matrix {
  bool current = false;
};

// Quantizes n values of x into m (format f), with one scale or (scaled = false, a test's weakened variant) unscaled.
void quantize_fp8(const float* x, size_t n, Fp8Format f, bool scaled, Fp8Matrix& m);

// out (M, N) = (fp32 sum of op(a) @ op(b)) * a.scale * b.scale (+ bias[n]), each operation rounded to fp32 in that
// order, row-major: op(a) is (M, K), stored (K, M) where trans_a; op(b) is (K, N), stored (N, K) where trans_b. With
// `accumulate` the scaled product is added to out (then bias must be null). a_row0 picks op(a)'s rows a_row0 ..
// a_row0 + M - 1 (trans_a must be false). The fp8 values are widened into `scratch` (the two operands' sizes). Must
// not be called from inside a parallel region.
void fp8_product(float* out, const Fp8Matrix& a, bool trans_a, int a_row0, const Fp8Matrix& b, bool trans_b,
                 TensorIn bias, bool accumulate, int M, int N, int K, std::vector<float>& scratch);

}  // namespace ember::cpu
