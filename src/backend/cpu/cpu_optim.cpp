// CPU backend: the fp64 sum of squares behind gradient clipping, and the AdamW parameter update (with, for an
// offloaded optimizer's host update, the weights' bf16 copy written in the same pass).
// The sum keeps one partial per thread over a static split, combined in thread order, so it is reproducible. The
// update's loop is cloned per instruction set (core/cpu_clones.h) and vectorised (this file is compiled with
// -fno-math-errno: a square root that may set errno keeps GCC from it); each thread updates its static span.
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

// AdamW's constants for one call: the hyperparameters and the step's bias corrections.
struct AdamWConstants {
  float lr, beta1, beta2, eps, weight_decay, grad_scale, inv_bc1, inv_bc2, a1, a2;
};

AdamWConstants adamw_constants(float lr, float beta1, float beta2, float eps, float weight_decay, int t,
                               float grad_scale) {
  // Bias corrections in fp64: beta2^t with beta2 = 0.999 loses digits in fp32 over thousands of steps.
  return {lr,
          beta1,
          beta2,
          eps,
          weight_decay,
          grad_scale,
          float(1.0 / (1.0 - std::pow(double(beta1), t))),
          float(1.0 / (1.0 - std::pow(double(beta2), t))),
          1.0f - beta1,
          1.0f - beta2};
}

// Element i's update: its moments, and its weight returned.
inline float adamw_element(const AdamWConstants& k, float* params, const float* grads, float* m, float* v, size_t i) {
  const float g = grads[i] * k.grad_scale;
  const float mi = k.beta1 * m[i] + k.a1 * g;
  const float vi = k.beta2 * v[i] + k.a2 * g * g;
  m[i] = mi;
  v[i] = vi;
  const float mhat = mi * k.inv_bc1, vhat = vi * k.inv_bc2;
  const float p = params[i] - k.lr * (mhat / (std::sqrt(vhat) + k.eps) + k.weight_decay * params[i]);
  params[i] = p;
  return p;
}

EMBER_CPU_CLONES void adamw_span(const AdamWConstants& k, float* params, const float* grads, float* m, float* v,
                                 size_t n) {
#pragma omp simd
  for (size_t i = 0; i < n; ++i) adamw_element(k, params, grads, m, v, i);
}

EMBER_CPU_CLONES void adamw_span_bf16(const AdamWConstants& k, float* params, BFloat16* copy, const float* grads,
                                      float* m, float* v, size_t n) {
#pragma omp simd
  for (size_t i = 0; i < n; ++i) copy[i] = to_bf16(adamw_element(k, params, grads, m, v, i));
}

// One AdamW update of n elements over the threads; with copy (not null) each updated weight also goes, rounded to
// bf16, into copy[i].
void adamw_pass(const AdamWConstants& k, float* params, BFloat16* copy, const float* grads, float* m, float* v,
                size_t n) {
#pragma omp parallel if (n >= kMinParallelWork)
  {
    const cpu::Span s = cpu::thread_span(n, omp_get_thread_num(), omp_get_num_threads(), 16);
    const size_t b = s.begin;
    if (copy)
      adamw_span_bf16(k, params + b, copy + b, grads + b, m + b, v + b, s.end - b);
    else
      adamw_span(k, params + b, grads + b, m + b, v + b, s.end - b);
  }
}

}  // namespace

void CpuBackend::adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr, float beta1,
                              float beta2, float eps, float weight_decay, int t, float grad_scale) {
  adamw_pass(adamw_constants(lr, beta1, beta2, eps, weight_decay, t, grad_scale), params, nullptr, grads, m, v, n);
}

void CpuBackend::adamw_update_segments_bf16(float* params, BFloat16* params_bf16, const float* grads, float* m,
                                            float* v, const AdamWSegment* segs, size_t nseg, float lr, float beta1,
                                            float beta2, float eps, int t, float grad_scale) {
  for (size_t k = 0; k < nseg; ++k) {
    const size_t b = segs[k].begin;
    adamw_pass(adamw_constants(lr, beta1, beta2, eps, segs[k].weight_decay, t, grad_scale), params + b, params_bf16 + b,
               grads + b, m + b, v + b, segs[k].end - b);
  }
}

}  // namespace ember
