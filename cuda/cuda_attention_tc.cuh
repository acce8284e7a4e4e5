// The tensor-core attention kernels (device code only), included by cuda_attention_tc.cu, which launches them, and by
// tests/kernel_model/test_attention_tc_model.cpp, which runs them on the CPU against a software model of the warp
// (threads, barriers, shuffles, mma.sync, ldmatrix and cp.async) to check their indexing and synchronisation where no
// GPU is present. The includer provides what cuda_attention_tc_tiles.cuh names (cuda_common.cuh), and min for ints.
// Everything here has internal linkage, so the two never meet at link time.
//
// Causal attention on the tensor cores, used with matmul precision bf16 (sm_80 and newer, head sizes 16, 32 and
// 64). The same flash scheme as the fp32 kernels in cuda_attention.cu (online softmax, lse saved, P rebuilt in
// backward, a dQ pass and a dK/dV pass so every output element has one owner and no atomics), but every product is
// an mma.sync m16n8k16 with bf16 inputs and fp32 accumulation: q, k, v and dout are rounded to bf16 as they are
// staged in shared memory, P and dS as they are fed to the second product of each pair. Softmax statistics, the
// output rescaling and D = dO . O stay fp32 (O in D rounded to bf16, so that it may be stored so). qkv and the output
// are stored alike (StoreT), in fp32 or bf16. Tiles sit in shared memory row-major only: ldmatrix loads every
// fragment, .trans where a product needs the tile transposed; bf16 sources are staged by cp.async, a tile ahead of
// the one being computed on. The block and tile sizes and the warp-level building blocks (fragments, ldmatrix,
// cp.async, mma.sync, staging) are in cuda_attention_tc_tiles.cuh.
//
// A layer's schedule (AttentionSchedule): a window starts each block's walk at the tile holding its first row's first
// key (dK/dV: ends it at the tile holding its last key's last query), a warp forms only the 16 x 16 blocks of scores
// between its rows' first visible and last visible column, and the mask keeps the window's edge exact within them; the
// ALiBi bias is added to the scaled scores before the softmax; rope rotates q and k as they are staged (stage_qk), and
// dQ and dK are carried back through the rotation in the registers that hold them (a thread's accumulators hold both
// columns d and d + HS/2 of its rows).
#pragma once

#include "cuda_attention_tc_tiles.cuh"

namespace ember::cuda::tc {
namespace {

// Stores row r (0: the thread's row lane / 4 of the warp's 16, 1: that row + 8) of a warp's gradient accumulators
// acc (16 x 8 DT, the C fragment layout) times `scale` into g (the row's HS = 8 DT columns). Where rope rotated that
// row (q or k, position pos), the gradient is carried back through the rotation: the thread holds columns
// d = 8 dt + 2 t + e of its rows and with each its partner d + HS/2 (n-tile dt + DT/2).
template <int DT, typename GradT>
__device__ inline void store_row_grad(GradT* g, const float (&acc)[DT][4], int r, float scale, int pos,
                                      const AttentionSchedule& sch, int t) {
  if (!sch.rope_cos) {
#pragma unroll
    for (int dt = 0; dt < DT; ++dt)
#pragma unroll
      for (int e = 0; e < 2; ++e) store(&g[dt * 8 + 2 * t + e], scale * acc[dt][2 * r + e]);
    return;
  }
  constexpr int kHalf = 4 * DT;
  const float *cos = sch.rope_cos + size_t(pos) * kHalf, *sin = sch.rope_sin + size_t(pos) * kHalf;
#pragma unroll
  for (int dt = 0; dt < DT / 2; ++dt)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int d = dt * 8 + 2 * t + e;
      const float a = scale * acc[dt][2 * r + e], b = scale * acc[dt + DT / 2][2 * r + e];
      store(&g[d], rope_back_first(a, b, cos[d], sin[d]));
      store(&g[d + kHalf], rope_back_second(a, b, cos[d], sin[d]));
    }
}

// Forward: out = softmax(q k^T * scale + causal mask) v per (b, h), and lse = max + log(sum) of each row.
// A block of kForwardWarps warps takes kForwardRows query rows; warp w owns rows i0 + 16 w .. + 15 and keeps their
// q fragments and output accumulators in registers.
template <int HS, typename StoreT>
__global__ void __launch_bounds__(kForwardWarps* kWarpSize)
    attention_forward_tc_kernel(StoreT* out,        // (B, T, C)
                                float* lse,         // (B, NH, T)
                                const StoreT* qkv,  // (B, T, 3C)
                                int T, int C, int NH, float scale, AttentionSchedule sch) {
  constexpr int LD = HS + kSkew, KC = HS / 16, DT = HS / 8, NT = kTile / 8, kTileElems = kTile * LD;
  // The block's Q rows go into registers before the loop, whose K and V tiles (two of each) then reuse their memory.
  constexpr int kBlockElems = kForwardRows * LD, kLoopElems = 4 * kTileElems;
  __shared__ __align__(16) bf16 smem[kBlockElems > kLoopElems ? kBlockElems : kLoopElems];
  bf16* const q_s = smem;
  auto k_s = [&](int buf) { return smem + (2 * buf) * kTileElems; };
  auto v_s = [&](int buf) { return smem + (2 * buf + 1) * kTileElems; };
  const int C3 = 3 * C, bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int i0 = (gridDim.y - 1 - blockIdx.y) * kForwardRows;  // the longest rows (largest i) are scheduled first
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize, t = lane % 4;
  const int rows[2] = {i0 + warp * 16 + lane / 4, i0 + warp * 16 + lane / 4 + 8};  // this thread's query rows
  const StoreT* base = qkv + size_t(b) * T * C3 + size_t(h) * HS;  // row t: q at +t*3C, k at +C, v at +2C

  stage_qk<HS, kForwardRows>(q_s, base, i0, T, C3, sch);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  uint32_t qf[KC][4];
  load_a_rows<LD, KC>(qf, q_s, warp * 16, lane);
  float o[DT][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  __syncthreads();  // the Q rows are no longer read

  const int reach = window_reach(sch);
  // One key tile: the warp's visible 16-column blocks [c0, c1) of tile j0, in buffer buf.
  auto tile = [&](int j0, int buf, int c0, int c1) {
    float s[NT][4] = {};
    mma_rows<LD, KC, NT>(s, qf, k_s(buf), lane, c0, c1);  // S = Q K^T
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = j0 + nt * 8 + 2 * t + (e & 1), i = rows[e / 2];
        const bool visible = j <= i && j < T && i - j <= reach;
        s[nt][e] = visible ? biased_score(s[nt][e], scale, sch, i, j) : -INFINITY;
        mx[e / 2] = fmaxf(mx[e / 2], s[nt][e]);
      }
    float shift[2], corr[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      // A row's four threads are lanes 4g..4g+3: two xor steps give each the row's maximum.
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(kFullMask, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(kFullMask, mx[r], 2));
      // A row with nothing visible yet (past T, or its window starts later) keeps m = -inf; shifting
      // by 0 keeps its p at 0, not NaN.
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
    mma_scores<LD, NT, DT>(o, s, v_s(buf), lane, c0, c1);  // O += P V
  };
  walk_key_tiles<HS>(k_s, v_s, base, i0, min(i0 + kForwardRows, T) - 1, T, C, warp, sch, tile);
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
                                    int T, int C, int NH, float scale, AttentionSchedule sch) {
  constexpr int LD = HS + kSkew, KC = HS / 16, DT = HS / 8, NT = kTile / 8, kTileElems = kTile * LD;
  // The block's Q and dO rows go into registers before the loop, whose K and V tiles (two of each) then reuse their
  // memory (both at once would pass the 48 KB of static shared memory at HS = 64).
  constexpr int kBlockElems = 2 * kRows * LD, kLoopElems = 4 * kTileElems;
  __shared__ __align__(16) bf16 smem[kBlockElems > kLoopElems ? kBlockElems : kLoopElems];
  bf16 *const q_s = smem, *const do_s = smem + kRows * LD;
  auto k_s = [&](int buf) { return smem + (2 * buf) * kTileElems; };
  auto v_s = [&](int buf) { return smem + (2 * buf + 1) * kTileElems; };
  __shared__ float lse_s[kRows], d_s[kRows];
  const int C3 = 3 * C, bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int i0 = (gridDim.y - 1 - blockIdx.y) * kRows;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize, t = lane % 4;
  const int rows[2] = {i0 + warp * 16 + lane / 4, i0 + warp * 16 + lane / 4 + 8};
  const StoreT* base = qkv + size_t(b) * T * C3 + size_t(h) * HS;
  const size_t o_base = size_t(b) * T * C + size_t(h) * HS;  // row t of this head in out/dout: + t*C

  stage_qk<HS, kRows>(q_s, base, i0, T, C3, sch);
  stage<HS, kRows>(do_s, dout + o_base, i0, T, C);
  cp_async_commit();
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
  cp_async_wait<0>();
  __syncthreads();
  uint32_t qf[KC][4], dof[KC][4];
  load_a_rows<LD, KC>(qf, q_s, warp * 16, lane);
  load_a_rows<LD, KC>(dof, do_s, warp * 16, lane);
  const float row_lse[2] = {lse_s[warp * 16 + lane / 4], lse_s[warp * 16 + lane / 4 + 8]};
  const float row_D[2] = {d_s[warp * 16 + lane / 4], d_s[warp * 16 + lane / 4 + 8]};
  float dq[DT][4] = {};
  __syncthreads();  // the Q and dO rows are no longer read

  const int reach = window_reach(sch);
  // One key tile: the warp's visible 16-column blocks [c0, c1) of tile j0, in buffer buf.
  auto tile = [&](int j0, int buf, int c0, int c1) {
    float s[NT][4] = {}, dp[NT][4] = {};
    mma_rows<LD, KC, NT>(s, qf, k_s(buf), lane, c0, c1);    // S = Q K^T
    mma_rows<LD, KC, NT>(dp, dof, v_s(buf), lane, c0, c1);  // dP = dO V^T
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = j0 + nt * 8 + 2 * t + (e & 1), i = rows[e / 2];
        const bool visible = j <= i && i < T && i - j <= reach;
        const float p = visible ? expf(biased_score(s[nt][e], scale, sch, i, j) - row_lse[e / 2]) : 0.0f;
        s[nt][e] = p * (dp[nt][e] - row_D[e / 2]);  // dS
      }
    mma_scores<LD, NT, DT>(dq, s, k_s(buf), lane, c0, c1);  // dQ += dS K
  };
  walk_key_tiles<HS>(k_s, v_s, base, i0, min(i0 + kRows, T) - 1, T, C, warp, sch, tile);
#pragma unroll
  for (int r = 0; r < 2; ++r)
    if (rows[r] < T)
      store_row_grad<DT>(dqkv + (size_t(b) * T + rows[r]) * C3 + size_t(h) * HS, dq, r, scale, rows[r], sch, t);
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
                                     int T, int C, int NH, float scale, AttentionSchedule sch) {
  constexpr int LD = HS + kSkew, KC = HS / 16, DT = HS / 8, NT = kTile / 8, kTileElems = kTile * LD;
  // The block's K and V rows go into registers before the loop, whose Q and dO tiles (two of each) then reuse their
  // memory.
  constexpr int kBlockElems = 2 * kRows * LD, kLoopElems = 4 * kTileElems;
  __shared__ __align__(16) bf16 smem[kBlockElems > kLoopElems ? kBlockElems : kLoopElems];
  bf16 *const k_rows = smem, *const v_rows = smem + kRows * LD;
  auto q_s = [&](int buf) { return smem + (2 * buf) * kTileElems; };
  auto do_s = [&](int buf) { return smem + (2 * buf + 1) * kTileElems; };
  __shared__ float lse_s[2][kTile], d_s[2][kTile];
  const int C3 = 3 * C, bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int j_first = blockIdx.y * kRows;  // low j has the most queries, and low blockIdx.y starts first
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize, t = lane % 4;
  const int keys[2] = {j_first + warp * 16 + lane / 4, j_first + warp * 16 + lane / 4 + 8};
  const StoreT* base = qkv + size_t(b) * T * C3 + size_t(h) * HS;
  const size_t o_base = size_t(b) * T * C + size_t(h) * HS;

  stage_qk<HS, kRows>(k_rows, base + C, j_first, T, C3, sch);
  stage<HS, kRows>(v_rows, base + 2 * C, j_first, T, C3);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  uint32_t kf[KC][4], vf[KC][4];
  load_a_rows<LD, KC>(kf, k_rows, warp * 16, lane);
  load_a_rows<LD, KC>(vf, v_rows, warp * 16, lane);
  float dk[DT][4] = {}, dv[DT][4] = {};
  __syncthreads();  // the K and V rows are no longer read

  auto stage_tile = [&](int i0, int buf) {
    stage_qk<HS, kTile>(q_s(buf), base, i0, T, C3, sch);
    stage<HS, kTile>(do_s(buf), dout + o_base, i0, T, C);
    if (threadIdx.x < kTile) {
      const int i = i0 + threadIdx.x;
      lse_s[buf][threadIdx.x] = i < T ? lse[size_t(bh) * T + i] : 0.0f;
      d_s[buf][threadIdx.x] = i < T ? delta[size_t(bh) * T + i] : 0.0f;
    }
    cp_async_commit();
  };
  // Queries past the block's last key's window see none of its keys.
  const int reach = window_reach(sch);
  const int i_end = sch.window > 0 ? min(T, j_first + kRows + sch.window) : T;
  stage_tile(j_first, 0);
  for (int i0 = j_first, buf = 0; i0 < i_end; i0 += kTile, buf ^= 1) {
    next_tile_ready(i0 + kTile < i_end, [&] { stage_tile(i0 + kTile, buf ^ 1); });
    // On the block's diagonal warp w's keys see only the queries from its own first key on; with a window, only those
    // up to its last key's last query.
    const int c0 = seen_blocks_first(j_first, i0, warp), c1 = seen_blocks_end(j_first, i0, warp, sch.window);
    if (c0 < c1) {  // warp-uniform: otherwise no query of the tile sees this warp's keys
      float st[NT][4] = {}, dpt[NT][4] = {};
      mma_rows<LD, KC, NT>(st, kf, q_s(buf), lane, c0, c1);    // S^T = K Q^T
      mma_rows<LD, KC, NT>(dpt, vf, do_s(buf), lane, c0, c1);  // dP^T = V dO^T
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int c = nt * 8 + 2 * t + (e & 1), i = i0 + c, j = keys[e / 2];
          const bool seen = i >= j && i < T && j < T && i - j <= reach;
          const float p = seen ? expf(biased_score(st[nt][e], scale, sch, i, j) - lse_s[buf][c]) : 0.0f;
          st[nt][e] = p;
          dpt[nt][e] = p * (dpt[nt][e] - d_s[buf][c]);  // dS^T
        }
      mma_scores<LD, NT, DT>(dv, st, do_s(buf), lane, c0, c1);  // dV += P^T dO
      mma_scores<LD, NT, DT>(dk, dpt, q_s(buf), lane, c0, c1);  // dK += dS^T Q
    }
    __syncthreads();  // buffer buf is no longer read
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (keys[r] >= T) continue;
    GradT* g = dqkv + (size_t(b) * T + keys[r]) * C3 + size_t(h) * HS;
    store_row_grad<DT>(g + C, dk, r, scale, keys[r], sch, t);
    store_row_grad<DT>(g + 2 * C, dv, r, 1.0f, keys[r], AttentionSchedule{}, t);  // v is not rotated
  }
}

}  // namespace
}  // namespace ember::cuda::tc
