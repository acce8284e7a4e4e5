// The int8 product with its scales applied in registers (sm_80 and newer): out = (float(A B^T) * row scale) * column
// scale (+ bias, or + out), each operation rounded on its own in the CPU backend's order
// (backend/cpu/cpu_matmul_int8.h), so no int32 product goes through global memory. mma.sync m16n8k32 sums the int8
// products exactly in int32, as cuBLAS's int8 GEMM does, so the result is the CPU's bit for bit. Device code; included
// by cuda_matmul_quant.cu and, as plain C++, by the kernel model, which emulates the instruction under
// EMBER_TC_EMULATION.
//
// Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k32" with .s8; g = lane / 4, t = lane % 4), four int8 to a
// 32-bit register, the lowest index in the lowest byte:
//   A (16 x 32, row-major): a[0] = (g, 4t..4t+3), a[1] = (g+8, 4t..), a[2] = (g, 16+4t..), a[3] = (g+8, 16+4t..)
//   B (32 x 8, column-major): b[0] = (k 4t..4t+3, n g), b[1] = (k 16+4t..16+4t+3, n g)
//   C (16 x 8, int32): c[0], c[1] = (g, 2t), (g, 2t+1); c[2], c[3] = (g+8, 2t), (g+8, 2t+1)
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "cuda_common.cuh"

namespace ember::cuda {
namespace {

constexpr int kS8Tile = 64;  // rows and columns of out per block
constexpr int kS8Step = 32;  // the k of one mma, staged per step
constexpr int kS8Row = 48;   // bytes per staged row: 12 words, so the 8 rows x 4 words a fragment reads hit 32 banks
constexpr int kS8Threads = 128;  // four warps, 2 x 2, each 32 x 32 of out
static_assert(kS8Threads == 2 * kS8Tile, "each thread stages one 16-byte half of a row of each operand per step");

// d += a b for one 16 x 8 x 32 step (EMBER_TC_EMULATION: the test's software model of the instruction).
__device__ inline void mma_s8(int32_t (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(EMBER_TC_EMULATION)
  emulated_mma_s8(d, a, b0, b1);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  __trap();  // the launchers never choose this kernel below sm_80
#endif
}

__device__ inline uint32_t shared_word(const int8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }

// One int8 operand of gemm_s8_scaled_kernel: `parts` matrices of rows of K values, leading dimension ld, part p at
// q + p * part_stride, each with one scale per row (part p's at scales + p * scale_stride).
struct S8Operand {
  const int8_t* q;
  int ld;
  size_t part_stride;
  const float* scales;
  int scale_stride;
};

// out (M, Nc), row r at out + r * ldo: (float(sum_k A[r, k] B[c, k]) * a.scales[r]) * b.scales[c], plus bias32[c] or
// bias16[c] where set; or, with kAccumulate, out's fp32 value plus each part's such product in turn (the int8 weight
// gradient's tiles of tokens, each with its own scales, summed in registers and stored once). A (M, K) and B (Nc, K)
// are int8, row-major, the last part's only last_k <= K values long; K, last_k and the leading dimensions are
// multiples of 16 and the rows 16-byte aligned. Grid:
// (ceil(Nc / 64), ceil(M / 64)) blocks of kS8Threads.
template <typename OutT, bool kAccumulate>
__global__ void __launch_bounds__(kS8Threads)
    gemm_s8_scaled_kernel(OutT* out, int ldo, S8Operand a, S8Operand b, const float* bias32,
                          const __nv_bfloat16* bias16, int M, int Nc, int K, int parts, int last_k) {
  __shared__ __align__(16) int8_t a_tile[kS8Tile * kS8Row];
  __shared__ __align__(16) int8_t b_tile[kS8Tile * kS8Row];
  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int r0 = int(blockIdx.y) * kS8Tile, c0 = int(blockIdx.x) * kS8Tile;
  const int wr = (warp / 2) * 32, wc = (warp % 2) * 32;  // the warp's 32 x 32 of the block's 64 x 64
  const int sr = tid / 2, sk = (tid % 2) * 16;           // the row and bytes this thread stages
  // Element e of mma tile (mi, ni) of this lane: its row and column of out, and whether it is one.
  const auto row_of = [&](int mi, int e) { return r0 + wr + mi * 16 + g + (e / 2) * 8; };
  const auto col_of = [&](int ni, int e) { return c0 + wc + ni * 8 + 2 * t + (e & 1); };
  float sum[2][4][4] = {};  // kAccumulate: out's values, then each part added
  if constexpr (kAccumulate)
    for (int mi = 0; mi < 2; ++mi)
      for (int ni = 0; ni < 4; ++ni)
        for (int e = 0; e < 4; ++e)
          if (row_of(mi, e) < M && col_of(ni, e) < Nc)
            sum[mi][ni][e] = load(out + size_t(row_of(mi, e)) * ldo + col_of(ni, e));
  for (int part = 0; part < parts; ++part) {
    const int8_t* qa = a.q + size_t(part) * a.part_stride;
    const int8_t* qb = b.q + size_t(part) * b.part_stride;
    int32_t acc[2][4][4] = {};
    const int kp = part + 1 < parts ? K : last_k;
    for (int k0 = 0; k0 < kp; k0 += kS8Step) {
      // Rows past M or Nc, and bytes past K (K % 32 == 16), stage zeros, which add nothing to the sums.
      int4 va = make_int4(0, 0, 0, 0), vb = make_int4(0, 0, 0, 0);
      if (k0 + sk < kp) {
        if (r0 + sr < M) va = *reinterpret_cast<const int4*>(qa + size_t(r0 + sr) * a.ld + k0 + sk);
        if (c0 + sr < Nc) vb = *reinterpret_cast<const int4*>(qb + size_t(c0 + sr) * b.ld + k0 + sk);
      }
      __syncthreads();  // every warp is done with the previous step's tiles
      *reinterpret_cast<int4*>(a_tile + sr * kS8Row + sk) = va;
      *reinterpret_cast<int4*>(b_tile + sr * kS8Row + sk) = vb;
      __syncthreads();
      uint32_t fa[2][4], fb[4][2];
      for (int mi = 0; mi < 2; ++mi) {
        const int8_t* p = a_tile + (wr + mi * 16 + g) * kS8Row + 4 * t;
        fa[mi][0] = shared_word(p), fa[mi][1] = shared_word(p + 8 * kS8Row);
        fa[mi][2] = shared_word(p + 16), fa[mi][3] = shared_word(p + 8 * kS8Row + 16);
      }
      for (int ni = 0; ni < 4; ++ni) {
        const int8_t* q = b_tile + (wc + ni * 8 + g) * kS8Row + 4 * t;
        fb[ni][0] = shared_word(q), fb[ni][1] = shared_word(q + 16);
      }
      for (int mi = 0; mi < 2; ++mi)
        for (int ni = 0; ni < 4; ++ni) mma_s8(acc[mi][ni], fa[mi], fb[ni][0], fb[ni][1]);
    }
    const float* sa = a.scales + size_t(part) * a.scale_stride;
    const float* sb = b.scales + size_t(part) * b.scale_stride;
    for (int mi = 0; mi < 2; ++mi)
      for (int ni = 0; ni < 4; ++ni)
        for (int e = 0; e < 4; ++e) {
          const int r = row_of(mi, e), c = col_of(ni, e);
          if (r >= M || c >= Nc) continue;
          float v = __fmul_rn(__fmul_rn(float(acc[mi][ni][e]), sa[r]), sb[c]);
          if constexpr (kAccumulate) {
            sum[mi][ni][e] = __fadd_rn(sum[mi][ni][e], v);
          } else {
            if (bias32) v = __fadd_rn(v, bias32[c]);
            if (bias16) v = __fadd_rn(v, __bfloat162float(bias16[c]));
            store(out + size_t(r) * ldo + c, v);
          }
        }
  }
  if constexpr (kAccumulate)
    for (int mi = 0; mi < 2; ++mi)
      for (int ni = 0; ni < 4; ++ni)
        for (int e = 0; e < 4; ++e)
          if (row_of(mi, e) < M && col_of(ni, e) < Nc)
            store(out + size_t(row_of(mi, e)) * ldo + col_of(ni, e), sum[mi][ni][e]);
}

}  // namespace
}  // namespace ember::cuda
