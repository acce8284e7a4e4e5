// The fp8 products of the dense layers (implementation). Products of two fp8 values are exact in fp32 (at most 4 + 4
// significant bits), so an fp32 GEMM over the widened values sums exact products; the epilogue's roundings come one
// at a time in a fixed order: this file is compiled without FMA contraction.
#include "backend/cpu/cpu_matmul_fp8.h"

#include <omp.h>

#include "backend/cpu/cpu_common.h"
#include "backend/cpu/cpu_gemm.h"
#include "core/error.h"
#include "core/fp8_quant.h"

namespace ember::cpu {

void quantize_fp8(const float* x, size_t n, Fp8Format f, bool scaled, Fp8Matrix& m) {
  m.q.resize(n);
  m.format = f;
  m.scale = scaled ? quantize_fp8_tensor(x, n, f, m.q.data()) : quantize_fp8_unscaled(x, n, f, m.q.data());
}

void fp8_product(float* out, const Fp8Matrix& a, bool trans_a, int a_row0, const Fp8Matrix& b, bool trans_b,
                 TensorIn bias, bool accumulate, int M, int N, int K, std::vector<float>& scratch) {
  EMBER_ASSERT(!trans_a || a_row0 == 0, "fp8_product: rows of a transposed operand");
  EMBER_ASSERT(!accumulate || !bias.ptr, "fp8_product: a bias with accumulate");
  const size_t na = size_t(M) * K, nb = size_t(K) * N;
  const size_t nout = accumulate ? size_t(M) * N : 0;  // the scaled product's rows, before they are added to out
  scratch.resize(na + nb + nout);
  float *wa = scratch.data(), *wb = wa + na, *sum = accumulate ? wb + nb : out;
  widen_fp8(a.q.data() + size_t(a_row0) * K, na, a.format, wa);
  widen_fp8(b.q.data(), nb, b.format, wb);
  gemm_parallel(trans_a, trans_b, M, N, K, 1.0f, wa, trans_a ? M : K, wb, trans_b ? K : N, 0.0f, sum, N);
  const float sa = a.scale, sb = b.scale;
  const float* bias32 = bias.f32();
  const BFloat16* bias16 = bias.b16();
#pragma omp parallel for schedule(static) if (size_t(M) * N >= kMinParallelWork)
  for (int r = 0; r < M; ++r) {
    float* o = out + size_t(r) * N;
    const float* s = sum + size_t(r) * N;
    for (int c = 0; c < N; ++c) {
      const float scaled = s[c] * sa * sb;
      if (accumulate)
        o[c] += scaled;
      else
        o[c] = bias32 ? scaled + bias32[c] : bias16 ? scaled + from_bf16(bias16[c]) : scaled;
    }
  }
}

}  // namespace ember::cpu
