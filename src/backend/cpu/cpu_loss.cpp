// CPU backend: softmax cross-entropy (forward losses, backward dlogits) and the sampling softmax.
// Rows are independent and split statically over threads; each row is max-shifted so exp never overflows. The
// cross-entropy's logits and dlogits may be stored in bf16, in rows ld >= V apart whose columns from V on take no part
// (the backward op writes them as zero).
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_common.h"
#include "core/error.h"

namespace ember {

using cpu::exp_approx;
using cpu::kMinParallelWork;

namespace {

// Inlined into each ISA clone of its callers so that it is vectorised for that ISA too.
[[gnu::always_inline]] inline float row_max(const float* x, int V) {
  float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
  for (int j = 0; j < V; ++j) m = cpu::max_value(m, x[j]);
  return m;
}

// -log softmax(x)[target] = logsumexp(x) - x[target].
EMBER_CPU_CLONES float crossentropy_row(const float* x, int target, int V) {
  const float m = row_max(x, V);
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < V; ++j) sum += exp_approx(x[j] - m);
  return m + std::log(sum) - x[target];
}

// y = a * softmax(x * inv_t), with y allowed to alias x. Three passes (max, exp into y, scale) with one exp per
// element: every read of x[j] precedes the write of y[j] at the same index, and later passes read only y.
EMBER_CPU_CLONES void scaled_softmax_row(float* y, const float* x, float inv_t, float a, int V) {
  const float shift = row_max(x, V) * inv_t;  // max(x / t) = max(x) / t for t > 0
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < V; ++j) {
    const float e = exp_approx(x[j] * inv_t - shift);
    y[j] = e;
    sum += e;
  }
  const float s = a / sum;
#pragma omp simd
  for (int j = 0; j < V; ++j) y[j] *= s;
}

void check_targets(const int32_t* targets, int N, int V) {
  // Checked before the parallel loop: an exception must not escape an OpenMP region.
  for (int r = 0; r < N; ++r)
    EMBER_ASSERT(targets[r] >= 0 && targets[r] < V, "cross-entropy: target token id out of range [0, V)");
}

}  // namespace

// Rows stored in bf16 are widened into (or computed in, and rounded from) a row of fp32 per thread.
void CpuBackend::crossentropy_forward(float* losses,           // (N)
                                      TensorIn logits,         // (N, ld)
                                      const int32_t* targets,  // (N)
                                      int N, int V, int ld) {
  EMBER_ASSERT(ld >= V, "cross-entropy: the row stride ld must be at least V");
  check_targets(targets, N, V);
#pragma omp parallel if (size_t(N) * V >= kMinParallelWork)
  {
    std::vector<float> row(logits.bf16 ? size_t(V) : 0);
#pragma omp for schedule(static)
    for (int r = 0; r < N; ++r) {
      if (logits.bf16) widen_bf16(row.data(), logits.b16() + size_t(r) * ld, size_t(V));
      losses[r] = crossentropy_row(logits.bf16 ? row.data() : logits.f32() + size_t(r) * ld, targets[r], V);
    }
  }
}

void CpuBackend::crossentropy_backward(TensorOut dlogits,       // (N, ld), may alias logits
                                       TensorIn logits,         // (N, ld)
                                       const int32_t* targets,  // (N)
                                       float dloss, int N, int V, int ld) {
  EMBER_ASSERT(ld >= V, "cross-entropy: the row stride ld must be at least V");
  check_targets(targets, N, V);
#pragma omp parallel if (size_t(N) * V >= kMinParallelWork)
  {
    std::vector<float> row(logits.bf16 || dlogits.bf16 ? size_t(V) : 0);
#pragma omp for schedule(static)
    for (int r = 0; r < N; ++r) {
      const size_t at = size_t(r) * ld;
      if (logits.bf16) widen_bf16(row.data(), logits.b16() + at, size_t(V));
      const float* x = logits.bf16 ? row.data() : logits.f32() + at;
      float* g = dlogits.bf16 ? row.data() : dlogits.f32() + at;
      scaled_softmax_row(g, x, 1.0f, dloss, V);  // dloss * softmax, in place if aliased
      g[targets[r]] -= dloss;
      if (dlogits.bf16) {
        for (int j = 0; j < V; ++j) dlogits.b16()[at + size_t(j)] = to_bf16(row[size_t(j)]);
        for (int j = V; j < ld; ++j) dlogits.b16()[at + size_t(j)] = to_bf16(0.0f);
      } else {
        for (int j = V; j < ld; ++j) g[j] = 0.0f;
      }
    }
  }
}

void CpuBackend::softmax_forward(float* probs,         // (N, V)
                                 const float* logits,  // (N, V)
                                 float temperature, int N, int V) {
  EMBER_ASSERT(temperature > 0.0f, "softmax: temperature must be positive");
  const float inv_t = 1.0f / temperature;
#pragma omp parallel for schedule(static) if (size_t(N) * V >= kMinParallelWork)
  for (int r = 0; r < N; ++r) scaled_softmax_row(probs + size_t(r) * V, logits + size_t(r) * V, inv_t, 1.0f, V);
}

}  // namespace ember
