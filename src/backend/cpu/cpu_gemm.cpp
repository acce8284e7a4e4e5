// Row-major SGEMM wrappers over OpenBLAS (implementation): slicing a product over threads by rows or columns.
// Each slice is an ordinary single-threaded cblas_sgemm, so no output element is ever shared between threads.
#include "backend/cpu/cpu_gemm.h"

#include <cblas.h>
#include <omp.h>

#include <cstddef>

#include "backend/cpu/cpu_common.h"

namespace ember::cpu {

namespace {

// Products smaller than this many multiply-adds run on one thread: splitting them costs more than it saves.
constexpr double kMinParallelFlops = double(1 << 20);
// Slices are multiples of 16 rows/columns: OpenBLAS's SGEMM micro-tiles are 4-16 wide, and 16 floats fill a
// cache line, so a column split never puts two threads on one line of C.
constexpr size_t kSliceAlign = 16;

}  // namespace

void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
          int ldb, float beta, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha,
              A, lda, B, ldb, beta, C, ldc);
}

void gemm_parallel(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                   const float* B, int ldb, float beta, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  if (double(M) * N * K < kMinParallelFlops || omp_get_max_threads() == 1) {
    gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  const bool split_rows = M >= N;
#pragma omp parallel
  {
    const Span s = thread_span(size_t(split_rows ? M : N), omp_get_thread_num(), omp_get_num_threads(), kSliceAlign);
    const int len = int(s.end - s.begin);
    if (len > 0) {
      const size_t o = s.begin;
      if (split_rows) {
        // Rows [o, o+len) of op(A) and C.
        const float* a = trans_a ? A + o : A + o * size_t(lda);
        gemm(trans_a, trans_b, len, N, K, alpha, a, lda, B, ldb, beta, C + o * size_t(ldc), ldc);
      } else {
        // Columns [o, o+len) of op(B) and C.
        const float* b = trans_b ? B + o * size_t(ldb) : B + o;
        gemm(trans_a, trans_b, M, len, K, alpha, A, lda, b, ldb, beta, C + o, ldc);
      }
    }
  }
}

}  // namespace ember::cpu
