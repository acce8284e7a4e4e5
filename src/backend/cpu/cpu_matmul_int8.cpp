// The int8 products of the dense layers (implementation). The epilogue is two products and a sum, rounded one at a
// time in a fixed order that the GPU's epilogue repeats: this file is compiled without FMA contraction.
#include "backend/cpu/cpu_matmul_int8.h"

#include <omp.h>

#include "backend/cpu/cpu_common.h"
#include "backend/cpu/cpu_gemm_int8.h"

namespace ember::cpu {

void int8_product_rows(float* out, const int8_t* qa, const float* a_scales, const int8_t* qb, bool b_transposed,
                       const float* b_scales, TensorIn bias, int R, int K, int N) {
  gemm_s8(false, b_transposed, R, N, K, qa, K, qb, b_transposed ? K : N, out, N);
  const float* bias32 = bias.f32();
  const BFloat16* bias16 = bias.b16();
#pragma omp parallel for schedule(static) if (size_t(R) * N >= kMinParallelWork)
  for (int r = 0; r < R; ++r) {
    float* row = out + size_t(r) * N;
    const float sa = a_scales[r];
    for (int n = 0; n < N; ++n) {
      const float scaled = row[n] * sa * b_scales[n];
      row[n] = bias32 ? scaled + bias32[n] : bias16 ? scaled + from_bf16(bias16[n]) : scaled;
    }
  }
}

}  // namespace ember::cpu
