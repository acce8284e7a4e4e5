// The tensor-core attention kernels (device code only), included by cuda_attention_tc.cu, which launches them, and by
// tests/kernel_model/test_attention_tc_model.cpp, which runs them on the CPU against a software model of the warp
// (threads, barriers, shuffles and mma.sync) to check their indexing where no GPU is present. The includer provides
// kWarpSize, kFullMask and warp_sum (cuda_common.cuh), and min for ints. Everything here has internal linkage, so the
// two never meet at link time.
//
// Causal attention on the tensor cores, used with matmul precision bf16 (sm_80 and newer, head sizes 16, 32 and
// 64). The same flash scheme as the fp32 kernels in cuda_attention.cu (online softmax, lse saved, P rebuilt in
// backward, a dQ pass and a dK/dV pass so every output element has one owner and no atomics), but every product is
// an mma.sync m16n8k16 with bf16 inputs and fp32 accumulation: q, k, v and dout are rounded to bf16 as they are
// staged in shared memory, P and dS as they are fed to the second product of each pair. Softmax statistics, the
// output rescaling and D = dO . O stay fp32 (O in D rounded to bf16, so that it may be stored so). qkv and the output
// are stored alike (StoreT), in fp32 or bf16.
//
// Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16"; g = lane / 4, t = lane % 4):
//   A (16 x 16, row-major): a[0] = (g, 2t..2t+1), a[1] = (g+8, 2t..), a[2] = (g, 2t+8..), a[3] = (g+8, 2t+8..)
//   B (16 x 8):             b[0] = (k 2t..2t+1, n g), b[1] = (k 2t+8..2t+9, n g)
//   C (16 x 8, fp32):       c[0], c[1] = (g, 2t), (g, 2t+1); c[2], c[3] = (g+8, 2t), (g+8, 2t+1)
// Each 32-bit register holds two bf16, the lower index in the low half. Two adjacent C tiles of a 16 x 16 block of
// scores are exactly the A fragment of that block, so P and dS go from one product to the next in registers.
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace ember::cuda::tc {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kWarps = 8;           // per block of the backward passes, whose registers allow no more
constexpr int kRows = 16 * kWarps;  // query rows (dQ) or key rows (dK/dV) per block: 16 per warp
constexpr int kForwardWarps = 16;   // per block of the forward pass (128 registers a thread at most: its usage)
constexpr int kForwardRows = 16 * kForwardWarps;  // query rows per forward block
constexpr int kTile = 64;            // keys (forward, dQ) or queries (dK/dV) per shared tile. The block rows are a
                                     // multiple, so a block's diagonal spans whole tiles. Each tile is read once per
                                     // block: the more rows a block has, the less often K and V (or Q and dO) are read.
constexpr int kSkew = 8;             // bf16 of padding per shared row: a row of 64 + 8 is 36 words, 4 mod 32, so the
                                     // 8 rows x 4 words a fragment load touches hit 32 different banks
constexpr int kLdT = kTile + kSkew;  // row length of tiles stored transposed (head dim major)
static_assert(kRows % kTile == 0 && kForwardRows % kTile == 0 && kTile % 16 == 0, "blocks and tiles share boundaries");
constexpr int kBlocksPerTile = kTile / 16;  // the 16-column blocks of a tile

__device__ inline uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // lo in the low half
  uint32_t u;
  memcpy(&u, &v, sizeof(u));
  return u;
}
__device__ inline uint32_t ld32(const bf16* p) {  // two adjacent bf16, the first at an even index
  uint32_t u;
  memcpy(&u, p, sizeof(u));
  return u;
}

// d += a b for one 16 x 8 x 16 step (EMBER_TC_EMULATION: the test's software model of the instruction).
__device__ inline void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(EMBER_TC_EMULATION)
  emulated_mma_bf16(d, a, b0, b1);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  __trap();  // the launchers never choose these kernels below sm_80
#endif
}

// The A fragment of rows r0.. and columns c0.. of a row-major tile with rows of LD elements.
template <int LD>
__device__ inline void load_a(uint32_t (&a)[4], const bf16* tile, int r0, int c0, int lane) {
  const bf16* p = tile + (r0 + lane / 4) * LD + c0 + 2 * (lane % 4);
  a[0] = ld32(p);
  a[1] = ld32(p + 8 * LD);
  a[2] = ld32(p + 8);
  a[3] = ld32(p + 8 * LD + 8);
}
// The A fragments of the warp's 16 rows r0.. across all KC 16-column blocks of a row-major tile.
template <int LD, int KC>
__device__ inline void load_a_rows(uint32_t (&a)[KC][4], const bf16* tile, int r0, int lane) {
#pragma unroll
  for (int kc = 0; kc < KC; ++kc) load_a<LD>(a[kc], tile, r0, kc * 16, lane);
}
// The B fragment of k0.. and n0.. of a matrix B stored n-major: B[k][n] at tile[n * LD + k].
template <int LD>
__device__ inline void load_b(uint32_t& b0, uint32_t& b1, const bf16* tile, int n0, int k0, int lane) {
  const bf16* p = tile + (n0 + lane / 4) * LD + k0 + 2 * (lane % 4);
  b0 = ld32(p);
  b1 = ld32(p + 8);
}
// The A fragment of the 16 x 16 block kc of a warp's (16, 8 n) accumulators: n-tiles 2 kc and 2 kc + 1, rounded.
template <int N>
__device__ inline void c_to_a(uint32_t (&a)[4], const float (&c)[N][4], int kc) {
  a[0] = pack_bf16(c[2 * kc][0], c[2 * kc][1]);
  a[1] = pack_bf16(c[2 * kc][2], c[2 * kc][3]);
  a[2] = pack_bf16(c[2 * kc + 1][0], c[2 * kc + 1][1]);
  a[3] = pack_bf16(c[2 * kc + 1][2], c[2 * kc + 1][3]);
}

// The warp's two products. acc (16 x 8 NT) += a (16 x 16 KC, fragments in registers) B, with B[k][n] = tile[n][k]
// (rows of LD elements): the scores q k^T and dO v^T, and their transposes. Only the 16-column blocks [c0, c1) of acc
// are formed (the others stay as they are): on the diagonal tile a warp's other columns are all masked.
template <int LD, int KC, int NT>
__device__ inline void mma_rows(float (&acc)[NT][4], const uint32_t (&a)[KC][4], const bf16* tile, int lane, int c0,
                                int c1) {
#pragma unroll
  for (int kc = 0; kc < KC; ++kc)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      if (nt < 2 * c0 || nt >= 2 * c1) continue;  // warp-uniform
      uint32_t b0, b1;
      load_b<LD>(b0, b1, tile, nt * 8, kc * 16, lane);
      mma_bf16(acc[nt], a[kc], b0, b1);
    }
}
// acc (16 x 8 DT) += round(c) (16 x 8 NT, accumulators rounded to bf16 A fragments) B, with B[k][n] = tile_t[n][k]
// (a tile stored transposed, rows of kLdT): P v, dS k, P^T dO and dS^T q. Only the 16-column blocks [c0, c1) of c
// take part: the others are all zero (masked), and leaving them out adds nothing but zeros.
template <int NT, int DT>
__device__ inline void mma_scores(float (&acc)[DT][4], const float (&c)[NT][4], const bf16* tile_t, int lane, int c0,
                                  int c1) {
#pragma unroll
  for (int kc = 0; kc < NT / 2; ++kc) {
    if (kc < c0 || kc >= c1) continue;  // warp-uniform
    uint32_t a[4];
    c_to_a(a, c, kc);
#pragma unroll
    for (int dt = 0; dt < DT; ++dt) {
      uint32_t b0, b1;
      load_b<kLdT>(b0, b1, tile_t, dt * 8, kc * 16, lane);
      mma_bf16(acc[dt], a, b0, b1);
    }
  }
}

// Stages rows row0.. (ROWS of them: a tile, or a block's rows) of one head's (T, HS) slice, rows `stride` elements
// apart (fp32 or bf16), as bf16: row-major into dst[r * (HS + kSkew) + d] and, where dst_t is given (tiles only),
// transposed into dst_t[d * kLdT + r]. Rows past T are zero, never garbage: a masked p = 0 times a NaN would still be
// NaN.
template <int HS, int ROWS, typename SrcT>
__device__ inline void stage(bf16* dst, bf16* dst_t, const SrcT* src, int row0, int T, size_t stride) {
  static_assert(ROWS == kTile || ROWS == kRows || ROWS == kForwardRows, "a tile or a block");
  for (int idx = threadIdx.x; idx < ROWS * HS; idx += blockDim.x) {
    const int r = idx / HS, d = idx % HS;  // consecutive threads read consecutive d of one row
    const bf16 x = row0 + r < T ? as_bf16(src[size_t(row0 + r) * stride + d]) : __float2bfloat16_rn(0.0f);
    if (dst) dst[r * (HS + kSkew) + d] = x;
    if (dst_t) dst_t[d * kLdT + r] = x;
  }
}

// The 16-column blocks of key tile j0 that warp w's query rows (i0 + 16 w .. + 15, in block i0) can see: the first
// ones, up to the warp's last row; all of them before the block's diagonal, none where the tile starts past the
// warp's rows. i0 and j0 are multiples of 16.
__host__ __device__ inline int visible_blocks(int i0, int j0, int warp) {
  const int n = (i0 - j0) / 16 + warp + 1;
  return n < 0 ? 0 : n > kBlocksPerTile ? kBlocksPerTile : n;
}
// The first 16-column block of query tile i0 that warp w's keys (j_first + 16 w .. + 15, in block j_first) are seen
// from: the warp's keys see the queries from its first key on. kBlocksPerTile where the tile ends before them.
__host__ __device__ inline int first_seen_block(int j_first, int i0, int warp) {
  const int c = (j_first - i0) / 16 + warp;
  return c < 0 ? 0 : c > kBlocksPerTile ? kBlocksPerTile : c;
}

// Forward: out = softmax(q k^T * scale + causal mask) v per (b, h), and lse = max + log(sum) of each row.
// A block of kForwardWarps warps takes kForwardRows query rows; warp w owns rows i0 + 16 w .. + 15 and keeps their
// q fragments and output accumulators in registers.
template <int HS, typename StoreT>
__global__ void __launch_bounds__(kForwardWarps* kWarpSize)
    attention_forward_tc_kernel(StoreT* out,        // (B, T, C)
                                float* lse,         // (B, NH, T)
                                const StoreT* qkv,  // (B, T, 3C)
                                int T, int C, int NH, float scale) {
  constexpr int LD = HS + kSkew, KC = HS / 16, DT = HS / 8, NT = kTile / 8;
  // The block's Q rows go into registers before the loop, whose K and V tiles then reuse their memory.
  constexpr int kBlockElems = kForwardRows * LD, kLoopElems = kTile * LD + HS * kLdT;
  __shared__ __align__(16) bf16 smem[kBlockElems > kLoopElems ? kBlockElems : kLoopElems];
  bf16 *const q_s = smem, *const k_s = smem, *const vt_s = smem + kTile * LD;
  const int C3 = 3 * C, bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int i0 = (gridDim.y - 1 - blockIdx.y) * kForwardRows;  // the longest rows (largest i) are scheduled first
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize, t = lane % 4;
  const int rows[2] = {i0 + warp * 16 + lane / 4, i0 + warp * 16 + lane / 4 + 8};  // this thread's query rows
  const StoreT* base = qkv + size_t(b) * T * C3 + size_t(h) * HS;  // row t: q at +t*3C, k at +C, v at +2C

  stage<HS, kForwardRows>(q_s, nullptr, base, i0, T, C3);
  __syncthreads();
  uint32_t qf[KC][4];
  load_a_rows<LD>(qf, q_s, warp * 16, lane);
  float o[DT][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  const int last_row = min(i0 + kForwardRows, T) - 1;
  for (int j0 = 0; j0 <= last_row; j0 += kTile) {
    __syncthreads();  // the previous tile (or, first, the Q rows) is no longer read
    stage<HS, kTile>(k_s, nullptr, base + C, j0, T, C3);
    stage<HS, kTile>(nullptr, vt_s, base + 2 * C, j0, T, C3);
    __syncthreads();
    const int c1 = visible_blocks(i0, j0, warp);
    if (c1 == 0) continue;  // warp-uniform: the tile starts past this warp's rows
    float s[NT][4] = {};
    mma_rows<LD>(s, qf, k_s, lane, 0, c1);  // S = Q K^T
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = j0 + nt * 8 + 2 * t + (e & 1), i = rows[e / 2];
        s[nt][e] = j <= i && j < T ? s[nt][e] * scale : -INFINITY;
        mx[e / 2] = fmaxf(mx[e / 2], s[nt][e]);
      }
    float shift[2], corr[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      // A row's four threads are lanes 4g..4g+3: two xor steps give each the row's maximum.
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(kFullMask, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(kFullMask, mx[r], 2));
      // A row with nothing visible yet (only rows past T) keeps m = -inf; shifting by 0 keeps its p at 0, not NaN.
      shift[r] = mx[r] == -INFINITY ? 0.0f : mx[r];
      corr[r] = expf(m[r] - shift[r]);  // 0 on a row's first visible tile
      m[r] = mx[r];
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[nt][e] = expf(s[nt][e] - shift[e / 2]);
        sum[e / 2] += s[nt][e];
      }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      sum[r] += __shfl_xor_sync(kFullMask, sum[r], 1);
      sum[r] += __shfl_xor_sync(kFullMask, sum[r], 2);
      l[r] = l[r] * corr[r] + sum[r];
    }
#pragma unroll
    for (int dt = 0; dt < DT; ++dt) {
      o[dt][0] *= corr[0], o[dt][1] *= corr[0];
      o[dt][2] *= corr[1], o[dt][3] *= corr[1];
    }
    mma_scores(o, s, vt_s, lane, 0, c1);  // O += P V
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int i = rows[r];
    if (i >= T) continue;
    const float inv_l = 1.0f / l[r];
    StoreT* orow = out + (size_t(b) * T + i) * C + size_t(h) * HS;
#pragma unroll
    for (int dt = 0; dt < DT; ++dt) {
      store(&orow[dt * 8 + 2 * t], o[dt][2 * r] * inv_l);
      store(&orow[dt * 8 + 2 * t + 1], o[dt][2 * r + 1] * inv_l);
    }
    if (t == 0) lse[size_t(bh) * T + i] = m[r] + logf(l[r]);
  }
}

// Backward, pass 1 (per query row i): D_i = dO_i . O_i in fp32 with O rounded to bf16 (saved to delta for pass 2),
// and dQ_i = scale * sum_j dS_ij K_j with P_ij = e^(s_ij - lse_i), dP_ij = dO_i . V_j, dS_ij = P_ij (dP_ij - D_i).
template <int HS, typename StoreT, typename GradT, typename DoutT>
__global__ void __launch_bounds__(kWarps* kWarpSize)
    attention_backward_dq_tc_kernel(GradT* dqkv,        // (B, T, 3C) =, q columns only
                                    float* delta,       // (B, NH, T) out: D
                                    const DoutT* dout,  // (B, T, C), fp32 or bf16
                                    const StoreT* qkv,  // (B, T, 3C)
                                    const StoreT* out,  // (B, T, C)
                                    const float* lse,   // (B, NH, T)
                                    int T, int C, int NH, float scale) {
  constexpr int LD = HS + kSkew, KC = HS / 16, DT = HS / 8, NT = kTile / 8;
  // The block's Q and dO rows go into registers before the loop, whose K and V tiles then reuse their memory (both
  // at once would pass the 48 KB of static shared memory at HS = 64).
  constexpr int kBlockElems = 2 * kRows * LD, kLoopElems = 2 * kTile * LD + HS * kLdT;
  __shared__ __align__(16) bf16 smem[kBlockElems > kLoopElems ? kBlockElems : kLoopElems];
  bf16 *const q_s = smem, *const do_s = smem + kRows * LD;
  bf16 *const k_s = smem, *const v_s = smem + kTile * LD, *const kt_s = smem + 2 * kTile * LD;
  __shared__ float lse_s[kRows], d_s[kRows];
  const int C3 = 3 * C, bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int i0 = (gridDim.y - 1 - blockIdx.y) * kRows;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize, t = lane % 4;
  const int rows[2] = {i0 + warp * 16 + lane / 4, i0 + warp * 16 + lane / 4 + 8};
  const StoreT* base = qkv + size_t(b) * T * C3 + size_t(h) * HS;
  const size_t o_base = size_t(b) * T * C + size_t(h) * HS;  // row t of this head in out/dout: + t*C

  stage<HS, kRows>(q_s, nullptr, base, i0, T, C3);
  stage<HS, kRows>(do_s, nullptr, dout + o_base, i0, T, C);
  for (int r = warp * 16; r < warp * 16 + 16; ++r) {  // each warp its own 16 rows, in fp32 from global memory
    const int i = i0 + r;
    float part = 0.0f;
    if (i < T)
      for (int d = lane; d < HS; d += kWarpSize)
        part += load(&dout[o_base + size_t(i) * C + d]) * bf16_value(out[o_base + size_t(i) * C + d]);
    const float D = warp_sum(part);
    if (lane == 0) {
      d_s[r] = D;
      lse_s[r] = i < T ? lse[size_t(bh) * T + i] : 0.0f;
      if (i < T) delta[size_t(bh) * T + i] = D;
    }
  }
  __syncthreads();
  uint32_t qf[KC][4], dof[KC][4];
  load_a_rows<LD>(qf, q_s, warp * 16, lane);
  load_a_rows<LD>(dof, do_s, warp * 16, lane);
  const float row_lse[2] = {lse_s[warp * 16 + lane / 4], lse_s[warp * 16 + lane / 4 + 8]};
  const float row_D[2] = {d_s[warp * 16 + lane / 4], d_s[warp * 16 + lane / 4 + 8]};
  float dq[DT][4] = {};

  const int last_row = min(i0 + kRows, T) - 1;
  for (int j0 = 0; j0 <= last_row; j0 += kTile) {
    __syncthreads();  // the previous tile (or, first, the Q and dO rows) is no longer read
    stage<HS, kTile>(k_s, kt_s, base + C, j0, T, C3);
    stage<HS, kTile>(v_s, nullptr, base + 2 * C, j0, T, C3);
    __syncthreads();
    const int c1 = visible_blocks(i0, j0, warp);
    if (c1 == 0) continue;  // warp-uniform: the tile starts past this warp's rows
    float s[NT][4] = {}, dp[NT][4] = {};
    mma_rows<LD>(s, qf, k_s, lane, 0, c1);    // S = Q K^T
    mma_rows<LD>(dp, dof, v_s, lane, 0, c1);  // dP = dO V^T
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = j0 + nt * 8 + 2 * t + (e & 1), i = rows[e / 2];
        const float p = j <= i && i < T ? expf(s[nt][e] * scale - row_lse[e / 2]) : 0.0f;
        s[nt][e] = p * (dp[nt][e] - row_D[e / 2]);  // dS
      }
    mma_scores(dq, s, kt_s, lane, 0, c1);  // dQ += dS K
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int i = rows[r];
    if (i >= T) continue;
    GradT* g = dqkv + (size_t(b) * T + i) * C3 + size_t(h) * HS;
#pragma unroll
    for (int dt = 0; dt < DT; ++dt) {
      store(&g[dt * 8 + 2 * t], scale * dq[dt][2 * r]);
      store(&g[dt * 8 + 2 * t + 1], scale * dq[dt][2 * r + 1]);
    }
  }
}

// Backward, pass 2 (per key row j): dV_j = sum_{i >= j} P_ij dO_i and dK_j = scale * sum_{i >= j} dS_ij Q_i.
// Warp w owns key rows j_first + 16 w .. + 15 and computes the transposed scores S^T = K Q^T and dP^T = V dO^T
// against each query tile, so P^T and dS^T come out as the A fragments of dV and dK directly.
template <int HS, typename StoreT, typename GradT, typename DoutT>
__global__ void __launch_bounds__(kWarps* kWarpSize)
    attention_backward_dkv_tc_kernel(GradT* dqkv,         // (B, T, 3C) =, k and v columns only
                                     const float* delta,  // (B, NH, T) D from pass 1
                                     const DoutT* dout,   // (B, T, C), fp32 or bf16
                                     const StoreT* qkv,   // (B, T, 3C)
                                     const float* lse,    // (B, NH, T)
                                     int T, int C, int NH, float scale) {
  constexpr int LD = HS + kSkew, KC = HS / 16, DT = HS / 8, NT = kTile / 8;
  // The block's K and V rows go into registers before the loop, whose Q and dO tiles then reuse their memory.
  constexpr int kBlockElems = 2 * kRows * LD, kLoopElems = 2 * (kTile * LD + HS * kLdT);
  __shared__ __align__(16) bf16 smem[kBlockElems > kLoopElems ? kBlockElems : kLoopElems];
  bf16 *const k_rows = smem, *const v_rows = smem + kRows * LD;
  bf16 *const q_s = smem, *const qt_s = q_s + kTile * LD, *const do_s = qt_s + HS * kLdT,
              *const dot_s = do_s + kTile * LD;
  __shared__ float lse_s[kTile], d_s[kTile];
  const int C3 = 3 * C, bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int j_first = blockIdx.y * kRows;  // low j has the most queries, and low blockIdx.y starts first
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize, t = lane % 4;
  const int keys[2] = {j_first + warp * 16 + lane / 4, j_first + warp * 16 + lane / 4 + 8};
  const StoreT* base = qkv + size_t(b) * T * C3 + size_t(h) * HS;
  const size_t o_base = size_t(b) * T * C + size_t(h) * HS;

  stage<HS, kRows>(k_rows, nullptr, base + C, j_first, T, C3);
  stage<HS, kRows>(v_rows, nullptr, base + 2 * C, j_first, T, C3);
  __syncthreads();
  uint32_t kf[KC][4], vf[KC][4];
  load_a_rows<LD>(kf, k_rows, warp * 16, lane);
  load_a_rows<LD>(vf, v_rows, warp * 16, lane);
  float dk[DT][4] = {}, dv[DT][4] = {};

  for (int i0 = j_first; i0 < T; i0 += kTile) {
    __syncthreads();  // the previous tile (or the K and V staging) is no longer read
    stage<HS, kTile>(q_s, qt_s, base, i0, T, C3);
    stage<HS, kTile>(do_s, dot_s, dout + o_base, i0, T, C);
    if (threadIdx.x < kTile) {
      const int i = i0 + threadIdx.x;
      lse_s[threadIdx.x] = i < T ? lse[size_t(bh) * T + i] : 0.0f;
      d_s[threadIdx.x] = i < T ? delta[size_t(bh) * T + i] : 0.0f;
    }
    __syncthreads();
    // On the block's diagonal warp w's keys see only the queries from its own first key on.
    const int c0 = first_seen_block(j_first, i0, warp);
    if (c0 == kBlocksPerTile) continue;  // warp-uniform: the tile ends before this warp's keys
    float st[NT][4] = {}, dpt[NT][4] = {};
    mma_rows<LD>(st, kf, q_s, lane, c0, NT / 2);    // S^T = K Q^T
    mma_rows<LD>(dpt, vf, do_s, lane, c0, NT / 2);  // dP^T = V dO^T
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = nt * 8 + 2 * t + (e & 1), i = i0 + c, j = keys[e / 2];
        const float p = i >= j && i < T && j < T ? expf(st[nt][e] * scale - lse_s[c]) : 0.0f;
        st[nt][e] = p;
        dpt[nt][e] = p * (dpt[nt][e] - d_s[c]);  // dS^T
      }
    mma_scores(dv, st, dot_s, lane, c0, NT / 2);  // dV += P^T dO
    mma_scores(dk, dpt, qt_s, lane, c0, NT / 2);  // dK += dS^T Q
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int j = keys[r];
    if (j >= T) continue;
    GradT* g = dqkv + (size_t(b) * T + j) * C3 + size_t(h) * HS;
#pragma unroll
    for (int dt = 0; dt < DT; ++dt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int d = dt * 8 + 2 * t + e;
        store(&g[C + d], scale * dk[dt][2 * r + e]);
        store(&g[2 * C + d], dv[dt][2 * r + e]);
      }
  }
}

}  // namespace
}  // namespace ember::cuda::tc
