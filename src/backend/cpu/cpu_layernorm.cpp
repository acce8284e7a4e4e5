// CPU backend: layernorm over the last dim (eps 1e-5, biased variance as in PyTorch), forward and backward.
// One row per loop iteration; backward keeps per-thread dweight/dbias partials, added in thread order afterwards.
#include <omp.h>

#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_common.h"

namespace ember {

using cpu::kMinParallelWork;

namespace {

constexpr float kLayerNormEps = 1e-5f;

EMBER_CPU_CLONES void layernorm_row(float* y, float* mean, float* rstd, const float* x, const float* weight,
                                    const float* bias, int C) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int c = 0; c < C; ++c) sum += x[c];
  const float m = sum / float(C);
  // Two passes (mean, then squared deviations) rather than E[x^2] - m^2, which cancels badly for large means.
  float var = 0.0f;
#pragma omp simd reduction(+ : var)
  for (int c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
  const float rs = 1.0f / std::sqrt(var / float(C) + kLayerNormEps);
#pragma omp simd
  for (int c = 0; c < C; ++c) y[c] = (x[c] - m) * rs * weight[c] + bias[c];
  *mean = m;
  *rstd = rs;
}

// dx += rs * (dn - mean(dn) - xhat * mean(dn * xhat)) with dn = g * weight and xhat the normalised input;
// dw += g * xhat and db += g go to the calling thread's partial sums.
EMBER_CPU_CLONES void layernorm_backward_row(float* dx, float* dw, float* db, const float* g, const float* x,
                                             const float* weight, float m, float rs, int C) {
  float dn_sum = 0.0f, dn_xhat_sum = 0.0f;
#pragma omp simd reduction(+ : dn_sum, dn_xhat_sum)
  for (int c = 0; c < C; ++c) {
    const float dn = g[c] * weight[c];
    dn_sum += dn;
    dn_xhat_sum += dn * (x[c] - m) * rs;
  }
  const float dn_mean = dn_sum / float(C), dn_xhat_mean = dn_xhat_sum / float(C);
#pragma omp simd
  for (int c = 0; c < C; ++c) {
    const float xhat = (x[c] - m) * rs;
    dx[c] += (g[c] * weight[c] - dn_mean - xhat * dn_xhat_mean) * rs;
    dw[c] += g[c] * xhat;
    db[c] += g[c];
  }
}

}  // namespace

void CpuBackend::layernorm_forward(TensorOut out,        // (N, C)
                                   float* mean,          // (N)
                                   float* rstd,          // (N)
                                   const float* inp,     // (N, C)
                                   const float* weight,  // (C)
                                   const float* bias,    // (C)
                                   int N, int C) {
  if (!out.bf16) {
#pragma omp parallel for schedule(static) if (size_t(N) * C >= kMinParallelWork)
    for (int r = 0; r < N; ++r)
      layernorm_row(out.f32() + size_t(r) * C, &mean[r], &rstd[r], inp + size_t(r) * C, weight, bias, C);
    return;
  }
  // bf16 storage: each row in fp32 as above, then rounded.
#pragma omp parallel if (size_t(N) * C >= kMinParallelWork)
  {
    std::vector<float> row(static_cast<size_t>(C), 0.0f);
#pragma omp for schedule(static)
    for (int r = 0; r < N; ++r) {
      layernorm_row(row.data(), &mean[r], &rstd[r], inp + size_t(r) * C, weight, bias, C);
      BFloat16* y = out.b16() + size_t(r) * C;
      for (int c = 0; c < C; ++c) y[c] = to_bf16(row[c]);
    }
  }
}

void CpuBackend::layernorm_backward(float* dinp,          // (N, C) +=
                                    float* dweight,       // (C) +=
                                    float* dbias,         // (C) +=
                                    TensorIn dout,        // (N, C)
                                    const float* inp,     // (N, C)
                                    const float* weight,  // (C)
                                    const float* mean,    // (N)
                                    const float* rstd,    // (N)
                                    int N, int C) {
  check_gemm_dout(dout, "layernorm_backward");
  // One pass over dout and inp: each thread takes a contiguous block of rows, writes its rows of dinp and sums its
  // rows' dweight/dbias contributions into a private (2, C) partial. A bf16-stored dout is widened a row at a time.
  const int max_threads = omp_get_max_threads();
  const size_t stride = (2 * size_t(C) + 15) / 16 * 16;             // whole cache lines per thread: no false sharing
  std::vector<float> partials(size_t(max_threads) * stride, 0.0f);  // (threads, 2, C) padded
#pragma omp parallel if (size_t(N) * C >= kMinParallelWork)
  {
    const int tid = omp_get_thread_num();
    const cpu::Span rows = cpu::thread_span(size_t(N), tid, omp_get_num_threads());
    float* dw = partials.data() + size_t(tid) * stride;
    float* db = dw + C;
    std::vector<float> row(dout.bf16 ? size_t(C) : 0);
    for (size_t r = rows.begin; r < rows.end; ++r) {
      const float* g = dout.bf16 ? row.data() : dout.f32() + r * C;
      if (dout.bf16) widen_bf16(row.data(), dout.b16() + r * C, size_t(C));
      layernorm_backward_row(dinp + r * C, dw, db, g, inp + r * C, weight, mean[r], rstd[r], C);
    }
  }
  // Thread order, not completion order: deterministic for a fixed thread count. Unused partials are zero.
  for (int t = 0; t < max_threads; ++t) {
    const float* dw = partials.data() + size_t(t) * stride;
    const float* db = dw + C;
#pragma omp simd
    for (int c = 0; c < C; ++c) {
      dweight[c] += dw[c];
      dbias[c] += db[c];
    }
  }
}

}  // namespace ember
