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

// out (M, Nc), row r at out + r * ldo: (float(sum_k A[r, k] B[c, k]) * row_scales[r]) * col_scales[c], plus bias32[c]
// or bias16[c] where set, or with kAccumulate plus out's fp32 value. A (M, K) and B (Nc, K) are int8, row-major with
// leading dimensions lda and ldb; K, lda and ldb are multiples of 16 and the rows 16-byte aligned. Grid: (ceil(Nc /
// 64), ceil(M / 64)) blocks of kS8Threads.
template <typename OutT, bool kAccumulate>
__global__ void __launch_bounds__(kS8Threads)
    gemm_s8_scaled_kernel(OutT* out, int ldo, const int8_t* A, int lda, const int8_t* B, int ldb,
                          const float* row_scales, const float* col_scales, const float* bias32,
                          const __nv_bfloat16* bias16, int M, int Nc, int K) {
  __shared__ __align__(16) int8_t a_tile[kS8Tile * kS8Row];
  __shared__ __align__(16) int8_t b_tile[kS8Tile * kS8Row];
  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int r0 = int(blockIdx.y) * kS8Tile, c0 = int(blockIdx.x) * kS8Tile;
  const int wr = (warp / 2) * 32, wc = (warp % 2) * 32;  // the warp's 32 x 32 of the block's 64 x 64
  const int sr = tid / 2, sk = (tid % 2) * 16;           // the row and bytes this thread stages
  int32_t acc[2][4][4] = {};
  for (int k0 = 0; k0 < K; k0 += kS8Step) {
    // Rows past M or Nc, and bytes past K (K % 32 == 16), stage zeros, which add nothing to the sums.
    int4 va = make_int4(0, 0, 0, 0), vb = make_int4(0, 0, 0, 0);
    if (k0 + sk < K) {
      if (r0 + sr < M) va = *reinterpret_cast<const int4*>(A + size_t(r0 + sr) * lda + k0 + sk);
      if (c0 + sr < Nc) vb = *reinterpret_cast<const int4*>(B + size_t(c0 + sr) * ldb + k0 + sk);
    }
    __syncthreads();  // every warp is done with the previous step's tiles
    *reinterpret_cast<int4*>(a_tile + sr * kS8Row + sk) = va;
    *reinterpret_cast<int4*>(b_tile + sr * kS8Row + sk) = vb;
    __syncthreads();
    uint32_t a[2][4], b[4][2];
    for (int mi = 0; mi < 2; ++mi) {
      const int8_t* p = a_tile + (wr + mi * 16 + g) * kS8Row + 4 * t;
      a[mi][0] = shared_word(p), a[mi][1] = shared_word(p + 8 * kS8Row);
      a[mi][2] = shared_word(p + 16), a[mi][3] = shared_word(p + 8 * kS8Row + 16);
    }
    for (int ni = 0; ni < 4; ++ni) {
      const int8_t* q = b_tile + (wc + ni * 8 + g) * kS8Row + 4 * t;
      b[ni][0] = shared_word(q), b[ni][1] = shared_word(q + 16);
    }
    for (int mi = 0; mi < 2; ++mi)
      for (int ni = 0; ni < 4; ++ni) mma_s8(acc[mi][ni], a[mi], b[ni][0], b[ni][1]);
  }
  for (int mi = 0; mi < 2; ++mi)
    for (int ni = 0; ni < 4; ++ni)
      for (int e = 0; e < 4; ++e) {
        const int r = r0 + wr + mi * 16 + g + (e / 2) * 8, c = c0 + wc + ni * 8 + 2 * t + (e & 1);
        if (r >= M || c >= Nc) continue;
        float v = __fmul_rn(__fmul_rn(float(acc[mi][ni][e]), row_scales[r]), col_scales[c]);
        if (bias32) v = __fadd_rn(v, bias32[c]);
        if (bias16) v = __fadd_rn(v, __bfloat162float(bias16[c]));
        OutT* o = out + size_t(r) * ldo + c;
        if constexpr (kAccumulate) v = __fadd_rn(load(o), v);
        store(o, v);
      }
}

}  // namespace
}  // namespace ember::cuda
