// CUDA backend: the ops of KV-cache inference. Rows are tokens of several sequences: each row's embedding takes its
// own position, its keys and values go to its slot's cache row, and its query attends to that cache up to its position.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "cuda_check.h"
#include "cuda_common.cuh"
#include "cuda_ops.h"

namespace ember {
namespace cuda {
namespace {

// out[i, c] = wte[inp[i], c] + wpe[pos[i], c]: one add, so bitwise the CPU's.
__global__ void encoder_forward_positions_kernel(float* out,          // (N, C)
                                                 const int32_t* inp,  // (N)
                                                 const int32_t* pos,  // (N)
                                                 const float* wte,    // (V, C)
                                                 const float* wpe,    // (maxT, C)
                                                 int C, size_t total) {
  for (size_t idx = size_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += size_t(gridDim.x) * blockDim.x) {
    const size_t i = idx / C, c = idx % C;
    out[idx] = wpe ? wte[size_t(inp[i]) * C + c] + wpe[size_t(pos[i]) * C + c] : wte[size_t(inp[i]) * C + c];
  }
}

// k_cache[slot[i], pos[i] % ring, c] = qkv[i, C + c] (rotated under rope) and v_cache[...] = qkv[i, 2C + c]:
// consecutive threads take consecutive columns of one row, so both the reads and the writes are coalesced.
__global__ void kv_cache_write_kernel(float* k_cache,       // (S, ring, C)
                                      float* v_cache,       // (S, ring, C)
                                      const float* qkv,     // (N, 3C)
                                      const int32_t* slot,  // (N)
                                      const int32_t* pos,   // (N)
                                      int C, int HS, int ring, const float* rope_cos, const float* rope_sin,
                                      size_t total) {
  for (size_t idx = size_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total; idx += size_t(gridDim.x) * blockDim.x) {
    const size_t i = idx / C, c = idx % C;
    const size_t row = (size_t(slot[i]) * ring + size_t(pos[i] % ring)) * C;
    const float* src = qkv + i * 3 * C;
    const int half = HS / 2, h = int(c) / HS;
    k_cache[row + c] =
        rope_cos ? rope_value(src + C + size_t(h) * HS, int(c) % HS, half, rope_cos + i * half, rope_sin + i * half)
                 : src[C + c];
    v_cache[row + c] = src[2 * C + c];
  }
}

// Block 128 (4 warps) per (row, head), walking the keys in tiles of 128 (one score per thread for the softmax's
// reductions). At GPT-2 sizes a decode step of 16 rows is 16 x 12 = 192 blocks, about 1.5 per SM on an H100, and each
// tile's scores read 128 key rows of HS = 64 floats (32 KB) once.
constexpr int kKvThreads = 128;
constexpr int kKvWarps = kKvThreads / kWarpSize;
constexpr int kKvTile = kKvThreads;

// out[i, head h] = softmax(q k^T * scale + ALiBi) v over the keys first..pos[i] of slot slot[i] (cache rows j % ring),
// with an online softmax over the tiles so that any ring fits in shared memory of one tile. Any head size: lanes (for
// the scores) and threads (for the output) step through the head dims; the running output lives in `out` itself, each
// element owned by one thread (rescaled by e^(m_old - m_new) per tile, divided by the sum at the end), so no register
// array bounds HS. Under rope the query's values are rotated as they are read.
__global__ void __launch_bounds__(kKvThreads)
    attention_kv_forward_kernel(float* out,            // (N, C)
                                const float* qkv,      // (N, 3C)
                                const float* k_cache,  // (S, ring, C)
                                const float* v_cache,  // (S, ring, C)
                                const int32_t* slot,   // (N)
                                const int32_t* pos,    // (N)
                                int C, int NH, int ring, int window, float slope, const float* rope_cos,
                                const float* rope_sin, float scale) {
  __shared__ float p_s[kKvTile];         // the tile's scores, then its unnormalised probabilities
  __shared__ float reduce_s[kWarpSize];  // block_reduce's scratch
  const int HS = C / NH, half = HS / 2;
  const int i = blockIdx.x / NH, h = blockIdx.x % NH;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int p = pos[i], first = window > 0 ? max(0, p - window) : 0, n = p - first + 1;
  const float* q = qkv + size_t(i) * 3 * C + size_t(h) * HS;
  const float* cos_row = rope_cos ? rope_cos + size_t(i) * half : nullptr;  // the query's rotation, or none
  const float* sin_row = rope_sin ? rope_sin + size_t(i) * half : nullptr;
  const size_t base = size_t(slot[i]) * ring * C + size_t(h) * HS;  // position j of this head at base + (j % ring) C
  const float* k = k_cache + base;
  const float* v = v_cache + base;
  float* o = out + size_t(i) * C + size_t(h) * HS;

  float m = -INFINITY, l = 0.0f;
  for (int t0 = 0; t0 < n; t0 += kKvTile) {
    const int tile = min(kKvTile, n - t0);
    // Scores: warp w takes keys w, w + 4, ...; its lanes split the head dims, so each key row is read coalesced.
    for (int tt = warp; tt < tile; tt += kKvWarps) {
      const int j = first + t0 + tt;
      const float* kj = k + size_t(j % ring) * C;
      float part = 0.0f;
      for (int d = lane; d < HS; d += kWarpSize)
        part += (cos_row ? rope_value(q, d, half, cos_row, sin_row) : q[d]) * kj[d];
      const float dot = warp_sum(part);
      if (lane == 0) p_s[tt] = slope != 0.0f ? __fsub_rn(dot * scale, __fmul_rn(slope, float(p - j))) : dot * scale;
    }
    __syncthreads();
    const bool key = int(threadIdx.x) < tile;
    const float s = key ? p_s[threadIdx.x] : -INFINITY;
    // Key `first` is always visible, so m_new is finite; corr = e^(-inf) = 0 on the first tile.
    const float m_new = fmaxf(m, block_reduce<float, true>(s, reduce_s));
    const float pr = key ? expf(s - m_new) : 0.0f;
    const float corr = expf(m - m_new);
    l = l * corr + block_reduce<float, false>(pr, reduce_s);
    p_s[threadIdx.x] = pr;  // each thread read only its own score, and block_reduce ends with a barrier
    __syncthreads();
    for (int d = threadIdx.x; d < HS; d += blockDim.x) {
      float acc = t0 == 0 ? 0.0f : o[d] * corr;
      for (int tt = 0; tt < tile; ++tt) acc += p_s[tt] * v[size_t((first + t0 + tt) % ring) * C + d];
      o[d] = acc;
    }
    m = m_new;
    __syncthreads();  // every thread has read p_s before the next tile's scores overwrite it
  }
  const float inv_l = 1.0f / l;
  for (int d = threadIdx.x; d < HS; d += blockDim.x) o[d] *= inv_l;
}

}  // namespace

void launch_encoder_forward_positions(float* out, const int32_t* inp, const int32_t* pos, const float* wte,
                                      const float* wpe, int N, int C, cudaStream_t stream) {
  EMBER_ASSERT(N >= 0 && C > 0, "encoder_forward_positions: N must be non-negative and C positive");
  if (N == 0) return;
  const size_t total = size_t(N) * C;
  report_launch("encoder_forward_positions", 4.0 * (2.0 * N + 2.0 * double(total)), 4.0 * double(total), double(total));
  EMBER_KERNEL_LAUNCH(encoder_forward_positions_kernel, elementwise_blocks(total), kElementwiseThreads, stream, out,
                      inp, pos, wte, wpe, C, total);
  EMBER_CUDA_LAUNCH_CHECK();
}

void launch_kv_cache_write(float* k_cache, float* v_cache, const float* qkv, const int32_t* slot, const int32_t* pos,
                           int N, int C, int NH, const Backend::KvAttention& a, cudaStream_t stream) {
  EMBER_ASSERT(N >= 0 && C > 0 && NH > 0 && a.ring > 0,
               "kv_cache_write: N must be non-negative, C, NH and ring positive");
  if (N == 0) return;
  const size_t total = size_t(N) * C;
  report_launch("kv_cache_write", 4.0 * (2.0 * N + 2.0 * double(total)), 8.0 * double(total), 0.0);
  EMBER_KERNEL_LAUNCH(kv_cache_write_kernel, elementwise_blocks(total), kElementwiseThreads, stream, k_cache, v_cache,
                      qkv, slot, pos, C, C / NH, a.ring, a.rope_cos, a.rope_sin, total);
  EMBER_CUDA_LAUNCH_CHECK();
}

void launch_attention_kv_forward(float* out, const float* qkv, const float* k_cache, const float* v_cache,
                                 const int32_t* slot, const int32_t* pos, int N, int C, int NH,
                                 const Backend::KvAttention& a, cudaStream_t stream) {
  EMBER_ASSERT(N >= 0 && C > 0 && NH > 0 && a.ring > 0,
               "attention_kv_forward: N must be non-negative, C, NH and ring positive");
  EMBER_ASSERT(C % NH == 0, "attention_kv_forward: C must be a multiple of the number of heads NH");
  EMBER_ASSERT(size_t(N) * NH <= 0x7fffffffu, "attention_kv_forward: grid too large for this N * NH");
  if (N == 0) return;
  const float scale = 1.0f / sqrtf(float(C / NH));   // as the CPU backend's
  const unsigned blocks = unsigned(size_t(N) * NH);  // one per (row, head)
  // The positions are device data: the ledger takes the bound, every row attending to as many keys as the ring holds.
  const double keys = double(a.window > 0 ? std::min(a.window + 1, a.ring) : a.ring);
  report_launch("attention_kv_forward (bound)", 4.0 * (double(N) * C * (1.0 + 2.0 * keys) + 2.0 * N),
                4.0 * double(N) * C, 4.0 * double(N) * C * keys);
  EMBER_KERNEL_LAUNCH(attention_kv_forward_kernel, blocks, kKvThreads, stream, out, qkv, k_cache, v_cache, slot, pos, C,
                      NH, a.ring, a.window, a.alibi_slope, a.rope_cos, a.rope_sin, scale);
  EMBER_CUDA_LAUNCH_CHECK();
}

}  // namespace cuda

}  // namespace ember
