// The int8 products of the dense layers (implementation). The epilogue is two products and a sum, rounded one at a
// time in a fixed order that the GPU's epilogue repeats: this file is compiled without FMA contraction.
#include "backend/cpu/cpu_matmul_int8.h"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "backend/cpu/cpu_common.h"
#include "backend/cpu/cpu_gemm_int8.h"

namespace ember::cpu {

namespace {

// row[n] = (row[n] * sa) * sb[n] (+ bias[n] where bias is set), over n in [0, N).
EMBER_CPU_CLONES void scale_row(float* row, int N, float sa, const float* sb, const float* bias) {
  if (bias) {
#pragma omp simd
    for (int n = 0; n < N; ++n) row[n] = row[n] * sa * sb[n] + bias[n];
  } else {
#pragma omp simd
    for (int n = 0; n < N; ++n) row[n] = row[n] * sa * sb[n];
  }
}

// dw[o] += (a[o] * sx) * sd[o], over o in [0, OC).
EMBER_CPU_CLONES void accumulate_scaled(float* dw, const float* a, int OC, float sx, const float* sd) {
#pragma omp simd
  for (int o = 0; o < OC; ++o) dw[o] += a[o] * sx * sd[o];
}

}  // namespace

void int8_product_rows(float* out, const int8_t* qa, const float* a_scales, const int8_t* qb, bool b_transposed,
                       const float* b_scales, TensorIn bias, int R, int K, int N) {
  gemm_s8(false, b_transposed, R, N, K, qa, K, qb, b_transposed ? K : N, out, N);
  // A bf16 bias widened once (its values are exact in fp32).
  thread_local std::vector<float> widened;
  const float* bias32 = bias.f32();
  if (bias.bf16) {
    widened.resize(size_t(N));
    for (int n = 0; n < N; ++n) widened[size_t(n)] = from_bf16(bias.b16()[n]);
    bias32 = widened.data();
  }
#pragma omp parallel for schedule(static) if (size_t(R) * N >= kMinParallelWork)
  for (int r = 0; r < R; ++r) scale_row(out + size_t(r) * N, N, a_scales[r], b_scales, bias32);
}

void int8_weight_gradient(float* dweight, const float* x, const float* dout, int N, int IC, int OC,
                          const DitherKey* dither, Int8WeightGradientScratch& scratch) {
  const int tile = kInt8WeightGradientTile;
  auto& [qx, qd, acc] = scratch;
  qx.q.resize(size_t(tile) * IC), qx.scales.resize(size_t(IC));
  qd.q.resize(size_t(tile) * OC), qd.scales.resize(size_t(OC));
  acc.resize(size_t(IC) * OC);
  for (int t0 = 0; t0 < N; t0 += tile) {
    const int R = std::min(tile, N - t0);
    quantize_int8_columns(x + size_t(t0) * IC, size_t(R), size_t(IC), qx.q.data(), qx.scales.data());
    const float* d = dout + size_t(t0) * OC;
    if (dither)
      quantize_int8_columns_dithered(d, size_t(R), size_t(OC), *dither, size_t(N) * OC + size_t(t0) * OC, qd.q.data(),
                                     qd.scales.data());
    else
      quantize_int8_columns(d, size_t(R), size_t(OC), qd.q.data(), qd.scales.data());
    gemm_s8(true, false, IC, OC, R, qx.q.data(), IC, qd.q.data(), OC, acc.data(), OC);
    const float* sx = qx.scales.data();
    const float* sd = qd.scales.data();
    const float* a = acc.data();
#pragma omp parallel for schedule(static) if (size_t(IC) * OC >= kMinParallelWork)
    for (int i = 0; i < IC; ++i) accumulate_scaled(dweight + size_t(i) * OC, a + size_t(i) * OC, OC, sx[i], sd);
  }
}

}  // namespace ember::cpu
