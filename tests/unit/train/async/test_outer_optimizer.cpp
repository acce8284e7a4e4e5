// The async center's outer optimizer against a float64 reference of Nesterov momentum on weighted deltas, over several
// versions with positive and negative momentum, and the staleness weighting of a delta. Inputs come from Philox.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/philox.h"
#include "train/async/outer_optimizer.h"

namespace ember {
namespace {

constexpr uint64_t kSeed = 20261123;
constexpr double kEps = 1.1920928955078125e-7;  // fp32 machine epsilon, 2^-23

std::vector<float> normal(Philox& rng, size_t n, float scale) {
  std::vector<float> v(n);
  for (float& x : v) x = scale * rng.normal();
  return v;
}

// Runs `versions` versions of `deltas` deltas each through the optimizer and a float64 reference of the same rule:
// g = sum w_k d_k, m = mu m + g, u = lr (g + mu m), x += u. Every value is a short sum of O(1) terms in fp32, so the
// fp32 results stay within a few units of fp32 rounding of the reference, relative to the scale of the values:
// |got - ref| <= 32 eps (|ref| + 1), with a margin for the error the momentum carries over 6 versions.
void check_against_reference(float lr, float mu) {
  const size_t n = 1001;  // not a multiple of any vector width
  const int versions = 6, deltas = 3;
  AsyncConfig config;
  config.outer_lr = lr;
  config.outer_momentum = mu;
  OuterOptimizer outer(n, config);
  Philox rng(kSeed, 0, 1, RNG_PURPOSE_TEST);
  std::vector<float> x = normal(rng, n, 1.0f), update(n);
  std::vector<double> xr(x.begin(), x.end()), mr(n, 0.0), ur(n, 0.0);
  for (int v = 0; v < versions; ++v) {
    outer.begin_version();
    std::vector<double> g(n, 0.0);
    for (int k = 0; k < deltas; ++k) {
      const std::vector<float> d = normal(rng, n, 0.01f);
      const float w = 0.2f + 0.1f * float(k);
      outer.add_delta(d.data(), w);
      for (size_t i = 0; i < n; ++i) g[i] += double(w) * double(d[i]);
    }
    outer.apply(x.data(), update.data());
    for (size_t i = 0; i < n; ++i) {
      mr[i] = double(mu) * mr[i] + g[i];
      ur[i] = double(lr) * (g[i] + double(mu) * mr[i]);
      xr[i] += ur[i];
    }
    int bad = 0;
    for (size_t i = 0; i < n; ++i) {
      bad += std::fabs(double(x[i]) - xr[i]) > 32 * kEps * (std::fabs(xr[i]) + 1.0);
      bad += std::fabs(double(update[i]) - ur[i]) > 32 * kEps * (std::fabs(ur[i]) + 0.01);
      bad += std::fabs(double(outer.momentum()[i]) - mr[i]) > 32 * kEps * (std::fabs(mr[i]) + 0.01);
    }
    ASSERT_EQ(bad, 0) << "version " << v << " (lr " << lr << ", momentum " << mu << ")";
  }
}

TEST(OuterOptimizer, NesterovMomentumMatchesTheFloat64Reference) {
  check_against_reference(1.3f, -0.4f);  // the default: negative momentum damps the staleness
  check_against_reference(0.7f, 0.9f);
  check_against_reference(1.0f, 0.0f);  // plain weighted averaging
}

TEST(OuterOptimizer, NoDeltasLeaveParametersWhereMomentumTakesThem) {
  AsyncConfig config;
  config.outer_lr = 1.0f;
  config.outer_momentum = 0.5f;
  OuterOptimizer outer(2, config);
  std::vector<float> x = {1.0f, -2.0f}, u(2);
  const float d[2] = {0.5f, 0.25f};
  outer.begin_version();
  outer.add_delta(d, 1.0f);
  outer.apply(x.data(), u.data());  // m = d, u = d + 0.5 d = 1.5 d
  EXPECT_FLOAT_EQ(x[0], 1.75f);
  EXPECT_FLOAT_EQ(x[1], -1.625f);
  outer.begin_version();  // an empty version still moves by momentum: m = 0.5 d, u = 0.25 d
  outer.apply(x.data(), u.data());
  EXPECT_FLOAT_EQ(u[0], 0.125f);
  EXPECT_FLOAT_EQ(x[0], 1.875f);
  EXPECT_FLOAT_EQ(outer.momentum()[1], 0.125f);
}

TEST(OuterOptimizer, WeightIsTheTokenShareDividedByExtraStaleness) {
  const double round = 8.0 * 2 * 4 * 64;  // H x A x B x T
  // A full round among 4 workers counts 1 / sqrt(4), at any staleness up to workers - 1 = 3.
  for (uint64_t staleness : {0, 1, 3}) EXPECT_FLOAT_EQ(outer_weight(uint64_t(round), staleness, 4, round), 0.5f);
  EXPECT_FLOAT_EQ(outer_weight(uint64_t(round), 4, 4, round), 0.25f);  // one extra version: halved
  EXPECT_FLOAT_EQ(outer_weight(uint64_t(round), 6, 4, round), 0.125f);
  EXPECT_FLOAT_EQ(outer_weight(uint64_t(round / 2), 0, 4, round), 0.25f);  // a half round (the run's tail)
  EXPECT_FLOAT_EQ(outer_weight(uint64_t(round), 0, 1, round), 1.0f);       // one worker: its delta whole
  EXPECT_FLOAT_EQ(outer_weight(uint64_t(round), 0, 2, round), float(1.0 / std::sqrt(2.0)));
}

}  // namespace
}  // namespace ember
