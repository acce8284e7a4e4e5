// CPU backend: the fp64 sum of squares behind gradient clipping, and the AdamW parameter update (with, for an
// offloaded optimizer's host update, the weights' bf16 copy written in the same pass).
// The sum keeps one partial per thread over a static split, combined in thread order, so it is reproducible.
#include <omp.h>

#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_common.h"

namespace ember {

using cpu::kMinParallelWork;

double CpuBackend::sum_squares(const float* x,  // (n)
                               size_t n) {
  std::vector<double> partials(size_t(omp_get_max_threads()), 0.0);
#pragma omp parallel if (n >= kMinParallelWork)
  {
    const int tid = omp_get_thread_num();
    const cpu::Span s = cpu::thread_span(n, tid, omp_get_num_threads(), 16);
    double acc = 0.0;
#pragma omp simd reduction(+ : acc)
    for (size_t i = s.begin; i < s.end; ++i) acc += double(x[i]) * double(x[i]);
    partials[size_t(tid)] = acc;
  }
  double total = 0.0;
  for (double p : partials) total += p;
  return total;
}

namespace {

// One AdamW update of n elements; with kCopy each updated weight also goes, rounded to bf16, into copy[i].
template <bool kCopy>
void adamw_pass(float* params,       // (n)
                BFloat16* copy,      // (n) with kCopy
                const float* grads,  // (n)
                float* m,            // (n)
                float* v,            // (n)
                size_t n, float lr, float beta1, float beta2, float eps, float weight_decay, int t, float grad_scale) {
  // Bias corrections in fp64: beta2^t with beta2 = 0.999 loses digits in fp32 over thousands of steps.
  const float inv_bc1 = float(1.0 / (1.0 - std::pow(double(beta1), t)));
  const float inv_bc2 = float(1.0 / (1.0 - std::pow(double(beta2), t)));
  const float a1 = 1.0f - beta1, a2 = 1.0f - beta2;
#pragma omp parallel for simd schedule(static) if (n >= kMinParallelWork)
  for (size_t i = 0; i < n; ++i) {
    const float g = grads[i] * grad_scale;
    const float mi = beta1 * m[i] + a1 * g;
    const float vi = beta2 * v[i] + a2 * g * g;
    m[i] = mi;
    v[i] = vi;
    const float mhat = mi * inv_bc1, vhat = vi * inv_bc2;
    const float p = params[i] - lr * (mhat / (std::sqrt(vhat) + eps) + weight_decay * params[i]);
    params[i] = p;
    if constexpr (kCopy) copy[i] = to_bf16(p);
  }
}

}  // namespace

void CpuBackend::adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr, float beta1,
                              float beta2, float eps, float weight_decay, int t, float grad_scale) {
  adamw_pass<false>(params, nullptr, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, t, grad_scale);
}

void CpuBackend::adamw_update_segments_bf16(float* params, BFloat16* params_bf16, const float* grads, float* m,
                                            float* v, const AdamWSegment* segs, size_t nseg, float lr, float beta1,
                                            float beta2, float eps, int t, float grad_scale) {
  for (size_t k = 0; k < nseg; ++k) {
    const size_t b = segs[k].begin;
    adamw_pass<true>(params + b, params_bf16 + b, grads + b, m + b, v + b, segs[k].end - b, lr, beta1, beta2, eps,
                     segs[k].weight_decay, t, grad_scale);
  }
}

}  // namespace ember
