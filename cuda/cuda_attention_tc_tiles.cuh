// The building blocks of the tensor-core attention kernels (cuda_attention_tc.cuh; device code only): the block and
// tile sizes, bf16 packing, ldmatrix, cp.async and mma.sync m16n8k16 (each with the kernel model's emulation under
// EMBER_TC_EMULATION), a warp's two kinds of product over a shared tile, and the staging of tiles into shared memory.
// Included through cuda_attention_tc.cuh only, whose includer provides kWarpSize, kFullMask, warp_sum, load, the rope
// helpers and AttentionSchedule (cuda_common.cuh).
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
constexpr int kTile = 64;  // keys (forward, dQ) or queries (dK/dV) per shared tile. The block rows are a
                           // multiple, so a block's diagonal spans whole tiles. Each tile is read once per
                           // block: the more rows a block has, the less often K and V (or Q and dO) are read.
constexpr int kSkew = 8;   // bf16 of padding per shared row: a row of 64 + 8 is 36 words, 4 mod 32, so the
                           // 8 rows x 4 words a fragment load touches hit 32 different banks
static_assert(kRows % kTile == 0 && kForwardRows % kTile == 0 && kTile % 16 == 0, "blocks and tiles share boundaries");
constexpr int kBlocksPerTile = kTile / 16;  // the 16-column blocks of a tile

__device__ inline uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // lo in the low half
  uint32_t u;
  memcpy(&u, &v, sizeof(u));
  return u;
}
// ldmatrix.sync.aligned.m8n8.x4 (.trans): four 8 x 8 matrices of bf16 from shared memory; lane l points at row l % 8
// of matrix l / 8 (16 bytes, 16-byte aligned), and register i of each lane receives matrix i's elements as an A or B
// fragment half holds them (.trans: of the matrix transposed). EMBER_TC_EMULATION: the test's software model.
template <bool Trans>
__device__ inline void ldmatrix_x4(uint32_t (&r)[4], const bf16* row) {
#if defined(EMBER_TC_EMULATION)
  emulated_ldmatrix_x4(r, row, Trans);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto a = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  if constexpr (Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
#else
  __trap();  // the launchers never choose these kernels below sm_80
#endif
}

// cp.async.cg: 16 bytes from global to shared memory without passing through registers, zero-filled where !valid;
// completed, in the issuing thread's view, by the cp_async_wait<N> that leaves at most N later commit groups pending,
// and in the block's by a __syncthreads after that.
__device__ inline void cp_async_16(void* dst, const void* src, bool valid) {
#if defined(EMBER_TC_EMULATION)
  emulated_cp_async_16(dst, src, valid);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 16 : 0) : "memory");
#else
  __trap();
#endif
}
__device__ inline void cp_async_commit() {
#if defined(EMBER_TC_EMULATION)
  emulated_cp_async_commit();
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
template <int N>
__device__ inline void cp_async_wait() {
#if defined(EMBER_TC_EMULATION)
  emulated_cp_async_wait(N);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
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

// The A fragments of the warp's 16 rows r0.. across all KC 16-column blocks of a row-major tile with rows of LD
// elements: per block one ldmatrix, matrix i holding rows r0 + 8 (i % 2) .., columns 16 kc + 8 (i / 2) ..
template <int LD, int KC>
__device__ inline void load_a_rows(uint32_t (&a)[KC][4], const bf16* tile, int r0, int lane) {
  const int m = lane / 8;
  const bf16* row = tile + (r0 + lane % 8 + 8 * (m % 2)) * LD + 8 * (m / 2);
#pragma unroll
  for (int kc = 0; kc < KC; ++kc) ldmatrix_x4<false>(a[kc], row + kc * 16);
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
// (a row-major tile, rows of LD elements): the scores q k^T and dO v^T, and their transposes. Only the 16-column
// blocks [c0, c1) of acc are formed (the others stay as they are): on the diagonal a warp's other columns are all
// masked. Each ldmatrix gives the B fragments of two n-tiles: matrix i holds tile rows n0 + 8 (i / 2) .., columns
// k0 + 8 (i % 2) ..
template <int LD, int KC, int NT>
__device__ inline void mma_rows(float (&acc)[NT][4], const uint32_t (&a)[KC][4], const bf16* tile, int lane, int c0,
                                int c1) {
  const int m = lane / 8;
  const bf16* row = tile + (lane % 8 + 8 * (m / 2)) * LD + 8 * (m % 2);
#pragma unroll
  for (int kc = 0; kc < KC; ++kc)
#pragma unroll
    for (int nb = 0; nb < NT / 2; ++nb) {
      if (nb < c0 || nb >= c1) continue;  // warp-uniform
      uint32_t b[4];
      ldmatrix_x4<false>(b, row + nb * 16 * LD + kc * 16);
      mma_bf16(acc[2 * nb], a[kc], b[0], b[1]);
      mma_bf16(acc[2 * nb + 1], a[kc], b[2], b[3]);
    }
}
// acc (16 x 8 DT) += round(c) (16 x 8 NT, accumulators rounded to bf16 A fragments) B, with B[k][n] = tile[k][n] (a
// row-major tile, rows of LD elements, read transposed by ldmatrix .trans): P v, dS k, P^T dO and dS^T q. Only the
// 16-column blocks [c0, c1) of c take part: the others are all zero (masked), and leaving them out adds nothing but
// zeros. Each ldmatrix gives the B fragments of two n-tiles: matrix i holds tile rows k0 + 8 (i % 2) .., columns
// n0 + 8 (i / 2) ..
template <int LD, int NT, int DT>
__device__ inline void mma_scores(float (&acc)[DT][4], const float (&c)[NT][4], const bf16* tile, int lane, int c0,
                                  int c1) {
  const int m = lane / 8;
  const bf16* row = tile + (lane % 8 + 8 * (m % 2)) * LD + 8 * (m / 2);
#pragma unroll
  for (int kc = 0; kc < NT / 2; ++kc) {
    if (kc < c0 || kc >= c1) continue;  // warp-uniform
    uint32_t a[4];
    c_to_a(a, c, kc);
#pragma unroll
    for (int dp = 0; dp < DT / 2; ++dp) {
      uint32_t b[4];
      ldmatrix_x4<true>(b, row + kc * 16 * LD + dp * 16);
      mma_bf16(acc[2 * dp], a, b[0], b[1]);
      mma_bf16(acc[2 * dp + 1], a, b[2], b[3]);
    }
  }
}

// Stages rows row0.. (ROWS of them: a tile, or a block's rows) of one head's (T, HS) slice, rows `stride` elements
// apart, row-major into dst[r * (HS + kSkew) + d] as bf16. Rows past T are zero, never garbage: a masked p = 0 times a
// NaN would still be NaN. A bf16 source whose rows are 16-byte aligned is copied with cp.async, to be completed by the
// caller's cp_async_wait and __syncthreads; an fp32 one is rounded on the way, by plain stores (complete at the
// caller's __syncthreads).
template <int HS, int ROWS, typename SrcT>
__device__ inline void stage(bf16* dst, const SrcT* src, int row0, int T, size_t stride) {
  static_assert(ROWS == kTile || ROWS == kRows || ROWS == kForwardRows, "a tile or a block");
  constexpr int LD = HS + kSkew, kChunks = HS / 8;  // 16-byte chunks per row
  if constexpr (sizeof(SrcT) == sizeof(bf16)) {
    if (reinterpret_cast<uintptr_t>(src) % 16 == 0 && stride % 8 == 0) {
      for (int idx = threadIdx.x; idx < ROWS * kChunks; idx += blockDim.x) {
        const int r = idx / kChunks, ch = idx % kChunks;
        const bool valid = row0 + r < T;
        cp_async_16(dst + r * LD + ch * 8, src + size_t(valid ? row0 + r : 0) * stride + ch * 8, valid);
      }
      return;
    }
  }
  for (int idx = threadIdx.x; idx < ROWS * HS; idx += blockDim.x) {
    const int r = idx / HS, d = idx % HS;  // consecutive threads read consecutive d of one row
    dst[r * LD + d] = row0 + r < T ? as_bf16(src[size_t(row0 + r) * stride + d]) : __float2bfloat16_rn(0.0f);
  }
}

// As stage, for rows of q or k, which rope rotates by their positions row0.. before the products read them: each pair
// (d, d + HS/2) is read as stored, rotated in fp32 and then rounded to bf16 (as the CPU backend's bf16 attention
// does), on its way through registers, so never by cp.async. Without rope, stage.
template <int HS, int ROWS, typename SrcT>
__device__ inline void stage_qk(bf16* dst, const SrcT* src, int row0, int T, size_t stride,
                                const AttentionSchedule& sch) {
  if (!sch.rope_cos) return stage<HS, ROWS>(dst, src, row0, T, stride);
  constexpr int LD = HS + kSkew, kHalf = HS / 2;
  for (int idx = threadIdx.x; idx < ROWS * kHalf; idx += blockDim.x) {
    const int r = idx / kHalf, d = idx % kHalf, t = row0 + r;
    float x1 = 0.0f, x2 = 0.0f;
    if (t < T) {
      const float a = load(&src[size_t(t) * stride + d]), b = load(&src[size_t(t) * stride + d + kHalf]);
      const float c = sch.rope_cos[size_t(t) * kHalf + d], s = sch.rope_sin[size_t(t) * kHalf + d];
      x1 = rope_first(a, b, c, s), x2 = rope_second(a, b, c, s);
    }
    dst[r * LD + d] = __float2bfloat16_rn(x1);
    dst[r * LD + d + kHalf] = __float2bfloat16_rn(x2);
  }
}

// Which 16-column blocks of a tile a warp's 16 rows (queries or keys, rows r0 .. r0 + 15 for warp w of a block from
// row0, r0 = row0 + 16 w) form scores in, [first, end): before them, and from `end` on, every score of the warp's rows
// is masked. row0 and the tile's first column are multiples of 16.
//
// Query rows against key tile j0: the keys from the first key of the warp's first row (first_key) to its last row.
__host__ __device__ inline int clamp_blocks(int n) { return n < 0 ? 0 : n > kBlocksPerTile ? kBlocksPerTile : n; }
__host__ __device__ inline int visible_blocks_first(int first_key, int j0) {
  return first_key < j0 ? 0 : clamp_blocks((first_key - j0) / 16);
}
__host__ __device__ inline int visible_blocks_end(int i0, int j0, int warp) {
  return clamp_blocks((i0 - j0) / 16 + warp + 1);
}
// Key rows (block from j_first) against query tile i0: the queries from the warp's first key to its last key's last
// query, which the window bounds (window 0: to the end).
__host__ __device__ inline int seen_blocks_first(int j_first, int i0, int warp) {
  return clamp_blocks((j_first - i0) / 16 + warp);
}
__host__ __device__ inline int seen_blocks_end(int j_first, int i0, int warp, int window) {
  if (window <= 0) return kBlocksPerTile;
  const int last_query = j_first + 16 * warp + 15 + window;  // the warp's last key's last query
  return last_query < i0 ? 0 : clamp_blocks((last_query - i0) / 16 + 1);
}

// The loops below run over tiles double-buffered: tile j + 1 is staged (with cp.async where it can be) while tile j is
// computed on. Each iteration stages the next tile into the other buffer, waits for its own, then a barrier makes the
// tile visible to the block; a second barrier at the end keeps the buffer from being refilled (two iterations later)
// while a warp may still read it.

// The head of such an iteration: stage_next() stages the next tile (where there is one, `more`) into the other
// buffer; then this thread's copies of the current tile are waited for, and a barrier makes them the block's.
template <typename StageNext>
__device__ inline void next_tile_ready(bool more, StageNext stage_next) {
  if (more) {
    stage_next();
    cp_async_wait<1>();
  } else {
    cp_async_wait<0>();
  }
  __syncthreads();
}
// Stages key tile j0's K (rotated under rope) and V rows of one head (base: its q columns in qkv) as one commit group.
template <int HS, typename StoreT>
__device__ inline void stage_kv(bf16* k, bf16* v, const StoreT* base, int j0, int T, int C,
                                const AttentionSchedule& sch) {
  stage_qk<HS, kTile>(k, base + C, j0, T, size_t(3) * C, sch);
  stage<HS, kTile>(v, base + 2 * C, j0, T, size_t(3) * C);
  cp_async_commit();
}

// The key-tile loop of the forward and dQ passes, for the block of query rows i0 .. last_row: the key tiles from the
// one holding the block's first row's first key (tiles wholly before its windows take no work) to its last row,
// double-buffered, K and V of tile j0 staged into k_s(buf) and v_s(buf). body(j0, buf, c0, c1) runs where the tile
// holds keys warp w's rows see, the 16-column blocks [c0, c1) (warp-uniform).
template <int HS, typename StoreT, typename KTile, typename VTile, typename Body>
__device__ inline void walk_key_tiles(KTile k_s, VTile v_s, const StoreT* base, int i0, int last_row, int T, int C,
                                      int warp, const AttentionSchedule& sch, Body body) {
  const int j_begin = attention_first_key(sch, i0) / kTile * kTile;
  stage_kv<HS>(k_s(0), v_s(0), base, j_begin, T, C, sch);
  for (int j0 = j_begin, buf = 0; j0 <= last_row; j0 += kTile, buf ^= 1) {
    next_tile_ready(j0 + kTile <= last_row,
                    [&] { stage_kv<HS>(k_s(buf ^ 1), v_s(buf ^ 1), base, j0 + kTile, T, C, sch); });
    const int c0 = visible_blocks_first(attention_first_key(sch, i0 + warp * 16), j0);
    const int c1 = visible_blocks_end(i0, j0, warp);
    if (c0 < c1) body(j0, buf, c0, c1);
    __syncthreads();  // buffer buf is no longer read
  }
}

}  // namespace
}  // namespace ember::cuda::tc
