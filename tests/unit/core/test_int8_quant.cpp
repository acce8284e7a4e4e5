// int8 quantization per row and per column: the error bound of each rounding (half a step to nearest, under one step
// dithered), dithering unbiased and reproducible for a key, the edges (zero, tiny, NaN and infinite rows), and the
// column form equal to the row form of the transpose, and the dithered column form drawing by position from `first`.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/int8_quant.h"
#include "test_rng.h"

namespace ember {
namespace {

constexpr size_t kRows = 37, kCols = 301;  // odd sizes: rows start at every offset of a Philox block

std::vector<float> rows_with_spread_scales(uint32_t stream) {
  test::Rng rng(11, stream);
  std::vector<float> x = rng.normal(kRows * kCols);
  for (size_t r = 0; r < kRows; ++r)
    for (size_t c = 0; c < kCols; ++c) x[r * kCols + c] *= std::ldexp(1.0f, int(r % 9) - 4);  // 2^-4 .. 2^4
  return x;
}

float row_amax(const std::vector<float>& x, size_t r) {
  float m = 0;
  for (size_t c = 0; c < kCols; ++c) m = std::max(m, std::fabs(x[r * kCols + c]));
  return m;
}

TEST(Int8Quant, ToNearestIsWithinHalfAStep) {
  const auto x = rows_with_spread_scales(1);
  std::vector<int8_t> q(x.size());
  std::vector<float> s(kRows), back(x.size());
  quantize_int8_rows(x.data(), kRows, kCols, q.data(), s.data());
  dequantize_int8_rows(q.data(), s.data(), kRows, kCols, back.data());
  for (size_t r = 0; r < kRows; ++r) {
    const float amax = row_amax(x, r);
    EXPECT_EQ(s[r], amax / 127.0f);
    int top = 0;
    for (size_t c = 0; c < kCols; ++c) {
      const size_t i = r * kCols + c;
      ASSERT_GE(q[i], -127);
      top = std::max(top, std::abs(int(q[i])));
      EXPECT_EQ(back[i], float(q[i]) * s[r]);
      // Half a step, plus the relative error of the two fp32 roundings in x * (127 / amax) and of the scale.
      EXPECT_LE(std::fabs(back[i] - x[i]), 0.5f * s[r] + 4e-7f * amax) << r << "," << c;
    }
    EXPECT_EQ(top, 127) << "the largest magnitude maps to 127";
  }
}

TEST(Int8Quant, DitheredIsWithinOneStepAndReproducible) {
  const auto x = rows_with_spread_scales(2);
  std::vector<int8_t> q(x.size()), again(x.size()), other(x.size());
  std::vector<float> s(kRows), s2(kRows);
  const DitherKey key{42, 3, 1000, 77};
  quantize_int8_rows_dithered(x.data(), kRows, kCols, key, q.data(), s.data());
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);  // one thread or several: the draws belong to positions, not to threads
  quantize_int8_rows_dithered(x.data(), kRows, kCols, key, again.data(), s2.data());
  omp_set_num_threads(threads);
  EXPECT_EQ(q, again);
  EXPECT_EQ(s, s2);
  for (size_t r = 0; r < kRows; ++r)
    for (size_t c = 0; c < kCols; ++c) {
      const size_t i = r * kCols + c;
      ASSERT_GE(q[i], -127);
      EXPECT_LT(std::fabs(float(q[i]) * s[r] - x[i]), s[r] * (1 + 1e-6f)) << r << "," << c;
    }
  // Each field of the key changes the draws.
  for (DitherKey k : {DitherKey{43, 3, 1000, 77}, DitherKey{42, 4, 1000, 77}, DitherKey{42, 3, 1001, 77},
                      DitherKey{42, 3, 1000, 78}}) {
    quantize_int8_rows_dithered(x.data(), kRows, kCols, k, other.data(), s2.data());
    size_t differ = 0;
    for (size_t i = 0; i < q.size(); ++i) differ += q[i] != other[i];
    EXPECT_GT(differ, q.size() / 4) << k.seed << " " << k.rank << " " << k.step << " " << k.stream;
  }
}

// Over N draws (steps) of the same row, the mean dequantized error of each element is within 4 standard errors of 0
// (a dithered value is one of two neighbours, so its standard deviation is at most half a step). Rounding to nearest
// fails the same check: its error is the same every time.
TEST(Int8Quant, DitheringIsUnbiased) {
  constexpr int N = 4000;
  test::Rng rng(5, 3);
  std::vector<float> x = rng.normal(64);
  x[0] = 3.0f;  // the row's scale: 3 / 127
  std::vector<double> sum(x.size()), sum_nearest(x.size());
  std::vector<int8_t> q(x.size());
  float s = 0;
  for (int step = 0; step < N; ++step) {
    quantize_int8_rows_dithered(x.data(), 1, x.size(), DitherKey{9, 0, uint32_t(step), 5}, q.data(), &s);
    for (size_t c = 0; c < x.size(); ++c) sum[c] += double(q[c]) * s - x[c];
  }
  quantize_int8_rows(x.data(), 1, x.size(), q.data(), &s);
  const double bound = 4 * 0.5 * s / std::sqrt(double(N));
  int nearest_biased = 0;
  for (size_t c = 1; c < x.size(); ++c) {
    EXPECT_LT(std::fabs(sum[c] / N), bound) << "element " << c << " = " << x[c];
    nearest_biased += std::fabs(double(q[c]) * s - x[c]) > bound;
  }
  EXPECT_GT(nearest_biased, 48) << "rounding to nearest should fail this check for most elements";
}

TEST(Int8Quant, UniformsCoverTheUnitInterval) {
  const DitherKey key{1, 2, 3, 4};
  double sum = 0;
  constexpr int N = 100000;
  for (int i = 0; i < N; ++i) {
    const float u = dither_uniform(key, uint64_t(i));
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    sum += u;
  }
  EXPECT_NEAR(sum / N, 0.5, 4 * std::sqrt(1.0 / 12 / N));
}

TEST(Int8Quant, EdgeRows) {
  const float tiny = 1e-42f;  // a subnormal: 127 / tiny overflows
  std::vector<float> x = {0, 0, 0, 0, 1, NAN, 2, 3, 1, INFINITY, 2, 3, tiny, -tiny, 0, 0, -5, 0, 0, 5};
  std::vector<int8_t> q(x.size(), 9);
  std::vector<float> s(5);
  quantize_int8_rows(x.data(), 5, 4, q.data(), s.data());
  EXPECT_EQ(s[0], 0.0f);
  EXPECT_TRUE(std::isnan(s[1]));
  EXPECT_TRUE(std::isnan(s[2]));
  EXPECT_EQ(s[3], 0.0f);
  EXPECT_EQ(s[4], 5.0f / 127);
  for (size_t i = 0; i < 16; ++i) EXPECT_EQ(q[i], 0) << i;
  EXPECT_EQ(q[16], -127);
  EXPECT_EQ(q[19], 127);
  quantize_int8_rows_dithered(x.data(), 5, 4, DitherKey{}, q.data(), s.data());
  EXPECT_TRUE(std::isnan(s[1]));
  for (size_t i = 0; i < 16; ++i) EXPECT_EQ(q[i], 0) << i;
  EXPECT_EQ(q[16], -127);
  EXPECT_EQ(q[19], 127);
}

TEST(Int8Quant, ColumnsAreTheRowsOfTheTranspose) {
  const auto x = rows_with_spread_scales(4);
  std::vector<float> xt(x.size());
  for (size_t r = 0; r < kRows; ++r)
    for (size_t c = 0; c < kCols; ++c) xt[c * kRows + r] = x[r * kCols + c];
  std::vector<int8_t> q(x.size()), qt(x.size());
  std::vector<float> s(kCols), st(kCols);
  quantize_int8_columns(x.data(), kRows, kCols, q.data(), s.data());
  quantize_int8_rows(xt.data(), kCols, kRows, qt.data(), st.data());
  EXPECT_EQ(s, st);
  for (size_t r = 0; r < kRows; ++r)
    for (size_t c = 0; c < kCols; ++c) ASSERT_EQ(q[r * kCols + c], qt[c * kRows + r]) << r << "," << c;
}

// The dithered column form, from its definition: each column's scale is the nearest form's, and element (r, c) is
// floor(x * (127 / max|column|) + u), u the key's uniform of index first + r * cols + c, for any thread count; so a
// tile of rows quantized with first = its offset draws what those positions of the whole tensor would.
TEST(Int8Quant, DitheredColumnsDrawByPosition) {
  const auto x = rows_with_spread_scales(6);
  const DitherKey key{7, 1, 55, 9};
  const uint64_t first = 1000003;
  std::vector<int8_t> q(x.size()), again(x.size()), nearest(x.size());
  std::vector<float> s(kCols), s2(kCols), sn(kCols);
  quantize_int8_columns_dithered(x.data(), kRows, kCols, key, first, q.data(), s.data());
  quantize_int8_columns(x.data(), kRows, kCols, nearest.data(), sn.data());
  EXPECT_EQ(s, sn);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  quantize_int8_columns_dithered(x.data(), kRows, kCols, key, first, again.data(), s2.data());
  omp_set_num_threads(threads);
  EXPECT_EQ(q, again);
  size_t differ = 0;
  for (size_t i = 0; i < x.size(); ++i) differ += q[i] != nearest[i];
  // (a quarter here: the rows span 2^-4 .. 2^4, so a column's small rows round to 0 either way)
  EXPECT_GT(differ, x.size() / 8) << "dithering must round many values away from the nearest";
  // Definitional check on a few columns: the largest magnitude of a column sets 127 / amax.
  for (size_t c : {size_t(0), size_t(1), kCols / 2, kCols - 1}) {
    float amax = 0;
    for (size_t r = 0; r < kRows; ++r) amax = std::max(amax, std::fabs(x[r * kCols + c]));
    const float inverse = 127.0f / amax;
    for (size_t r = 0; r < kRows; ++r) {
      volatile float y = x[r * kCols + c] * inverse;
      const float want = std::clamp(std::floor(y + dither_uniform(key, first + r * kCols + c)), -127.0f, 127.0f);
      ASSERT_EQ(float(q[r * kCols + c]), want) << r << "," << c;
    }
  }
}

}  // namespace
}  // namespace ember
