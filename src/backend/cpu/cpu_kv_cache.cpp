// CPU backend: the ops of KV-cache inference. Rows are tokens of several sequences; each row's embedding takes its own
// position, its keys and values go to its slot's cache, and its query attends to the cache up to its position.
// Threads take whole (row, head) pairs, each with a private score buffer, so results do not depend on the thread count.
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_common.h"
#include "core/error.h"
#include "core/rope.h"

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

void CpuBackend::kv_cache_write(float* k_cache,       // (S, ring, C)
                                float* v_cache,       // (S, ring, C)
                                const float* qkv,     // (N, 3C)
                                const int32_t* slot,  // (N)
                                const int32_t* pos,   // (N)
                                int N, int C, int NH, const KvAttention& a) {
  const int HS = C / NH, half = HS / 2;
  for (int i = 0; i < N; ++i) {
    const size_t row = (size_t(slot[i]) * a.ring + size_t(pos[i] % a.ring)) * C;
    const float* src = qkv + size_t(i) * 3 * C;
    std::copy(src + C, src + 2 * C, k_cache + row);
    std::copy(src + 2 * C, src + 3 * C, v_cache + row);
    if (a.rope_cos)
      for (int h = 0; h < NH; ++h)
        rope_rotate(k_cache + row + size_t(h) * HS, a.rope_cos + size_t(i) * half, a.rope_sin + size_t(i) * half, half);
  }
}

namespace {

// One (row, head): scores of q against the keys first..p (cache rows j % ring, C apart from the head's columns of the
// slot's first row) into s, the ALiBi bias, softmax, then o = sum_j p_j v_j in position order.
EMBER_CPU_CLONES void attend_row(float* o, const float* q, const float* k, const float* v, int first, int p, int ring,
                                 int C, int HS, float scale, float slope, float* s) {
  const int n = p - first + 1;
  float m = -INFINITY;
  for (int t = 0; t < n; ++t) {
    const float* kj = k + size_t((first + t) % ring) * C;
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int d = 0; d < HS; ++d) dot += q[d] * kj[d];
    s[t] = dot * scale;
    if (slope != 0.0f) s[t] = s[t] - slope * float(p - (first + t));
    m = cpu::max_value(m, s[t]);
  }
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int t = 0; t < n; ++t) {
    s[t] = cpu::exp_approx(s[t] - m);
    sum += s[t];
  }
  for (int d = 0; d < HS; ++d) o[d] = 0.0f;
  for (int t = 0; t < n; ++t) {
    const float* vj = v + size_t((first + t) % ring) * C;
    const float w = s[t];
#pragma omp simd
    for (int d = 0; d < HS; ++d) o[d] += w * vj[d];
  }
  const float inv = 1.0f / sum;
#pragma omp simd
  for (int d = 0; d < HS; ++d) o[d] *= inv;
}

}  // namespace

void CpuBackend::attention_kv_forward(float* out,            // (N, C)
                                      const float* qkv,      // (N, 3C)
                                      const float* k_cache,  // (S, ring, C)
                                      const float* v_cache,  // (S, ring, C)
                                      const int32_t* slot,   // (N)
                                      const int32_t* pos,    // (N)
                                      int N, int C, int NH, const KvAttention& a) {
  const int HS = C / NH, half = HS / 2;
  const float scale = 1.0f / std::sqrt(float(HS));
  auto first_key = [&](int i) { return a.window > 0 ? std::max(0, pos[i] - a.window) : 0; };
  size_t work = 0;
  int most = 1;
  for (int i = 0; i < N; ++i) {
    const int n = pos[i] - first_key(i) + 1;
    EMBER_ASSERT(n <= a.ring, "attention_kv_forward: a row's keys do not fit the cache's ring");
    work += size_t(n) * C, most = std::max(most, n);
  }
#pragma omp parallel if (2 * work >= kMinParallelWork)
  {
    float* scores = cpu::thread_scratch(size_t(most) + size_t(HS));
    float* qr = scores + most;  // the rotated query under rope
#pragma omp for schedule(static)
    for (int item = 0; item < N * NH; ++item) {
      const int i = item / NH, h = item % NH;
      const size_t base = size_t(slot[i]) * a.ring * C + size_t(h) * HS;
      const float* q = qkv + size_t(i) * 3 * C + size_t(h) * HS;
      if (a.rope_cos) {
        std::copy(q, q + HS, qr);
        rope_rotate(qr, a.rope_cos + size_t(i) * half, a.rope_sin + size_t(i) * half, half);
        q = qr;
      }
      attend_row(out + size_t(i) * C + size_t(h) * HS, q, k_cache + base, v_cache + base, first_key(i), pos[i], a.ring,
                 C, HS, scale, a.alibi_slope, scores);
    }
  }
}

}  // namespace ember
