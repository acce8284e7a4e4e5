// CUDA backend: causal multi-head self-attention, flash style: the (T, T) score matrix is never stored. Forward
// tiles over keys with an online softmax and saves the log-sum-exp per row; backward recomputes P from q, k and lse.
// These are the fp32 kernels (CUDA cores); with matmul precision bf16 the backend methods below take the tensor-core
// kernels of cuda_attention_tc.cu where the device and head size allow.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "cuda_check.h"
#include "cuda_common.cuh"
#include "cuda_ops.h"

namespace ember {
namespace cuda {
namespace {

// Layout: one warp per query row (forward, dQ) or key row (dK/dV). Inside a warp, lane j scores key (query) j of a
// 32-row tile, and lane l owns the head dims d = l, l + 32, ... of the accumulated output row, so HS <= 128 needs 4
// registers per accumulator. Tiles are staged in static shared memory; rows read by lane index are padded to
// kMaxHS + 1 floats so that the 32 lanes hit 32 different banks.
constexpr int kMaxHS = 128;
constexpr int kTile = kWarpSize;                  // keys (forward, dQ) or queries (dK/dV) per shared tile
constexpr int kDimsPerLane = kMaxHS / kWarpSize;  // 4
constexpr int kPad = kMaxHS + 1;
// Forward: 16 query rows per block share each K/V tile; shared memory 8 KB (Q) + 16.1 KB (K) + 16 KB (V) = 40.1 KB.
constexpr int kForwardRows = 16;
// Backward: 8 rows per block, since two padded tiles plus two row sets are 8 KB + 32.3 KB = 40.3 KB (16 rows would
// pass the 48 KB static limit).
constexpr int kBackwardRows = 8;

// Element d of row t of q or k as the products read it (rotated by t under rope).
__device__ __forceinline__ float read_qk(const float* row, int d, int t, int HS, const AttentionSchedule& sch) {
  if (!sch.rope_cos) return row[d];
  const int half = HS / 2;
  return rope_value(row, d, half, sch.rope_cos + size_t(t) * half, sch.rope_sin + size_t(t) * half);
}
// Stores the gradient of a rotated q or k row, scale * acc (a warp's accumulators: lane l holds dims l, l + 32, ...),
// carried back through the rotation of position t: the warp writes it to `row` (its own shared row of HS values, no
// longer read) and each lane then reads the pairs it needs.
template <typename GradT>
__device__ void store_rotated_back(GradT* g, float* row, const float (&acc)[kDimsPerLane], float scale, int t, int HS,
                                   const AttentionSchedule& sch, int lane) {
  __syncwarp();
#pragma unroll
  for (int k = 0; k < kDimsPerLane; ++k) {
    const int d = lane + k * kWarpSize;
    if (d < HS) row[d] = scale * acc[k];
  }
  __syncwarp();
  const int half = HS / 2;
  for (int d = lane; d < HS; d += kWarpSize)
    store(&g[d], rope_back_value(row, d, half, sch.rope_cos + size_t(t) * half, sch.rope_sin + size_t(t) * half));
}

// Forward: out = softmax(q k^T * scale + causal mask) v per (b, h), and lse = max + log(sum) of each row.
__global__ void __launch_bounds__(kForwardRows* kWarpSize)
    attention_forward_kernel(float* out,        // (B, T, C)
                             float* lse,        // (B, NH, T)
                             const float* qkv,  // (B, T, 3C)
                             int T, int C, int NH, float scale, AttentionSchedule sch) {
  __shared__ float q_s[kForwardRows][kMaxHS];
  __shared__ float k_s[kTile][kPad];
  __shared__ float v_s[kTile][kMaxHS];
  const int HS = C / NH, C3 = 3 * C;
  const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int i0 = (gridDim.y - 1 - blockIdx.y) * kForwardRows;  // the longest rows (largest i) are scheduled first
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int i = i0 + warp;
  const float* base = qkv + size_t(b) * T * C3 + size_t(h) * HS;  // row t: q at +t*3C, k at +C, v at +2C

  for (int idx = threadIdx.x; idx < kForwardRows * HS; idx += blockDim.x) {
    const int r = idx / HS, d = idx % HS;
    q_s[r][d] = i0 + r < T ? read_qk(base + size_t(i0 + r) * C3, d, i0 + r, HS, sch) : 0.0f;
  }
  float m = -INFINITY, l = 0.0f, acc[kDimsPerLane];
#pragma unroll
  for (int k = 0; k < kDimsPerLane; ++k) acc[k] = 0.0f;

  const int last_row = min(i0 + kForwardRows, T) - 1, fk = attention_first_key(sch, i);
  // Tiles wholly before the block's first row's window take no work.
  for (int j0 = attention_first_key(sch, i0) / kTile * kTile; j0 <= last_row; j0 += kTile) {
    __syncthreads();  // the previous tile is no longer read (first pass: nothing to wait for)
    for (int idx = threadIdx.x; idx < kTile * HS; idx += blockDim.x) {
      const int r = idx / HS, d = idx % HS, j = j0 + r;
      // Rows past T are zero, never garbage: a masked p = 0 times a NaN would still be NaN.
      k_s[r][d] = j < T ? read_qk(base + size_t(j) * C3 + C, d, j, HS, sch) : 0.0f;
      v_s[r][d] = j < T ? base[size_t(j) * C3 + 2 * C + d] : 0.0f;
    }
    __syncthreads();
    if (i < T && j0 <= i && j0 + kTile > fk) {  // warp-uniform: the shuffles below see all 32 lanes
      const int j = j0 + lane;
      const bool visible = j <= i && j >= fk;
      float s = -INFINITY;
      if (visible) {
        float dot = 0.0f;
        for (int d = 0; d < HS; ++d) dot += q_s[warp][d] * k_s[lane][d];
        s = biased_score(dot, scale, sch, i, j);
      }
      // The tile holds a visible key (a row's first tile is the one holding its first key), so m_new is finite;
      // corr = e^(-inf) = 0 on the first tile.
      const float m_new = fmaxf(m, warp_max(s));
      const float p = visible ? expf(s - m_new) : 0.0f;
      const float corr = expf(m - m_new);
      l = l * corr + warp_sum(p);
#pragma unroll
      for (int k = 0; k < kDimsPerLane; ++k) acc[k] *= corr;
      const int n = min(kTile, i - j0 + 1);
      for (int jj = 0; jj < n; ++jj) {
        const float pj = __shfl_sync(kFullMask, p, jj);
#pragma unroll
        for (int k = 0; k < kDimsPerLane; ++k) {
          const int d = lane + k * kWarpSize;
          if (d < HS) acc[k] += pj * v_s[jj][d];
        }
      }
      m = m_new;
    }
  }
  if (i < T) {
    const float inv_l = 1.0f / l;
    float* o = out + (size_t(b) * T + i) * C + size_t(h) * HS;
#pragma unroll
    for (int k = 0; k < kDimsPerLane; ++k) {
      const int d = lane + k * kWarpSize;
      if (d < HS) o[d] = acc[k] * inv_l;
    }
    if (lane == 0) lse[size_t(bh) * T + i] = m + logf(l);
  }
}

// Backward, pass 1 (per query row i): D_i = dO_i . O_i (saved to delta for pass 2), and
// dQ_i = scale * sum_j dS_ij K_j with P_ij = e^(s_ij - lse_i), dP_ij = dO_i . V_j, dS_ij = P_ij (dP_ij - D_i).
template <typename GradT>
__global__ void __launch_bounds__(kBackwardRows* kWarpSize)
    attention_backward_dq_kernel(GradT* dqkv,        // (B, T, 3C) =, q columns only
                                 float* delta,       // (B, NH, T) out: D
                                 const float* dout,  // (B, T, C)
                                 const float* qkv,   // (B, T, 3C)
                                 const float* out,   // (B, T, C)
                                 const float* lse,   // (B, NH, T)
                                 int T, int C, int NH, float scale, AttentionSchedule sch) {
  __shared__ float q_s[kBackwardRows][kMaxHS];
  __shared__ float do_s[kBackwardRows][kMaxHS];
  __shared__ float k_s[kTile][kPad];
  __shared__ float v_s[kTile][kPad];
  const int HS = C / NH, C3 = 3 * C;
  const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int i0 = (gridDim.y - 1 - blockIdx.y) * kBackwardRows;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int i = i0 + warp;
  const float* base = qkv + size_t(b) * T * C3 + size_t(h) * HS;
  const size_t o_base = size_t(b) * T * C + size_t(h) * HS;  // row t of this head in out/dout: + t*C

  for (int idx = threadIdx.x; idx < kBackwardRows * HS; idx += blockDim.x) {
    const int r = idx / HS, d = idx % HS;
    const bool ok = i0 + r < T;
    q_s[r][d] = ok ? read_qk(base + size_t(i0 + r) * C3, d, i0 + r, HS, sch) : 0.0f;
    do_s[r][d] = ok ? dout[o_base + size_t(i0 + r) * C + d] : 0.0f;
  }
  __syncthreads();
  float row_lse = 0.0f, D = 0.0f;
  if (i < T) {
    float part = 0.0f;
    for (int d = lane; d < HS; d += kWarpSize) part += do_s[warp][d] * out[o_base + size_t(i) * C + d];
    D = warp_sum(part);
    row_lse = lse[size_t(bh) * T + i];
    if (lane == 0) delta[size_t(bh) * T + i] = D;
  }
  float dq[kDimsPerLane];
#pragma unroll
  for (int k = 0; k < kDimsPerLane; ++k) dq[k] = 0.0f;

  const int last_row = min(i0 + kBackwardRows, T) - 1, fk = attention_first_key(sch, i);
  for (int j0 = attention_first_key(sch, i0) / kTile * kTile; j0 <= last_row; j0 += kTile) {
    __syncthreads();
    for (int idx = threadIdx.x; idx < kTile * HS; idx += blockDim.x) {
      const int r = idx / HS, d = idx % HS, j = j0 + r;
      k_s[r][d] = j < T ? read_qk(base + size_t(j) * C3 + C, d, j, HS, sch) : 0.0f;
      v_s[r][d] = j < T ? base[size_t(j) * C3 + 2 * C + d] : 0.0f;
    }
    __syncthreads();
    if (i < T && j0 <= i && j0 + kTile > fk) {
      const int j = j0 + lane;
      float ds = 0.0f;
      if (j <= i && j >= fk) {
        float s = 0.0f, dp = 0.0f;
        for (int d = 0; d < HS; ++d) {
          s += q_s[warp][d] * k_s[lane][d];
          dp += do_s[warp][d] * v_s[lane][d];
        }
        ds = expf(biased_score(s, scale, sch, i, j) - row_lse) * (dp - D);
      }
      const int n = min(kTile, i - j0 + 1);
      for (int jj = 0; jj < n; ++jj) {
        const float dsj = __shfl_sync(kFullMask, ds, jj);
#pragma unroll
        for (int k = 0; k < kDimsPerLane; ++k) {
          const int d = lane + k * kWarpSize;
          if (d < HS) dq[k] += dsj * k_s[jj][d];
        }
      }
    }
  }
  if (i < T) {
    GradT* g = dqkv + (size_t(b) * T + i) * C3 + size_t(h) * HS;
    if (sch.rope_cos) {  // dQ of the rotated q, carried back through this warp's own q_s row
      store_rotated_back(g, q_s[warp], dq, scale, i, HS, sch, lane);
      return;
    }
#pragma unroll
    for (int k = 0; k < kDimsPerLane; ++k) {
      const int d = lane + k * kWarpSize;
      if (d < HS) store(&g[d], scale * dq[k]);
    }
  }
}

// Backward, pass 2 (per key row j): dV_j = sum_{i >= j} P_ij dO_i and dK_j = scale * sum_{i >= j} dS_ij Q_i,
// walking query tiles in order from i = the block's first key row. Each dK/dV element has one owner: no atomics.
template <typename GradT>
__global__ void __launch_bounds__(kBackwardRows* kWarpSize)
    attention_backward_dkv_kernel(GradT* dqkv,         // (B, T, 3C) =, k and v columns only
                                  const float* delta,  // (B, NH, T) D from pass 1
                                  const float* dout,   // (B, T, C)
                                  const float* qkv,    // (B, T, 3C)
                                  const float* lse,    // (B, NH, T)
                                  int T, int C, int NH, float scale, AttentionSchedule sch) {
  __shared__ float k_s[kBackwardRows][kMaxHS];
  __shared__ float v_s[kBackwardRows][kMaxHS];
  __shared__ float q_s[kTile][kPad];
  __shared__ float do_s[kTile][kPad];
  __shared__ float lse_s[kTile], delta_s[kTile];
  const int HS = C / NH, C3 = 3 * C;
  const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
  const int j_first = blockIdx.y * kBackwardRows;  // low j has the most queries, and low blockIdx.y starts first
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int j = j_first + warp;
  const float* base = qkv + size_t(b) * T * C3 + size_t(h) * HS;
  const size_t o_base = size_t(b) * T * C + size_t(h) * HS;

  for (int idx = threadIdx.x; idx < kBackwardRows * HS; idx += blockDim.x) {
    const int r = idx / HS, d = idx % HS;
    const bool ok = j_first + r < T;
    k_s[r][d] = ok ? read_qk(base + size_t(j_first + r) * C3 + C, d, j_first + r, HS, sch) : 0.0f;
    v_s[r][d] = ok ? base[size_t(j_first + r) * C3 + 2 * C + d] : 0.0f;
  }
  float dk[kDimsPerLane], dv[kDimsPerLane];
#pragma unroll
  for (int k = 0; k < kDimsPerLane; ++k) dk[k] = dv[k] = 0.0f;

  // Queries past the last key's window (i > j + window) see none of the block's keys.
  const int i_end = sch.window > 0 ? min(T, j_first + kBackwardRows + sch.window) : T;
  for (int i0 = j_first; i0 < i_end; i0 += kTile) {
    __syncthreads();
    for (int idx = threadIdx.x; idx < kTile * HS; idx += blockDim.x) {
      const int r = idx / HS, d = idx % HS, i = i0 + r;
      q_s[r][d] = i < T ? read_qk(base + size_t(i) * C3, d, i, HS, sch) : 0.0f;
      do_s[r][d] = i < T ? dout[o_base + size_t(i) * C + d] : 0.0f;
    }
    if (threadIdx.x < kTile) {
      const int i = i0 + threadIdx.x;
      lse_s[threadIdx.x] = i < T ? lse[size_t(bh) * T + i] : 0.0f;
      delta_s[threadIdx.x] = i < T ? delta[size_t(bh) * T + i] : 0.0f;
    }
    __syncthreads();
    if (j < T) {  // warp-uniform
      const int i = i0 + lane;
      float p = 0.0f, ds = 0.0f;
      if (i < T && i >= j && attention_first_key(sch, i) <= j) {
        float s = 0.0f, dp = 0.0f;
        for (int d = 0; d < HS; ++d) {
          s += q_s[lane][d] * k_s[warp][d];
          dp += do_s[lane][d] * v_s[warp][d];
        }
        p = expf(biased_score(s, scale, sch, i, j) - lse_s[lane]);
        ds = p * (dp - delta_s[lane]);
      }
      const int n = min(kTile, T - i0);
      for (int ii = 0; ii < n; ++ii) {
        const float pi = __shfl_sync(kFullMask, p, ii);
        const float dsi = __shfl_sync(kFullMask, ds, ii);
#pragma unroll
        for (int k = 0; k < kDimsPerLane; ++k) {
          const int d = lane + k * kWarpSize;
          if (d < HS) {
            dv[k] += pi * do_s[ii][d];
            dk[k] += dsi * q_s[ii][d];
          }
        }
      }
    }
  }
  if (j < T) {
    GradT* g = dqkv + (size_t(b) * T + j) * C3 + size_t(h) * HS;
#pragma unroll
    for (int k = 0; k < kDimsPerLane; ++k) {
      const int d = lane + k * kWarpSize;
      if (d < HS) {
        if (!sch.rope_cos) store(&g[C + d], scale * dk[k]);
        store(&g[2 * C + d], dv[k]);
      }
    }
    if (sch.rope_cos) store_rotated_back(g + C, k_s[warp], dk, scale, j, HS, sch, lane);  // through its own k_s row
  }
}

void check_attention_shape(int B, int T, int C, int NH, size_t rows_per_block) {
  EMBER_ASSERT(B > 0 && T > 0 && C > 0 && NH > 0, "attention: B, T, C and NH must be positive");
  EMBER_ASSERT(C % NH == 0, "attention: C must be a multiple of the number of heads NH");
  EMBER_ASSERT(C / NH <= kMaxHS, "attention: the CUDA kernels support head sizes up to 128");
  EMBER_ASSERT(ceil_div(size_t(T), rows_per_block) <= 65535u && size_t(B) * NH <= 0x7fffffffu,
               "attention: grid too large for this T or B * NH");
}

}  // namespace

// The (block of `rows` rows, kTile tile) pairs one head's causal attention visits, for the cost ledger: from the tile
// holding the block's first row's first key (with a window) to its last row.
double causal_block_tiles(int T, int rows, int window) {
  double pairs = 0.0;
  for (int r0 = 0; r0 < T; r0 += rows) {
    const int first = (window > 0 ? std::max(0, r0 - window) : 0) / kTile * kTile;
    pairs += double(ceil_div(size_t(std::min(T, r0 + rows) - first), kTile));
  }
  return pairs;
}

void launch_attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH,
                              const AttentionSchedule& sch, cudaStream_t stream) {
  check_attention_shape(B, T, C, NH, kForwardRows);
  const float scale = 1.0f / sqrtf(float(C / NH));
  const dim3 grid(unsigned(B * NH), ceil_div(size_t(T), kForwardRows));
  {  // per head: Q rows once, a K and a V tile per (row block, tile) pair; out and lse written
    const double heads = double(B) * NH, hs = C / NH, pairs = causal_block_tiles(T, kForwardRows, sch.window);
    report_launch("attention_forward", heads * 4.0 * (T * hs + 2.0 * kTile * hs * pairs), heads * 4.0 * (T * hs + T),
                  heads * pairs * 4.0 * kForwardRows * kTile * hs);
  }
  EMBER_KERNEL_LAUNCH(attention_forward_kernel, grid, kForwardRows * kWarpSize, stream, out, lse, qkv, T, C, NH, scale,
                      sch);
  EMBER_CUDA_LAUNCH_CHECK();
}

void launch_attention_backward(TensorOut dqkv, float* delta, const float* dout, const float* qkv, const float* out,
                               const float* lse, int B, int T, int C, int NH, const AttentionSchedule& sch,
                               cudaStream_t stream) {
  check_attention_shape(B, T, C, NH, kBackwardRows);
  const float scale = 1.0f / sqrtf(float(C / NH));
  const dim3 grid(unsigned(B * NH), ceil_div(size_t(T), kBackwardRows));
  {  // as the tensor-core kernels' (cuda_attention_tc.cu), all in fp32, with kBackwardRows-row blocks
    const double heads = double(B) * NH, hs = C / NH, pairs = causal_block_tiles(T, kBackwardRows, sch.window);
    const double rows = T * hs, tile = kTile * hs, flops = heads * pairs * kBackwardRows * tile;
    const double g = dqkv.bf16 ? 2.0 : 4.0;
    report_launch("attention_backward_dq", heads * 4.0 * (3.0 * rows + T + 2.0 * tile * pairs),
                  heads * (4.0 * T + g * rows), 6.0 * flops);
    report_launch("attention_backward_dkv", heads * 4.0 * (2.0 * rows + 2.0 * tile * pairs + 2.0 * kTile * pairs),
                  heads * 2.0 * g * rows, 8.0 * flops);
  }
  if (dqkv.bf16) {
    EMBER_KERNEL_LAUNCH(attention_backward_dq_kernel<__nv_bfloat16>, grid, kBackwardRows * kWarpSize, stream,
                        device_bf16(dqkv), delta, dout, qkv, out, lse, T, C, NH, scale, sch);
    EMBER_CUDA_LAUNCH_CHECK();
    EMBER_KERNEL_LAUNCH(attention_backward_dkv_kernel<__nv_bfloat16>, grid, kBackwardRows * kWarpSize, stream,
                        device_bf16(dqkv), delta, dout, qkv, lse, T, C, NH, scale, sch);
  } else {
    EMBER_KERNEL_LAUNCH(attention_backward_dq_kernel<float>, grid, kBackwardRows * kWarpSize, stream, dqkv.f32(), delta,
                        dout, qkv, out, lse, T, C, NH, scale, sch);
    EMBER_CUDA_LAUNCH_CHECK();
    EMBER_KERNEL_LAUNCH(attention_backward_dkv_kernel<float>, grid, kBackwardRows * kWarpSize, stream, dqkv.f32(),
                        delta, dout, qkv, lse, T, C, NH, scale, sch);
  }
  EMBER_CUDA_LAUNCH_CHECK();
}

}  // namespace cuda

}  // namespace ember
