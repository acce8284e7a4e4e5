// CPU backend: causal multi-head self-attention, flash style (forward saves only the per-row log-sum-exp).
// Threads take whole (batch, head) pairs; each walks its queries in blocks with small GEMMs on a private scratch.
// Under matmul precision bf16 (for the head sizes of attention_in_bf16) the products' inputs are rounded to bf16, as
// the CUDA backend's tensor-core kernels take them, and qkv and out may be stored in bf16.
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_common.h"
#include "backend/cpu/cpu_gemm.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/rope.h"

namespace ember {

using cpu::exp_approx;
using cpu::gemm;

namespace {

// Queries per block. A block's scores against all earlier keys are (64, T), 256 KB at T = 1024. Blocks of 128 or
// 256 rows made the GEMMs under 10% faster single-threaded, but need 2-4x the scratch and, at T = 128, would
// waste half of the score tile on the causal mask instead of a quarter.
constexpr int kQueryBlock = 64;

// Rows of the score buffers are padded to a multiple of 16 floats (one AVX-512 vector) and the row loops run over
// whole vectors: a scalar tail of up to 15 exps per row would otherwise cost as much as the vector part at T = 128.
// The masked lanes of the last vector are set to -inf first, so they add e^-87 = 1.6e-38 (exp_approx's floor) to
// sums of at least 1, and are zeroed afterwards. Lane masks (j < n ? ...) would vectorise only for AVX-512.
constexpr int kLanes = 16;
int pad_lanes(int n) { return (n + kLanes - 1) / kLanes * kLanes; }
constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

// The ALiBi bias of a row: the visible scores s[a..b) (key klo + j for query i, dist0 = i - klo) get
// -slope * (i - key) added. bias_row leaves the row alone at slope 0.
EMBER_CPU_CLONES void bias_row(float* s, int a, int b, float slope, int dist0) {
  if (slope == 0.0f) return;
#pragma omp simd
  for (int j = a; j < b; ++j) s[j] = s[j] - slope * float(dist0 - j);
}

// One query row of the forward pass, s of length ld (a multiple of 16): turns the scaled scores of the visible keys
// [a, b) into e^(s_j - max) in place, zeroes the rest, stores the row's log-sum-exp and returns the sum.
EMBER_CPU_CLONES float softmax_row(float* s, int a, int b, int ld, float* lse) {
  const int w = pad_lanes(b);
  for (int j = b; j < w; ++j) s[j] = kMinusInf;
  float m = kMinusInf;
#pragma omp simd reduction(max : m)
  for (int j = a; j < w; ++j) m = cpu::max_value(m, s[j]);
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int j = a; j < w; ++j) {
    s[j] = exp_approx(s[j] - m);
    sum += s[j];
  }
  for (int j = 0; j < a; ++j) s[j] = 0.0f;
  for (int j = b; j < ld; ++j) s[j] = 0.0f;
  *lse = m + std::log(sum);
  return sum;
}

// One query row of the backward pass: p holds scaled (and biased) scores and ds holds dP = dO V^T on entry (length
// ld). Rebuilds P = e^(s - lse) and forms dS = P (dP - D) with D = dO . O (= sum_j P_j dP_j), zero outside the
// visible keys [a, b).
EMBER_CPU_CLONES void attention_dscores_row(float* p, float* ds, int a, int b, int ld, float lse, const float* o,
                                            const float* dO, int HS) {
  float D = 0.0f;
#pragma omp simd reduction(+ : D)
  for (int d = 0; d < HS; ++d) D += dO[d] * o[d];
  const int w = pad_lanes(b);
  for (int j = b; j < w; ++j) p[j] = kMinusInf, ds[j] = 0.0f;
#pragma omp simd
  for (int j = a; j < w; ++j) {
    p[j] = exp_approx(p[j] - lse);
    ds[j] = p[j] * (ds[j] - D);
  }
  for (int j = 0; j < a; ++j) p[j] = ds[j] = 0.0f;
  for (int j = b; j < ld; ++j) p[j] = ds[j] = 0.0f;
}

// Attention in bf16 (attention_in_bf16) emulates the CUDA backend's tensor-core kernels: every product's inputs are
// rounded to bf16 (q, k, v and dout as they are read; P and dS before the product each feeds, P in the forward pass
// relative to the running maximum as the kernel holds it), while the softmax statistics, the row sums and
// D = dO . O stay fp32, with O in D rounded to bf16 (as the model stores it). This rounds the first n values of each
// of `rows` rows `ld` apart, in place.
void round_rows(float* x, int rows, int n, int ld) {
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < n; ++j) x[size_t(r) * ld + j] = round_to_bf16(x[size_t(r) * ld + j]);
}

// The forward pass's row in bf16: as softmax_row (the row sum and lse from e^(s - max) in fp32), but the values
// left in s for P V are those the tensor-core kernel multiplies. It walks the keys in tiles of kTensorCoreKeyTile
// (column 0 of s is a multiple of the tile: the blocks' first key is aligned to it) with a running maximum m_t,
// skipping tiles with no visible key, rounds e^(s_j - m_t) to bf16 and rescales the tile's share by e^(m_t - m) at the
// end; the same here: s_j = bf16(e^(s_j - m_t)) e^(m_t - max).
constexpr int kTensorCoreKeyTile = 64;  // cuda/cuda_attention_tc.cuh kTile
float softmax_row_bf16(float* s, int a, int b, int ld, float* lse) {
  float m = kMinusInf;
  for (int j = a; j < b; ++j) m = cpu::max_value(m, s[j]);
  float sum = 0.0f, m_t = kMinusInf;
  for (int j0 = a / kTensorCoreKeyTile * kTensorCoreKeyTile; j0 < b; j0 += kTensorCoreKeyTile) {
    const int j1 = std::min(b, j0 + kTensorCoreKeyTile), ja = std::max(a, j0);
    for (int j = ja; j < j1; ++j) m_t = cpu::max_value(m_t, s[j]);
    const float rescale = exp_approx(m_t - m);
    for (int j = ja; j < j1; ++j) {
      sum += exp_approx(s[j] - m);
      s[j] = round_to_bf16(exp_approx(s[j] - m_t)) * rescale;
    }
  }
  for (int j = 0; j < a; ++j) s[j] = 0.0f;
  for (int j = b; j < ld; ++j) s[j] = 0.0f;
  *lse = m + std::log(sum);
  return sum;
}

// Rows of n fp32 values (src, row stride lds) rounded into bf16 storage (dst, row stride ldd).
void store_rows(BFloat16* dst, int ldd, const float* src, int lds, int rows, int n) {
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < n; ++j) dst[size_t(r) * ldd + j] = to_bf16(src[size_t(r) * lds + j]);
}

// Copies one head's (rows, HS) slice out of rows `stride` apart into a contiguous buffer. The GEMMs read K and V once
// per query block; packing them straight from (B, T, 3C) rows 3C apart costs a TLB miss per row at T = 1024
// (measured 2.5x slower than from a contiguous copy, which also stays in L2 across the blocks). A bf16-stored src is
// widened.
void gather_head(float* dst, TensorIn src, int rows, int HS, int stride) {
  if (src.bf16) {
    for (int t = 0; t < rows; ++t) widen_bf16(dst + size_t(t) * HS, src.b16() + size_t(t) * stride, size_t(HS));
    return;
  }
  for (int t = 0; t < rows; ++t) std::memcpy(dst + size_t(t) * HS, src.f32() + size_t(t) * stride, sizeof(float) * HS);
}

// q or k rows as the products read them: rotated by their positions pos0.. (with a rotary table) and then, in bf16,
// rounded to bf16.
struct RopeRows {
  const float* cos = nullptr;  // (T, HS/2) each, or null: no rotation
  const float* sin = nullptr;
};
void prepare_rows(float* x, int rows, int HS, int pos0, const RopeRows& rope, bool bf16) {
  if (rope.cos) {
    const int half = HS / 2;
    for (int r = 0; r < rows; ++r)
      rope_rotate(x + size_t(r) * HS, rope.cos + size_t(pos0 + r) * half, rope.sin + size_t(pos0 + r) * half, half);
  }
  if (bf16) round_rows(x, rows, HS, HS);
}

// Gradient rows of rotated q or k (rows `ld` apart) carried back through the rotation.
void rotate_rows_back(float* g, int rows, int ld, int HS, int pos0, const RopeRows& rope) {
  if (!rope.cos) return;
  const int half = HS / 2;
  for (int r = 0; r < rows; ++r)
    rope_rotate_back(g + size_t(r) * ld, rope.cos + size_t(pos0 + r) * half, rope.sin + size_t(pos0 + r) * half, half);
}

// The first key a block of queries from i0 reads: the window's first for i0; in bf16 aligned down to a tensor-core
// key tile (the bf16 rows' tiles start there, as the CUDA kernel's do).
int block_first_key(const AttentionLayer& layer, int i0, bool bf16) {
  const int first = layer.first_key(i0);
  return bf16 ? first / kTensorCoreKeyTile * kTensorCoreKeyTile : first;
}

// Queries per block for a layer: a block reads the keys of its first query's window to its last query, so a narrow
// window takes narrow blocks (16 queries for windows up to 64 keys: at most 80 keys a block where each row sees 65;
// 64 queries would read 128). Full attention, and windows of T or more, keep kQueryBlock.
int query_block(const AttentionLayer& layer, int T) {
  if (layer.window == 0 || layer.window >= T) return std::min(T, kQueryBlock);
  return std::min(T, layer.window <= 64 ? 16 : layer.window <= 256 ? 32 : kQueryBlock);
}

}  // namespace

const CpuBackend::RopeCache* CpuBackend::rope_for(const AttentionLayer& layer, int HS, int T) {
  if (layer.rope_theta == 0.0f) return nullptr;
  RopeCache& c = rope_cache_;
  if (c.theta != layer.rope_theta || c.half != HS / 2 || c.positions < T) {
    c.theta = layer.rope_theta, c.half = HS / 2, c.positions = T;
    c.cos.resize(size_t(T) * c.half), c.sin.resize(size_t(T) * c.half);
    rope_table(c.theta, c.half, 0, T, c.cos.data(), c.sin.data());
  }
  return &c;
}

void CpuBackend::attention_forward(TensorOut out,  // (B, T, C)
                                   float* lse,     // (B, NH, T)
                                   TensorIn qkv,   // (B, T, 3C)
                                   int B, int T, int C, int NH, const AttentionLayer& layer) {
  check_attention_storage(qkv, out, C, NH, "attention_forward");
  check_attention_layer(layer, C, NH, "attention_forward");
  const int HS = C / NH, C3 = 3 * C, BQ = query_block(layer, T);
  const float scale = 1.0f / std::sqrt(float(HS));
  const bool bf16 = attention_in_bf16(matmul_precision_, HS);
  const RopeCache* rc = rope_for(layer, HS, T);
  const RopeRows rope = rc ? RopeRows{rc->cos.data(), rc->sin.data()} : RopeRows{};
  const bool copy_q = bf16 || rope.cos;  // q read through a prepared copy rather than from qkv
#pragma omp parallel if (size_t(B) * T * T * C >= cpu::kMinParallelWork)
  {
    // Per thread: one query block's scores (BQ, T) with rows padded to whole vectors, the head's K and V, the query
    // block's prepared q where it is copied, and for bf16 storage its output.
    const size_t score_size = size_t(BQ) * pad_lanes(T), head_size = size_t(T) * HS;
    std::unique_ptr<float[]> scratch(new float[score_size + 2 * head_size + 2 * size_t(BQ) * HS]);
    float* S = scratch.get();
    float* kc = S + score_size;        // (T, HS)
    float* vc = kc + head_size;        // (T, HS)
    float* qr = vc + head_size;        // (BQ, HS) rotated and/or rounded
    float* ot = qr + size_t(BQ) * HS;  // (BQ, HS) the output block before it is stored in bf16
    float inv_sum[kQueryBlock];
#pragma omp for schedule(static)
    for (int bh = 0; bh < B * NH; ++bh) {
      const int b = bh / NH, h = bh % NH;
      const size_t q_off = size_t(b) * T * C3 + size_t(h) * HS;  // q (T, HS), row stride 3C; k and v after it
      gather_head(kc, qkv.at(q_off + C), T, HS, C3);
      prepare_rows(kc, T, HS, 0, rope, bf16);
      gather_head(vc, qkv.at(q_off + 2 * C), T, HS, C3);
      prepare_rows(vc, T, HS, 0, RopeRows{}, bf16);
      const size_t o_off = size_t(b) * T * C + size_t(h) * HS;  // (T, HS), row stride C
      float* row_lse = lse + size_t(bh) * T;
      for (int i0 = 0; i0 < T; i0 += BQ) {
        // queries i0.. see keys klo..keys-1 at most; S is (rows, keys - klo) with row stride ld
        const int rows = std::min(BQ, T - i0), keys = i0 + rows, klo = block_first_key(layer, i0, bf16);
        const int n = keys - klo, ld = pad_lanes(n);
        const TensorIn q = qkv.at(q_off + size_t(i0) * C3);
        if (copy_q) gather_head(qr, q, rows, HS, C3), prepare_rows(qr, rows, HS, i0, rope, bf16);
        const float* qb = copy_q ? qr : q.f32();
        const int ldq = copy_q ? HS : C3;
        gemm(false, true, rows, n, HS, scale, qb, ldq, kc + size_t(klo) * HS, HS, 0.0f, S, ld);
        for (int r = 0; r < rows; ++r) {
          const int i = i0 + r, a = layer.first_key(i) - klo, e = i + 1 - klo;
          float* row = S + size_t(r) * ld;
          bias_row(row, a, e, layer.alibi_slope, i - klo);
          const float sum =
              bf16 ? softmax_row_bf16(row, a, e, ld, &row_lse[i]) : softmax_row(row, a, e, ld, &row_lse[i]);
          inv_sum[r] = 1.0f / sum;
        }
        // O = P V with P unnormalised, then each row divided by its sum: (rows, HS) multiplies instead of (rows, keys).
        // bf16 storage: the block in fp32 first, then rounded into out.
        float* ob = out.bf16 ? ot : out.f32() + o_off + size_t(i0) * C;
        const int ldb = out.bf16 ? HS : C;
        gemm(false, false, rows, HS, n, 1.0f, S, ld, vc + size_t(klo) * HS, HS, 0.0f, ob, ldb);
        for (int r = 0; r < rows; ++r) {
          float* orow = ob + size_t(r) * ldb;
#pragma omp simd
          for (int d = 0; d < HS; ++d) orow[d] *= inv_sum[r];
          if (out.bf16) {
            BFloat16* stored = out.b16() + o_off + size_t(i0 + r) * C;
            for (int d = 0; d < HS; ++d) stored[d] = to_bf16(orow[d]);
          }
        }
      }
    }
  }
}

void CpuBackend::attention_backward(TensorOut dqkv,    // (B, T, 3C) =
                                    TensorIn dout,     // (B, T, C)
                                    TensorIn qkv,      // (B, T, 3C)
                                    TensorIn out,      // (B, T, C)
                                    const float* lse,  // (B, NH, T)
                                    int B, int T, int C, int NH, const AttentionLayer& layer) {
  check_attention_storage(qkv, out, C, NH, "attention_backward");
  check_attention_grad_storage(dqkv, dout, qkv, "attention_backward");
  check_attention_layer(layer, C, NH, "attention_backward");
  const int HS = C / NH, C3 = 3 * C, BQ = query_block(layer, T);
  const float scale = 1.0f / std::sqrt(float(HS));
  const bool bf16 = attention_in_bf16(matmul_precision_, HS);
  const RopeCache* rc = rope_for(layer, HS, T);
  const RopeRows rope = rc ? RopeRows{rc->cos.data(), rc->sin.data()} : RopeRows{};
  const bool copy_q = bf16 || rope.cos;
  // Every (b, h) pair writes only its own columns of dqkv, so pairs run on different threads without races, and
  // within a pair the query blocks run in order: the sums are deterministic.
#pragma omp parallel if (size_t(B) * T * T * C >= cpu::kMinParallelWork)
  {
    // Per thread: P and dS for one query block, the head's K and V, its dK and dV accumulated over all blocks, the
    // query block's prepared q (where copied) and rounded dout (bf16), and the block's dQ before it is rotated back
    // or rounded into a bf16-stored dqkv.
    const size_t score_size = size_t(BQ) * pad_lanes(T), head_size = size_t(T) * HS;
    std::unique_ptr<float[]> scratch(new float[2 * score_size + 4 * head_size + 3 * size_t(BQ) * HS]);
    float* P = scratch.get();     // (rows, keys) probabilities, row stride ld
    float* dS = P + score_size;   // (rows, keys) dP, then dS in place
    float* kc = dS + score_size;  // (T, HS) each
    float* vc = kc + head_size;
    float* dkc = vc + head_size;
    float* dvc = dkc + head_size;
    float* qr = dvc + head_size;  // (BQ, HS) each
    float* dor = qr + size_t(BQ) * HS;
    float* dqb = dor + size_t(BQ) * HS;
    std::vector<float> orow(size_t(HS), 0.0f);  // in bf16, one row of O for D, rounded
#pragma omp for schedule(static)
    for (int bh = 0; bh < B * NH; ++bh) {
      const int b = bh / NH, h = bh % NH;
      const size_t qkv_off = size_t(b) * T * C3 + size_t(h) * HS, out_off = size_t(b) * T * C + size_t(h) * HS;
      gather_head(kc, qkv.at(qkv_off + C), T, HS, C3);  // k and v (T, HS), row stride 3C, after q
      prepare_rows(kc, T, HS, 0, rope, bf16);
      gather_head(vc, qkv.at(qkv_off + 2 * C), T, HS, C3);
      prepare_rows(vc, T, HS, 0, RopeRows{}, bf16);
      std::memset(dkc, 0, 2 * head_size * sizeof(float));
      // dQ goes straight into an fp32 dqkv (T, HS), row stride 3C, unless it is rotated back or rounded first
      float* dq = dqkv.bf16 ? nullptr : dqkv.f32() + qkv_off;
      const float* row_lse = lse + size_t(bh) * T;
      for (int i0 = 0; i0 < T; i0 += BQ) {
        const int rows = std::min(BQ, T - i0), keys = i0 + rows, klo = block_first_key(layer, i0, bf16);
        const int n = keys - klo, ld = pad_lanes(n);
        const TensorIn dOs = dout.at(out_off + size_t(i0) * C);  // the block's dout rows, as stored
        const TensorIn q = qkv.at(qkv_off + size_t(i0) * C3);
        if (copy_q) gather_head(qr, q, rows, HS, C3), prepare_rows(qr, rows, HS, i0, rope, bf16);
        const float* qb = copy_q ? qr : q.f32();
        const int ldq = copy_q ? HS : C3;
        const float* dOb = bf16 ? dor : dOs.f32();
        int ldo = C;
        if (bf16) gather_head(dor, dOs, rows, HS, C), round_rows(dor, rows, HS, HS), ldo = HS;
        const float* kb = kc + size_t(klo) * HS;
        const float* vb = vc + size_t(klo) * HS;
        gemm(false, true, rows, n, HS, scale, qb, ldq, kb, HS, 0.0f, P, ld);   // scaled scores
        gemm(false, true, rows, n, HS, 1.0f, dOb, ldo, vb, HS, 0.0f, dS, ld);  // dP = dO V^T
        for (int r = 0; r < rows; ++r) {
          const int i = i0 + r, a = layer.first_key(i) - klo, e = i + 1 - klo;
          // D from dout as stored (an fp32 one unrounded, a bf16 one widened: dor's row) and O, in bf16 rounded to
          // bf16 (as stored there or not).
          const float* o = out.bf16 ? nullptr : out.f32() + out_off + size_t(i) * C;
          if (bf16) {
            for (int d = 0; d < HS; ++d)
              orow[d] = out.bf16 ? from_bf16(out.b16()[out_off + size_t(i) * C + d]) : round_to_bf16(o[d]);
            o = orow.data();
          }
          const float* dO_row = dout.bf16 ? dor + size_t(r) * HS : dout.f32() + out_off + size_t(i) * C;
          bias_row(P + size_t(r) * ld, a, e, layer.alibi_slope, i - klo);
          attention_dscores_row(P + size_t(r) * ld, dS + size_t(r) * ld, a, e, ld, row_lse[i], o, dO_row, HS);
        }
        if (bf16) round_rows(P, rows, n, ld), round_rows(dS, rows, n, ld);
        gemm(true, false, n, HS, rows, 1.0f, P, ld, dOb, ldo, 1.0f, dvc + size_t(klo) * HS, HS);  // dV += P^T dO
        // dQ = s dS K: into dqkv, or into dqb to be rotated back and/or rounded into dqkv
        const bool direct = dq && !rope.cos;
        gemm(false, false, rows, HS, n, scale, dS, ld, kb, HS, 0.0f, direct ? dq + size_t(i0) * C3 : dqb,
             direct ? C3 : HS);
        if (!direct) {
          rotate_rows_back(dqb, rows, HS, HS, i0, rope);
          if (dq)
            for (int r = 0; r < rows; ++r)
              std::memcpy(dq + size_t(i0 + r) * C3, dqb + size_t(r) * HS, sizeof(float) * HS);
          else
            store_rows(dqkv.b16() + qkv_off + size_t(i0) * C3, C3, dqb, HS, rows, HS);
        }
        gemm(true, false, n, HS, rows, scale, dS, ld, qb, ldq, 1.0f, dkc + size_t(klo) * HS, HS);  // dK += s dS^T Q
      }
      rotate_rows_back(dkc, T, HS, HS, 0, rope);
      if (dq) {
        float* dk = dq + C;
        float* dv = dq + 2 * C;
        for (int t = 0; t < T; ++t) {
#pragma omp simd
          for (int d = 0; d < HS; ++d) {
            dk[size_t(t) * C3 + d] = dkc[size_t(t) * HS + d];
            dv[size_t(t) * C3 + d] = dvc[size_t(t) * HS + d];
          }
        }
      } else {
        store_rows(dqkv.b16() + qkv_off + C, C3, dkc, HS, T, HS);
        store_rows(dqkv.b16() + qkv_off + 2 * C, C3, dvc, HS, T, HS);
      }
    }
  }
}

}  // namespace ember
