// fp8 quantization with one scale per tensor (core/fp8_quant.h) from its definition: the scale is max|x| / M, each code
// is the conversion of the fp32 product x * (M / max|x|), the largest magnitude lands on the largest finite code, the
// dequantized values lie within half a step of x, and the edge cases (zeros, NaN, infinity) give the stated scales;
// widen_fp8 gives every code's value; the unscaled cast is the plain conversion.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/fp8_quant.h"
#include "test_rng.h"

namespace ember {
namespace {

class Fp8Quant : public ::testing::TestWithParam<Fp8Format> {};

TEST_P(Fp8Quant, TensorScaleAndCodesFollowTheDefinition) {
  const Fp8Format f = GetParam();
  const Fp8Limits l = fp8_limits(f);
  test::Rng rng(3, 1);
  for (float spread : {1e-4f, 1.0f, 3e3f}) {
    std::vector<float> x = rng.normal(5000, spread);
    x[1234] = -7.5f * spread;  // the largest magnitude, negative
    std::vector<uint8_t> q(x.size());
    const float s = quantize_fp8_tensor(x.data(), x.size(), f, q.data());
    EXPECT_EQ(s, 7.5f * spread / l.max_finite) << spread;
    const float inverse = l.max_finite / (7.5f * spread);
    EXPECT_EQ(q[1234], uint8_t(0x80 | l.max_finite_bits)) << "the largest magnitude takes the largest code";
    // Half a step of the format around each value: 2^-(mantissa_bits + 1) relative for normals, half the smallest
    // subnormal below them; plus the fp32 rounding of x * inverse (2^-24 relative) carried through.
    const float min_normal = std::ldexp(1.0f, 1 - l.bias);
    for (size_t i = 0; i < x.size(); ++i) {
      volatile float y = x[i] * inverse;  // rounded once, as the scheme rounds it
      ASSERT_EQ(q[i], to_fp8(y, f)) << i;
      const double back = double(from_fp8(q[i], f)) * s, ax = std::fabs(double(x[i]));
      const double yabs = std::fabs(double(y));
      const double half_step = yabs >= min_normal ? std::ldexp(yabs, -l.mantissa_bits - 1) : l.min_subnormal / 2;
      EXPECT_LE(std::fabs(back - x[i]), (half_step + yabs * 0x1p-23) * s + ax * 0x1p-22) << i << " of " << spread;
    }
  }
}

TEST_P(Fp8Quant, ZerosNanAndInfinityGetTheirStatedScales) {
  const Fp8Format f = GetParam();
  std::vector<float> x(300, 0.0f);
  std::vector<uint8_t> q(x.size(), 0x55);
  EXPECT_EQ(quantize_fp8_tensor(x.data(), x.size(), f, q.data()), 0.0f);
  EXPECT_EQ(q, std::vector<uint8_t>(x.size(), 0));
  for (float bad : {NAN, INFINITY, -INFINITY}) {
    x.assign(300, 0.5f);
    x[77] = bad;
    std::fill(q.begin(), q.end(), 0x55);
    EXPECT_TRUE(std::isnan(quantize_fp8_tensor(x.data(), x.size(), f, q.data()))) << bad;
    EXPECT_EQ(q, std::vector<uint8_t>(x.size(), 0)) << bad;
  }
}

TEST_P(Fp8Quant, WidenGivesEveryCodesValueAndUnscaledIsTheConversion) {
  const Fp8Format f = GetParam();
  std::vector<uint8_t> codes(256);
  for (int b = 0; b < 256; ++b) codes[size_t(b)] = uint8_t(b);
  std::vector<float> values(256);
  widen_fp8(codes.data(), codes.size(), f, values.data());
  for (int b = 0; b < 256; ++b) {
    const float want = from_fp8(uint8_t(b), f);
    if (std::isnan(want))
      EXPECT_TRUE(std::isnan(values[size_t(b)])) << b;
    else
      EXPECT_EQ(values[size_t(b)], want) << b;
  }
  test::Rng rng(4, 2);
  const std::vector<float> x = rng.normal(1000, 0.01f);
  std::vector<uint8_t> q(x.size());
  EXPECT_EQ(quantize_fp8_unscaled(x.data(), x.size(), f, q.data()), 1.0f);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(q[i], to_fp8(x[i], f)) << i;
}

INSTANTIATE_TEST_SUITE_P(Formats, Fp8Quant, ::testing::Values(Fp8Format::e4m3, Fp8Format::e5m2),
                         [](const auto& info) { return std::string(fp8_format_name(info.param)); });

}  // namespace
}  // namespace ember
