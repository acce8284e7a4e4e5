// fp8 E4M3 and E5M2 against tables built here from the formats' definitions: every code decodes to its value,
// every finite value converts back to its code, midpoints go to the even code, random floats go to the nearest
// table entry, and the edges (saturation, infinities, NaN, signed zero, subnormals) behave as CUDA's SATFINITE.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/fp8.h"
#include "test_rng.h"

namespace ember {
namespace {

struct Entry {
  uint8_t bits;
  double value;
};

// The non-negative finite values of a format, ascending, from the definition: value = 2^(e - bias) * (1 + m / 2^M)
// for a biased exponent e > 0, 2^(1 - bias) * m / 2^M for e = 0; E4M3 spends only S.1111.111 on NaN, E5M2 the whole
// top exponent on infinities and NaNs.
std::vector<Entry> finite_table(Fp8Format f) {
  const int E = f == Fp8Format::e4m3 ? 4 : 5, M = f == Fp8Format::e4m3 ? 3 : 2, bias = (1 << (E - 1)) - 1;
  std::vector<Entry> t;
  for (int bits = 0; bits < 128; ++bits) {
    const int e = bits >> M, m = bits & ((1 << M) - 1);
    if (f == Fp8Format::e4m3 && e == 15 && m == 7) continue;
    if (f == Fp8Format::e5m2 && e == 31) continue;
    const double frac = double(m) / double(1 << M);
    t.push_back({uint8_t(bits), e == 0 ? std::pow(2.0, 1 - bias) * frac : std::pow(2.0, e - bias) * (1 + frac)});
  }
  return t;
}

class Fp8 : public ::testing::TestWithParam<Fp8Format> {};

TEST_P(Fp8, EveryCodeDecodesAndRoundTrips) {
  const Fp8Format f = GetParam();
  const auto table = finite_table(f);
  ASSERT_EQ(table.size(), f == Fp8Format::e4m3 ? 127u : 124u);
  for (const Entry& e : table) {
    for (uint8_t sign : {uint8_t(0), uint8_t(0x80)}) {
      const uint8_t bits = e.bits | sign;
      const double want = sign ? -e.value : e.value;
      EXPECT_EQ(double(from_fp8(bits, f)), want) << int(bits);
      EXPECT_EQ(to_fp8(from_fp8(bits, f), f), bits) << int(bits);
    }
  }
  const Fp8Limits l = fp8_limits(f);
  EXPECT_EQ(double(l.max_finite), table.back().value);
  EXPECT_EQ(l.max_finite_bits, table.back().bits);
  EXPECT_EQ(double(l.min_subnormal), table[1].value);
  EXPECT_TRUE(std::isnan(from_fp8(l.nan_bits, f)));
  EXPECT_TRUE(std::isnan(from_fp8(l.nan_bits | 0x80, f)));
  if (f == Fp8Format::e5m2) {
    EXPECT_EQ(from_fp8(0x7c, f), INFINITY);
    EXPECT_EQ(from_fp8(0xfc, f), -INFINITY);
  }
}

TEST_P(Fp8, MidpointsGoToTheEvenCodeAndNeighboursToTheNearest) {
  const Fp8Format f = GetParam();
  const auto table = finite_table(f);
  for (size_t i = 0; i + 1 < table.size(); ++i) {
    const double lo = table[i].value, hi = table[i + 1].value, mid = (lo + hi) / 2;
    const float midf = float(mid);
    ASSERT_EQ(double(midf), mid);  // every fp8 midpoint is an fp32 value
    const uint8_t even = (table[i].bits & 1) == 0 ? table[i].bits : table[i + 1].bits;
    EXPECT_EQ(to_fp8(midf, f), even) << "midpoint of " << lo << " and " << hi;
    EXPECT_EQ(to_fp8(-midf, f), even | 0x80) << "midpoint of " << -lo << " and " << -hi;
    EXPECT_EQ(to_fp8(std::nextafter(midf, 0.0f), f), table[i].bits) << "just below " << mid;
    EXPECT_EQ(to_fp8(std::nextafter(midf, INFINITY), f), table[i + 1].bits) << "just above " << mid;
  }
}

TEST_P(Fp8, RandomValuesGoToTheNearestEntry) {
  const Fp8Format f = GetParam();
  const auto table = finite_table(f);
  test::Rng rng(7, uint32_t(f));
  const double top = table.back().value;
  for (int n = 0; n < 200000; ++n) {
    // Magnitudes spread over every binade, from below half the smallest subnormal to past the largest value.
    const int lowest = f == Fp8Format::e4m3 ? -16 : -22, binades = f == Fp8Format::e4m3 ? 30 : 42;
    const double magnitude = std::ldexp(1.0 + rng.philox.uniform(), lowest + int(rng.philox.below(binades)));
    const float x = float(rng.philox.uniform() < 0.5f ? -magnitude : magnitude);
    const double a = std::fabs(double(x));
    size_t best = 0;
    for (size_t i = 1; i < table.size(); ++i)
      if (std::fabs(table[i].value - a) < std::fabs(table[best].value - a)) best = i;  // ties: mid tests cover them
    const uint8_t want = (a >= top ? table.back().bits : table[best].bits) | (x < 0 ? 0x80 : 0);
    ASSERT_EQ(to_fp8(x, f), want) << x;
  }
}

TEST_P(Fp8, EdgesSaturateAndKeepNaNAndZeroSigns) {
  const Fp8Format f = GetParam();
  const Fp8Limits l = fp8_limits(f);
  for (float big : {l.max_finite, l.max_finite * 1.01f, l.max_finite * 1000.0f, 3.0e38f, INFINITY}) {
    EXPECT_EQ(to_fp8(big, f), l.max_finite_bits) << big;
    EXPECT_EQ(to_fp8(-big, f), l.max_finite_bits | 0x80) << -big;
  }
  EXPECT_TRUE(std::isnan(round_to_fp8(NAN, f)));
  EXPECT_TRUE(std::isnan(round_to_fp8(-NAN, f)));
  EXPECT_EQ(to_fp8(0.0f, f), 0x00);
  EXPECT_EQ(to_fp8(-0.0f, f), 0x80);
  // Half the smallest subnormal is a tie between 0 and it: to 0 (even); anything above goes up.
  EXPECT_EQ(to_fp8(l.min_subnormal / 2, f), 0x00);
  EXPECT_EQ(to_fp8(std::nextafter(l.min_subnormal / 2, 1.0f), f), 0x01);
  EXPECT_EQ(to_fp8(1e-30f, f), 0x00);
  EXPECT_EQ(to_fp8(-1e-30f, f), 0x80);
  EXPECT_EQ(to_fp8(1.0f, f), f == Fp8Format::e4m3 ? 0x38 : 0x3c);
}

INSTANTIATE_TEST_SUITE_P(Formats, Fp8, ::testing::Values(Fp8Format::e4m3, Fp8Format::e5m2),
                         [](const auto& info) { return std::string(fp8_format_name(info.param)); });

}  // namespace
}  // namespace ember
