// CPU backend: the ops of KV-cache inference. Rows are tokens of several sequences; each row's embedding takes its own
// position, its keys and values go to its slot's cache, and its query attends to the cache up to its position.
// Threads take whole (row, head) pairs, each with a private score buffer, so results do not depend on the thread count.
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_common.h"

namespace ember {

using cpu::kMinParallelWork;

void CpuBackend::encoder_forward_positions(float* out,          // (N, C)
                                           const int32_t* inp,  // (N)
                                           const int32_t* pos,  // (N)
                                           const float* wte,    // (V, C)
                                           const float* wpe,    // (maxT, C)
                                           int N, int C) {
#pragma omp parallel for schedule(static) if (size_t(N) * C >= kMinParallelWork)
  for (int i = 0; i < N; ++i) {
    const float* te = wte + size_t(inp[i]) * C;
    float* o = out + size_t(i) * C;
    if (!wpe) {
      std::copy(te, te + C, o);
      continue;
    }
    const float* pe = wpe + size_t(pos[i]) * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] = te[c] + pe[c];
  }
}

void CpuBackend::kv_cache_write(float* k_cache,       // (S, max_T, C)
                                float* v_cache,       // (S, max_T, C)
                                const float* qkv,     // (N, 3C)
                                const int32_t* slot,  // (N)
                                const int32_t* pos,   // (N)
                                int N, int C, int max_T) {
  for (int i = 0; i < N; ++i) {
    const size_t row = (size_t(slot[i]) * max_T + pos[i]) * C;
    const float* src = qkv + size_t(i) * 3 * C;
    std::copy(src + C, src + 2 * C, k_cache + row);
    std::copy(src + 2 * C, src + 3 * C, v_cache + row);
  }
}

namespace {

// One (row, head): scores of q against keys 0..n-1 into s, softmax, then o = sum_j p_j v_j. k and v point at the
// head's columns of the slot's first cache row; rows are C apart.
EMBER_CPU_CLONES void attend_row(float* o, const float* q, const float* k, const float* v, int n, int C, int HS,
                                 float scale, float* s) {
  float m = -INFINITY;
  for (int j = 0; j < n; ++j) {
    const float* kj = k + size_t(j) * C;
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int d = 0; d < HS; ++d) dot += q[d] * kj[d];
    s[j] = dot * scale;
    m = cpu::max_value(m, s[j]);
  }
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < n; ++j) {
    s[j] = cpu::exp_approx(s[j] - m);
    sum += s[j];
  }
  for (int d = 0; d < HS; ++d) o[d] = 0.0f;
  for (int j = 0; j < n; ++j) {
    const float* vj = v + size_t(j) * C;
    const float p = s[j];
#pragma omp simd
    for (int d = 0; d < HS; ++d) o[d] += p * vj[d];
  }
  const float inv = 1.0f / sum;
#pragma omp simd
  for (int d = 0; d < HS; ++d) o[d] *= inv;
}

}  // namespace

void CpuBackend::attention_kv_forward(float* out,            // (N, C)
                                      const float* qkv,      // (N, 3C)
                                      const float* k_cache,  // (S, max_T, C)
                                      const float* v_cache,  // (S, max_T, C)
                                      const int32_t* slot,   // (N)
                                      const int32_t* pos,    // (N)
                                      int N, int C, int NH, int max_T) {
  const int HS = C / NH;
  const float scale = 1.0f / std::sqrt(float(HS));
  size_t work = 0;
  for (int i = 0; i < N; ++i) work += size_t(pos[i] + 1) * C;
#pragma omp parallel if (2 * work >= kMinParallelWork)
  {
    float* scores = cpu::thread_scratch(size_t(max_T));
#pragma omp for schedule(static)
    for (int item = 0; item < N * NH; ++item) {
      const int i = item / NH, h = item % NH;
      const size_t base = size_t(slot[i]) * max_T * C + size_t(h) * HS;
      attend_row(out + size_t(i) * C + size_t(h) * HS, qkv + size_t(i) * 3 * C + size_t(h) * HS, k_cache + base,
                 v_cache + base, pos[i] + 1, C, HS, scale, scores);
    }
  }
}

}  // namespace ember
