// Row-major SGEMM wrappers over OpenBLAS for the CPU backend: one on the calling thread, one split over OpenMP.
// OpenBLAS is pinned to one thread (see CpuBackend()), so all parallelism is ours and statically partitioned.
#pragma once

namespace ember::cpu {

// C = alpha * op(A) @ op(B) + beta * C, row-major, on the calling thread. op(A) is (M, K), op(B) is (K, N),
// C is (M, N); trans_a means A is stored (K, M), trans_b means B is stored (N, K). Safe inside a parallel region.
void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
          int ldb, float beta, float* C, int ldc);

// The same product split over the OpenMP threads into contiguous slices of C's rows (when M >= N) or columns,
// each computed by one thread. The split depends only on the shape and thread count, so the result is
// deterministic. Must not be called from inside a parallel region.
void gemm_parallel(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                   const float* B, int ldb, float beta, float* C, int ldc);

}  // namespace ember::cpu
