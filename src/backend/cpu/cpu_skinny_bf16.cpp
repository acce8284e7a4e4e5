// CPU backend: the dense layers and the lm_head over a few rows with bf16-stored weights, as KV-cache decoding runs
// them. A step of a few tokens reads every weight once and does little arithmetic with it, so its time is the bytes
// of the weights: these kernels stream the bf16 weights and widen them in registers, where the general path would
// first widen the whole matrix into fp32 scratch (2 bytes read, 4 written and 4 read again per weight).
// Every output element sums its products in one fixed order, so results do not depend on the thread count.
#include "backend/cpu/cpu_skinny_bf16.h"

#include <omp.h>

#include <algorithm>

#include "backend/cpu/cpu_common.h"

namespace ember::cpu {

namespace {

// Columns a thread accumulates at once: kColumns * rows floats of accumulators stay in L1 (16 KB at 16 rows).
constexpr int kColumns = 256;

// out[r, c0..c1) (+)= x[r, :] @ w[:, c0..c1) for r < N, accumulating over k in order. acc holds N x kColumns floats.
EMBER_CPU_CLONES void skinny_columns(float* out, const float* x, const BFloat16* w, const float* bias, int N, int K,
                                     int OC, int c0, int c1, float* acc, float* wrow) {
  for (int cb = c0; cb < c1; cb += kColumns) {
    const int nc = std::min(kColumns, c1 - cb);
    for (int r = 0; r < N; ++r) {
      float* a = acc + size_t(r) * kColumns;
      for (int c = 0; c < nc; ++c) a[c] = bias ? bias[cb + c] : 0.0f;
    }
    for (int k = 0; k < K; ++k) {
      const BFloat16* src = w + size_t(k) * OC + cb;
#pragma omp simd
      for (int c = 0; c < nc; ++c) wrow[c] = from_bf16(src[c]);
      for (int r = 0; r < N; ++r) {
        const float xv = x[size_t(r) * K + k];
        float* a = acc + size_t(r) * kColumns;
#pragma omp simd
        for (int c = 0; c < nc; ++c) a[c] += xv * wrow[c];
      }
    }
    for (int r = 0; r < N; ++r)
      std::copy(acc + size_t(r) * kColumns, acc + size_t(r) * kColumns + nc, out + size_t(r) * OC + cb);
  }
}

// The same over a block of 16 columns at cb and R rows, the accumulators in registers (R x 2 AVX2 vectors): per k,
// one widened row piece of w, R broadcasts and 2R FMAs, against 2 loads and a store per FMA for accumulators in
// memory. At 768 x 3072 this ran 1.5x faster at 1 row (13.6 GB/s, the memory's rate) and 1.2x at 8.
constexpr int kBlockColumns = 16;
template <int R>
EMBER_CPU_CLONES void skinny_block(float* out, const float* x, const BFloat16* w, const float* bias, int K, int OC,
                                   int cb) {
  float acc[R][kBlockColumns];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < kBlockColumns; ++c) acc[r][c] = bias ? bias[cb + c] : 0.0f;
  for (int k = 0; k < K; ++k) {
    const BFloat16* src = w + size_t(k) * OC + cb;
    float wv[kBlockColumns];
#pragma omp simd
    for (int c = 0; c < kBlockColumns; ++c) wv[c] = from_bf16(src[c]);
    for (int r = 0; r < R; ++r) {
      const float xv = x[size_t(r) * K + k];
#pragma omp simd
      for (int c = 0; c < kBlockColumns; ++c) acc[r][c] += xv * wv[c];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < kBlockColumns; ++c) out[size_t(r) * OC + cb + c] = acc[r][c];
}

// Columns [c0, c1) of all N rows: whole 16-column blocks in groups of up to 4 rows, the rest by skinny_columns.
void skinny_span(float* out, const float* x, const BFloat16* w, const float* bias, int N, int K, int OC, int c0, int c1,
                 float* acc, float* wrow) {
  const int full = c0 + (c1 - c0) / kBlockColumns * kBlockColumns;
  for (int cb = c0; cb < full; cb += kBlockColumns)
    for (int r0 = 0; r0 < N; r0 += 4) {
      const float* xr = x + size_t(r0) * K;
      float* o = out + size_t(r0) * OC;
      switch (std::min(4, N - r0)) {
        case 4:
          skinny_block<4>(o, xr, w, bias, K, OC, cb);
          break;
        case 3:
          skinny_block<3>(o, xr, w, bias, K, OC, cb);
          break;
        case 2:
          skinny_block<2>(o, xr, w, bias, K, OC, cb);
          break;
        default:
          skinny_block<1>(o, xr, w, bias, K, OC, cb);
          break;
      }
    }
  if (full < c1) skinny_columns(out, x, w, bias, N, K, OC, full, c1, acc, wrow);
}

// out[r, v] = x[r, :] . wte[v, :] for v in [v0, v1).
EMBER_CPU_CLONES void skinny_rows(float* out, const float* x, const BFloat16* wte, int N, int C, int V, int v0, int v1,
                                  float* wrow) {
  for (int v = v0; v < v1; ++v) {
    const BFloat16* src = wte + size_t(v) * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) wrow[c] = from_bf16(src[c]);
    for (int r = 0; r < N; ++r) {
      const float* xr = x + size_t(r) * C;
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int c = 0; c < C; ++c) dot += xr[c] * wrow[c];
      out[size_t(r) * V + v] = dot;
    }
  }
}

}  // namespace

void skinny_matmul_bf16(float* out, const float* x, const BFloat16* w, const float* bias, int N, int K, int OC) {
#pragma omp parallel if (size_t(K) * OC >= kMinParallelWork)
  {
    float* acc = thread_scratch(size_t(N + 1) * kColumns);  // N rows of accumulators, then wrow (for a tail)
    const Span s = thread_span(size_t(OC), omp_get_thread_num(), omp_get_num_threads(), 16);
    if (s.begin < s.end)
      skinny_span(out, x, w, bias, N, K, OC, int(s.begin), int(s.end), acc, acc + size_t(N) * kColumns);
  }
}

void skinny_matmul_transposed_bf16(float* out, const float* x, const BFloat16* wte, int N, int C, int V) {
#pragma omp parallel if (size_t(C) * V >= kMinParallelWork)
  {
    float* wrow = thread_scratch(size_t(C));
    const Span s = thread_span(size_t(V), omp_get_thread_num(), omp_get_num_threads(), 16);
    if (s.begin < s.end) skinny_rows(out, x, wte, N, C, V, int(s.begin), int(s.end), wrow);
  }
}

}  // namespace ember::cpu
