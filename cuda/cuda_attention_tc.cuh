// The tensor-core attention kernels (device code only), included by cuda_attention_tc.cu, which launches them, and by
// tests/kernel_model/test_attention_tc_model.cpp, which runs them on the CPU against a software model of the warp
// (threads, barriers, shuffles, mma.sync, ldmatrix and cp.async) to check their indexing and synchronisation where no
// GPU is present. The includer provides kWarpSize, kFullMask and warp_sum (cuda_common.cuh), and min for ints.
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
#pragma once

#include "cuda_attention_tc_tiles.cuh"

namespace ember::cuda::tc {
namespace {

// Forward: out = softmax(q k^T * scale + causal mask) v per (b, h), and lse = max + log(sum) of each row.
// A block of kForwardWarps warps takes kForwardRows query rows; warp w owns rows i0 + 16 w .. + 15 and keeps their
// q fragments and output accumulators in registers.
template <int HS, typename StoreT>
__global__ void __launch_bounds__(kForwardWarps* kWarpSize)
    attention_forward_tc_kernel(StoreT* out,        // (B, T, C)
                                float* lse,         // (B, NH, T)
                                const StoreT* qkv,  // (B, T, 3C)
                                int T, int C, int NH, float scale) {
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

  stage<HS, kForwardRows>(q_s, base, i0, T, C3);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  uint32_t qf[KC][4];
  load_a_rows<LD, KC>(qf, q_s, warp * 16, lane);
  float o[DT][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  __syncthreads();  // the Q rows are no longer read

  const int last_row = min(i0 + kForwardRows, T) - 1;
  stage_kv<HS>(k_s(0), v_s(0), base, 0, T, C);
  for (int j0 = 0, buf = 0; j0 <= last_row; j0 += kTile, buf ^= 1) {
    next_tile_ready(j0 + kTile <= last_row, [&] { stage_kv<HS>(k_s(buf ^ 1), v_s(buf ^ 1), base, j0 + kTile, T, C); });
    const int c1 = visible_blocks(i0, j0, warp);
    if (c1 > 0) {  // warp-uniform: otherwise the tile starts past this warp's rows
      float s[NT][4] = {};
      mma_rows<LD, KC, NT>(s, qf, k_s(buf), lane, 0, c1);  // S = Q K^T
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
      mma_scores<LD, NT, DT>(o, s, v_s(buf), lane, 0, c1);  // O += P V
    }
    __syncthreads();  // buffer buf is no longer read
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

  stage<HS, kRows>(q_s, base, i0, T, C3);
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

  const int last_row = min(i0 + kRows, T) - 1;
  stage_kv<HS>(k_s(0), v_s(0), base, 0, T, C);
  for (int j0 = 0, buf = 0; j0 <= last_row; j0 += kTile, buf ^= 1) {
    next_tile_ready(j0 + kTile <= last_row, [&] { stage_kv<HS>(k_s(buf ^ 1), v_s(buf ^ 1), base, j0 + kTile, T, C); });
    const int c1 = visible_blocks(i0, j0, warp);
    if (c1 > 0) {  // warp-uniform: otherwise the tile starts past this warp's rows
      float s[NT][4] = {}, dp[NT][4] = {};
      mma_rows<LD, KC, NT>(s, qf, k_s(buf), lane, 0, c1);    // S = Q K^T
      mma_rows<LD, KC, NT>(dp, dof, v_s(buf), lane, 0, c1);  // dP = dO V^T
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int j = j0 + nt * 8 + 2 * t + (e & 1), i = rows[e / 2];
          const float p = j <= i && i < T ? expf(s[nt][e] * scale - row_lse[e / 2]) : 0.0f;
          s[nt][e] = p * (dp[nt][e] - row_D[e / 2]);  // dS
        }
      mma_scores<LD, NT, DT>(dq, s, k_s(buf), lane, 0, c1);  // dQ += dS K
    }
    __syncthreads();  // buffer buf is no longer read
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

  stage<HS, kRows>(k_rows, base + C, j_first, T, C3);
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
    stage<HS, kTile>(q_s(buf), base, i0, T, C3);
    stage<HS, kTile>(do_s(buf), dout + o_base, i0, T, C);
    if (threadIdx.x < kTile) {
      const int i = i0 + threadIdx.x;
      lse_s[buf][threadIdx.x] = i < T ? lse[size_t(bh) * T + i] : 0.0f;
      d_s[buf][threadIdx.x] = i < T ? delta[size_t(bh) * T + i] : 0.0f;
    }
    cp_async_commit();
  };
  stage_tile(j_first, 0);
  for (int i0 = j_first, buf = 0; i0 < T; i0 += kTile, buf ^= 1) {
    next_tile_ready(i0 + kTile < T, [&] { stage_tile(i0 + kTile, buf ^ 1); });
    // On the block's diagonal warp w's keys see only the queries from its own first key on.
    const int c0 = first_seen_block(j_first, i0, warp);
    if (c0 < kBlocksPerTile) {  // warp-uniform: otherwise the tile ends before this warp's keys
      float st[NT][4] = {}, dpt[NT][4] = {};
      mma_rows<LD, KC, NT>(st, kf, q_s(buf), lane, c0, NT / 2);    // S^T = K Q^T
      mma_rows<LD, KC, NT>(dpt, vf, do_s(buf), lane, c0, NT / 2);  // dP^T = V dO^T
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int c = nt * 8 + 2 * t + (e & 1), i = i0 + c, j = keys[e / 2];
          const float p = i >= j && i < T && j < T ? expf(st[nt][e] * scale - lse_s[buf][c]) : 0.0f;
          st[nt][e] = p;
          dpt[nt][e] = p * (dpt[nt][e] - d_s[buf][c]);  // dS^T
        }
      mma_scores<LD, NT, DT>(dv, st, do_s(buf), lane, c0, NT / 2);  // dV += P^T dO
      mma_scores<LD, NT, DT>(dk, dpt, q_s(buf), lane, c0, NT / 2);  // dK += dS^T Q
    }
    __syncthreads();  // buffer buf is no longer read
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
