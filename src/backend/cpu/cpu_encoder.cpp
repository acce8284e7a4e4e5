// CPU backend: token + position embedding, forward and backward.
// Backward splits the C columns over threads, so rows of dwte hit by many tokens need neither atomics nor locks.
#include <omp.h>

#include <algorithm>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_common.h"

namespace ember {

using cpu::kMinParallelWork;

void CpuBackend::encoder_forward(float* out,          // (B, T, C)
                                 const int32_t* inp,  // (B, T)
                                 const float* wte,    // (V, C)
                                 const float* wpe,    // (maxT, C)
                                 int B, int T, int C) {
  const int BT = B * T;
#pragma omp parallel for schedule(static) if (size_t(BT) * C >= kMinParallelWork)
  for (int bt = 0; bt < BT; ++bt) {
    const float* te = wte + size_t(inp[bt]) * C;
    float* o = out + size_t(bt) * C;
    if (!wpe) {
      std::copy(te, te + C, o);
      continue;
    }
    const float* pe = wpe + size_t(bt % T) * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] = te[c] + pe[c];
  }
}

void CpuBackend::encoder_backward(float* dwte,         // (V, C) +=
                                  float* dwpe,         // (maxT, C) +=
                                  const float* dout,   // (B, T, C)
                                  const int32_t* inp,  // (B, T)
                                  int B, int T, int C) {
  const int BT = B * T;
  // Each thread owns a slice of columns (whole cache lines) and walks every token in order, so each element's sum
  // runs in token order whatever the thread count: the result is bitwise identical for any number of threads.
#pragma omp parallel if (size_t(BT) * C >= kMinParallelWork)
  {
    const cpu::Span s = cpu::thread_span(size_t(C), omp_get_thread_num(), omp_get_num_threads(), 16);
    const int c0 = int(s.begin), c1 = int(s.end);
    for (int bt = 0; bt < BT && c0 < c1; ++bt) {
      const float* g = dout + size_t(bt) * C;
      float* te = dwte + size_t(inp[bt]) * C;
#pragma omp simd
      for (int c = c0; c < c1; ++c) te[c] += g[c];
      if (!dwpe) continue;
      float* pe = dwpe + size_t(bt % T) * C;
#pragma omp simd
      for (int c = c0; c < c1; ++c) pe[c] += g[c];
    }
  }
}

}  // namespace ember
