// CPU backend: causal multi-head self-attention, flash style (forward saves only the per-row log-sum-exp).
// Threads take whole (batch, head) pairs; each walks its queries in blocks with small GEMMs on a private scratch.
#include <cmath>
#include <limits>
#include <memory>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_common.h"
#include "backend/cpu/cpu_gemm.h"
#include "core/error.h"

namespace ember {

using cpu::exp_approx;
using cpu::gemm;

namespace {

// Queries per block: a block's scores against all earlier keys are (64, T), 256 KB at T = 1024, so the two
// buffers backward needs stay within this machine class's 1 MB of L2 per core, while 64 rows keep the GEMMs
// efficient. The causal mask wastes only the upper half of each diagonal (64, 64) tile.
constexpr int kQueryBlock = 64;

// One query row of the forward pass: turns the scaled scores of the n visible keys into e^(s_j - max) in place,
// zeroes the masked tail up to `keys`, stores the row's log-sum-exp and returns the sum.
EMBER_CPU_CLONES float softmax_causal_row(float* s, int n, int keys, float* lse) {
  float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
  for (int j = 0; j < n; ++j) m = cpu::max_value(m, s[j]);
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < n; ++j) {
    s[j] = exp_approx(s[j] - m);
    sum += s[j];
  }
  for (int j = n; j < keys; ++j) s[j] = 0.0f;
  *lse = m + std::log(sum);
  return sum;
}

// One query row of the backward pass: p holds scaled scores and ds holds dP = dO V^T on entry. Rebuilds
// P = e^(s - lse) and forms dS = P (dP - D) with D = dO . O (= sum_j P_j dP_j), zero past the n visible keys.
EMBER_CPU_CLONES void attention_dscores_row(float* p, float* ds, int n, int keys, float lse, const float* o,
                                            const float* dO, int HS) {
  float D = 0.0f;
#pragma omp simd reduction(+ : D)
  for (int d = 0; d < HS; ++d) D += dO[d] * o[d];
#pragma omp simd
  for (int j = 0; j < n; ++j) {
    p[j] = exp_approx(p[j] - lse);
    ds[j] = p[j] * (ds[j] - D);
  }
  for (int j = n; j < keys; ++j) p[j] = ds[j] = 0.0f;
}

}  // namespace

void CpuBackend::attention_forward(float* out,        // (B, T, C)
                                   float* lse,        // (B, NH, T)
                                   const float* qkv,  // (B, T, 3C)
                                   int B, int T, int C, int NH) {
  EMBER_ASSERT(NH > 0 && C % NH == 0, "attention: C must be a multiple of the number of heads NH");
  const int HS = C / NH, C3 = 3 * C, BQ = std::min(T, kQueryBlock);
  const float scale = 1.0f / std::sqrt(float(HS));
#pragma omp parallel if (size_t(B) * T * T * C >= cpu::kMinParallelWork)
  {
    std::unique_ptr<float[]> scores(new float[size_t(BQ) * T]);  // (BQ, T) for one query block
    float inv_sum[kQueryBlock];
#pragma omp for schedule(static)
    for (int bh = 0; bh < B * NH; ++bh) {
      const int b = bh / NH, h = bh % NH;
      const float* q = qkv + size_t(b) * T * C3 + size_t(h) * HS;  // (T, HS), row stride 3C
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* o = out + size_t(b) * T * C + size_t(h) * HS;  // (T, HS), row stride C
      float* row_lse = lse + size_t(bh) * T;
      for (int i0 = 0; i0 < T; i0 += BQ) {
        const int rows = std::min(BQ, T - i0), keys = i0 + rows;  // queries i0.. see keys 0..keys-1 at most
        float* S = scores.get();                                  // (rows, keys)
        gemm(false, true, rows, keys, HS, scale, q + size_t(i0) * C3, C3, k, C3, 0.0f, S, keys);
        for (int r = 0; r < rows; ++r)
          inv_sum[r] = 1.0f / softmax_causal_row(S + size_t(r) * keys, i0 + r + 1, keys, &row_lse[i0 + r]);
        // O = P V with P unnormalised, then each row divided by its sum: (rows, HS) multiplies instead of (rows, keys).
        float* ob = o + size_t(i0) * C;
        gemm(false, false, rows, HS, keys, 1.0f, S, keys, v, C3, 0.0f, ob, C);
        for (int r = 0; r < rows; ++r) {
          float* orow = ob + size_t(r) * C;
#pragma omp simd
          for (int d = 0; d < HS; ++d) orow[d] *= inv_sum[r];
        }
      }
    }
  }
}

void CpuBackend::attention_backward(float* dqkv,        // (B, T, 3C) +=
                                    const float* dout,  // (B, T, C)
                                    const float* qkv,   // (B, T, 3C)
                                    const float* out,   // (B, T, C)
                                    const float* lse,   // (B, NH, T)
                                    int B, int T, int C, int NH) {
  EMBER_ASSERT(NH > 0 && C % NH == 0, "attention: C must be a multiple of the number of heads NH");
  const int HS = C / NH, C3 = 3 * C, BQ = std::min(T, kQueryBlock);
  const float scale = 1.0f / std::sqrt(float(HS));
  // Every (b, h) pair writes only its own columns of dqkv, so pairs run on different threads without races, and
  // within a pair the query blocks run in order: the sums are deterministic.
#pragma omp parallel if (size_t(B) * T * T * C >= cpu::kMinParallelWork)
  {
    std::unique_ptr<float[]> scratch(new float[2 * size_t(BQ) * T]);
#pragma omp for schedule(static)
    for (int bh = 0; bh < B * NH; ++bh) {
      const int b = bh / NH, h = bh % NH;
      const size_t qkv_off = size_t(b) * T * C3 + size_t(h) * HS, out_off = size_t(b) * T * C + size_t(h) * HS;
      const float* q = qkv + qkv_off;  // (T, HS), row stride 3C; k and v follow at +C and +2C
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* dq = dqkv + qkv_off;
      float* dk = dq + C;
      float* dv = dq + 2 * C;
      const float* o = out + out_off;   // (T, HS), row stride C
      const float* dO = dout + out_off;
      const float* row_lse = lse + size_t(bh) * T;
      for (int i0 = 0; i0 < T; i0 += BQ) {
        const int rows = std::min(BQ, T - i0), keys = i0 + rows;
        float* P = scratch.get();                 // (rows, keys) probabilities
        float* dS = P + size_t(rows) * keys;      // (rows, keys) dP, then dS in place
        const float* dOb = dO + size_t(i0) * C;
        gemm(false, true, rows, keys, HS, scale, q + size_t(i0) * C3, C3, k, C3, 0.0f, P, keys);  // scaled scores
        gemm(false, true, rows, keys, HS, 1.0f, dOb, C, v, C3, 0.0f, dS, keys);                  // dP = dO V^T
        for (int r = 0; r < rows; ++r) {
          const int i = i0 + r;
          attention_dscores_row(P + size_t(r) * keys, dS + size_t(r) * keys, i + 1, keys, row_lse[i],
                                o + size_t(i) * C, dO + size_t(i) * C, HS);
        }
        gemm(true, false, keys, HS, rows, 1.0f, P, keys, dOb, C, 1.0f, dv, C3);                     // dV += P^T dO
        gemm(false, false, rows, HS, keys, scale, dS, keys, k, C3, 1.0f, dq + size_t(i0) * C3, C3);  // dQ += s dS K
        gemm(true, false, keys, HS, rows, scale, dS, keys, q + size_t(i0) * C3, C3, 1.0f, dk, C3);   // dK += s dS^T Q
      }
    }
  }
}

}  // namespace ember
