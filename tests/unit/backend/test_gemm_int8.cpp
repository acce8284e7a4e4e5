// The CPU backend's int8 GEMM (oneDNN, and the double-precision fallback) bitwise against an int64 reference rounded
// once to fp32: every transpose, odd shapes, leading dimensions wider than the rows, extreme operands, sums past 2^24
// (where the rounding shows) and the longest sum that fits int32.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "backend/cpu/cpu_gemm_int8.h"
#include "test_rng.h"

namespace ember::cpu {
namespace {

using Gemm = void (*)(bool, bool, int, int, int, const int8_t*, int, const int8_t*, int, float*, int);

struct Case {
  bool trans_a, trans_b;
  int M, N, K;
};

// Values in [-127, 127]; one in eight is an extreme, so long sums of like-signed 127 * 127 products occur.
std::vector<int8_t> draw(size_t n, uint32_t stream) {
  test::Rng rng(3, stream);
  std::vector<int8_t> v(n);
  for (int8_t& x : v) {
    const uint64_t r = rng.philox.below(8 * 255);
    x = r < 255 ? int8_t(r % 2 ? 127 : -127) : int8_t(int(r % 255) - 127);
  }
  return v;
}

void check(Gemm gemm, const Case& c, int pad) {
  const int a_rows = c.trans_a ? c.K : c.M, a_cols = c.trans_a ? c.M : c.K;
  const int b_rows = c.trans_b ? c.N : c.K, b_cols = c.trans_b ? c.K : c.N;
  const int lda = a_cols + pad, ldb = b_cols + pad, ldc = c.N + pad;
  const auto A = draw(size_t(a_rows) * lda, 1), B = draw(size_t(b_rows) * ldb, 2);
  std::vector<float> C(size_t(c.M) * ldc, -7.0f);
  gemm(c.trans_a, c.trans_b, c.M, c.N, c.K, A.data(), lda, B.data(), ldb, C.data(), ldc);
  for (int m = 0; m < c.M; ++m)
    for (int n = 0; n < c.N; ++n) {
      int64_t want = 0;
      for (int k = 0; k < c.K; ++k) {
        const int64_t a = c.trans_a ? A[size_t(k) * lda + m] : A[size_t(m) * lda + k];
        const int64_t b = c.trans_b ? B[size_t(n) * ldb + k] : B[size_t(k) * ldb + n];
        want += a * b;
      }
      ASSERT_EQ(C[size_t(m) * ldc + n], float(want)) << "C[" << m << "," << n << "] of " << c.M << "x" << c.N << "x"
                                                     << c.K << " trans " << c.trans_a << c.trans_b << " pad " << pad;
    }
  for (int m = 0; m < c.M; ++m)
    for (int n = c.N; n < ldc; ++n) ASSERT_EQ(C[size_t(m) * ldc + n], -7.0f) << "wrote past a row of C";
}

const Case kCases[] = {{false, false, 1, 1, 1},    {false, false, 17, 33, 65},  {false, true, 31, 7, 257},
                       {true, false, 64, 48, 100}, {true, true, 5, 129, 19},    {false, false, 128, 96, 768},
                       {false, true, 1, 300, 768}, {true, false, 96, 128, 1024}};

TEST(GemmInt8, OneDnnIsExact) {
  for (const Case& c : kCases)
    for (int pad : {0, 3}) check(gemm_s8, c, pad);
}

TEST(GemmInt8, DoubleFallbackIsExact) {
  for (const Case& c : kCases)
    for (int pad : {0, 3}) check(gemm_s8_by_doubles, c, pad);
}

// All 127 * 127 or all -127 * 127: the largest sums an int32 accumulator must hold, at the longest K allowed.
TEST(GemmInt8, LongestSumFitsInt32) {
  const int K = kMaxInt8GemmK;
  std::vector<int8_t> A(2 * size_t(K)), B(size_t(K) * 2);
  for (int k = 0; k < K; ++k) {
    A[k] = 127, A[K + k] = -127;
    B[size_t(k) * 2] = 127, B[size_t(k) * 2 + 1] = 127;
  }
  for (Gemm gemm : {Gemm(gemm_s8), Gemm(gemm_s8_by_doubles)}) {
    std::vector<float> C(4);
    gemm(false, false, 2, 2, K, A.data(), K, B.data(), 2, C.data(), 2);
    const int64_t top = int64_t(K) * 127 * 127;
    EXPECT_EQ(C[0], float(top));  // 2147479576, rounded to 2147479552: fp32 values are 128 apart there
    EXPECT_EQ(C[1], float(top));
    EXPECT_EQ(C[2], -float(top));
    EXPECT_EQ(C[3], -float(top));
  }
  EXPECT_LE(int64_t(kMaxInt8GemmK) * 127 * 127, INT32_MAX);
  EXPECT_GT(int64_t(kMaxInt8GemmK + 1) * 127 * 127, INT32_MAX);  // the bound is the tightest one
}

TEST(GemmInt8, NamesItsEngine) {
  const std::string engine = int8_gemm_engine();
  EXPECT_TRUE(engine.find("oneDNN") != std::string::npos || engine.find("dgemm") != std::string::npos) << engine;
}

}  // namespace
}  // namespace ember::cpu
