// Exact int8 GEMM for the CPU backend (training.precision = int8): int8 operands, products summed exactly in int32 as
// the GPU's int8 tensor cores sum them, through oneDNN's matmul (AVX-512 VNNI or AMX where the CPU has them), and the
// sum rounded once to fp32 (to nearest, ties to even: exact below 2^24), as the GPU's epilogue converts it.
#pragma once

#include <cstdint>
#include <string>

namespace ember::cpu {

// The most terms an int32 sum of products of values in [-127, 127] holds without overflow: 2^31 / 127^2.
inline constexpr int kMaxInt8GemmK = 133144;

// C = op(A) @ op(B) in fp32, row-major: op(A) is (M, K), op(B) is (K, N), C is (M, N); trans_a means A is stored (K,
// M), trans_b that B is stored (N, K). Operands hold values in [-127, 127] (core/int8_quant.h); K <= kMaxInt8GemmK.
// Multi-threaded over OpenMP; must not be called from inside a parallel region. Exact on every CPU: where oneDNN's
// kernels could saturate an intermediate sum (x86 without VNNI), it uses a double-precision GEMM instead.
void gemm_s8(bool trans_a, bool trans_b, int M, int N, int K, const int8_t* A, int lda, const int8_t* B, int ldb,
             float* C, int ldc);

// The same product through the fallback alone (widened to double, OpenBLAS's dgemm): exact anywhere, and slow.
void gemm_s8_by_doubles(bool trans_a, bool trans_b, int M, int N, int K, const int8_t* A, int lda, const int8_t* B,
                        int ldb, float* C, int ldc);

// What runs gemm_s8 here: "oneDNN (avx512_core_vnni)" or the exact fallback, for the start-up log.
std::string int8_gemm_engine();

}  // namespace ember::cpu
