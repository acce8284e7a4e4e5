// CPU backend: dense layers (out = inp @ weight + bias) and the tied lm_head (out = inp @ wte^T), both directions.
// GEMMs go to OpenBLAS sliced over threads; the bias add and dbias reduction are plain static-split loops.
#include <omp.h>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_common.h"
#include "backend/cpu/cpu_gemm.h"

namespace ember {

using cpu::gemm_parallel;
using cpu::kMinParallelWork;

void CpuBackend::matmul_forward(float* out,           // (N, OC)
                                const float* inp,     // (N, IC)
                                const float* weight,  // (IC, OC)
                                const float* bias,    // (OC) or null
                                int N, int IC, int OC) {
  // Seed out with the bias and let the GEMM accumulate onto it (beta = 1): OpenBLAS would otherwise spend the same
  // pass zeroing out for beta = 0, so the bias costs nothing extra.
  if (bias) {
#pragma omp parallel for schedule(static) if (size_t(N) * OC >= kMinParallelWork)
    for (int r = 0; r < N; ++r) {
      float* o = out + size_t(r) * OC;
#pragma omp simd
      for (int c = 0; c < OC; ++c) o[c] = bias[c];
    }
  }
  gemm_parallel(false, false, N, OC, IC, 1.0f, inp, IC, weight, OC, bias ? 1.0f : 0.0f, out, OC);
}

void CpuBackend::matmul_backward(float* dinp,          // (N, IC) +=
                                 float* dweight,       // (IC, OC) +=
                                 float* dbias,         // (OC) += or null
                                 const float* dout,    // (N, OC)
                                 const float* inp,     // (N, IC)
                                 const float* weight,  // (IC, OC)
                                 int N, int IC, int OC) {
  gemm_parallel(false, true, N, IC, OC, 1.0f, dout, OC, weight, OC, 1.0f, dinp, IC);  // dinp += dout @ W^T
  gemm_parallel(true, false, IC, OC, N, 1.0f, inp, IC, dout, OC, 1.0f, dweight, OC);  // dW += inp^T @ dout
  if (dbias) {
    // Split over OC (whole cache lines per thread), rows summed in order: identical for any thread count.
#pragma omp parallel if (size_t(N) * OC >= kMinParallelWork)
    {
      const cpu::Span s = cpu::thread_span(size_t(OC), omp_get_thread_num(), omp_get_num_threads(), 16);
      const int c0 = int(s.begin), c1 = int(s.end);
      for (int r = 0; r < N && c0 < c1; ++r) {
        const float* g = dout + size_t(r) * OC;
#pragma omp simd
        for (int c = c0; c < c1; ++c) dbias[c] += g[c];
      }
    }
  }
}

void CpuBackend::matmul_forward_transposed(float* out,        // (N, V)
                                           const float* inp,  // (N, C)
                                           const float* wte,  // (V, C)
                                           int N, int C, int V) {
  gemm_parallel(false, true, N, V, C, 1.0f, inp, C, wte, C, 0.0f, out, V);
}

void CpuBackend::matmul_backward_transposed(float* dinp,        // (N, C) +=
                                            float* dwte,        // (V, C) +=
                                            const float* dout,  // (N, V)
                                            const float* inp,   // (N, C)
                                            const float* wte,   // (V, C)
                                            int N, int C, int V) {
  gemm_parallel(false, false, N, C, V, 1.0f, dout, V, wte, C, 1.0f, dinp, C);  // dinp += dout @ wte
  gemm_parallel(true, false, V, C, N, 1.0f, dout, V, inp, C, 1.0f, dwte, C);   // dwte += dout^T @ inp
}

}  // namespace ember
