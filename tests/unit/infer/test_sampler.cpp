// The sampler: greedy, top-k and top-p choices, and the frequencies of its draws against the distribution.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "infer/sampler.h"

namespace ember {
namespace {

TEST(Sampler, GreedyTopKAndTopPChooseTheMostLikely) {
  Sampler s;
  const std::vector<float> logits = {0.5f, 2.0f, 2.0f, -1.0f, 1.0f};
  SamplingParams greedy{0.0f, 0, 1.0f, 1};
  EXPECT_EQ(s.sample(logits.data(), 5, greedy, 0), 1);  // ties go to the lower id
  EXPECT_EQ(s.sample(logits.data(), 1, greedy, 0), 0);  // only the first candidate
  for (uint64_t i = 0; i < 50; ++i) {
    EXPECT_EQ(s.sample(logits.data(), 5, SamplingParams{1.0f, 1, 1.0f, i}, i), 1);
    EXPECT_EQ(s.sample(logits.data(), 5, SamplingParams{1.0f, 0, 1e-6f, i}, i), 1);
    const int32_t t = s.sample(logits.data(), 5, SamplingParams{1.0f, 2, 1.0f, i}, i);
    EXPECT_TRUE(t == 1 || t == 2);
  }
}

TEST(Sampler, FrequenciesFollowTheDistribution) {
  // p = (0.5, 0.3, 0.15, 0.05). Plain sampling, top_k = 2 (renormalised 0.625, 0.375) and top_p = 0.9 (the first
  // three, renormalised over 0.95). 20000 draws: a frequency's standard deviation is at most 0.0036, so 0.015 is
  // over 4 sigma.
  Sampler s;
  const std::vector<double> p = {0.5, 0.3, 0.15, 0.05};
  std::vector<float> logits;
  for (double x : p) logits.push_back(float(std::log(x)));
  auto freq = [&](SamplingParams params) {
    std::vector<double> f(4, 0.0);
    for (uint64_t i = 0; i < 20000; ++i) f[size_t(s.sample(logits.data(), 4, params, i))] += 1.0 / 20000;
    return f;
  };
  const std::vector<double> plain = freq(SamplingParams{1.0f, 0, 1.0f, 3});
  for (int j = 0; j < 4; ++j) EXPECT_NEAR(plain[size_t(j)], p[size_t(j)], 0.015) << j;
  const std::vector<double> topk = freq(SamplingParams{1.0f, 2, 1.0f, 4});
  EXPECT_NEAR(topk[0], 0.625, 0.015);
  EXPECT_NEAR(topk[1], 0.375, 0.015);
  EXPECT_EQ(topk[2] + topk[3], 0.0);
  const std::vector<double> topp = freq(SamplingParams{1.0f, 0, 0.9f, 5});
  for (int j = 0; j < 3; ++j) EXPECT_NEAR(topp[size_t(j)], p[size_t(j)] / 0.95, 0.015) << j;
  EXPECT_EQ(topp[3], 0.0);
  // Temperature 0.5 squares the odds: p^2 normalised.
  const std::vector<double> cold = freq(SamplingParams{0.5f, 0, 1.0f, 6});
  double z = 0.0;
  for (double x : p) z += x * x;
  for (int j = 0; j < 4; ++j) EXPECT_NEAR(cold[size_t(j)], p[size_t(j)] * p[size_t(j)] / z, 0.015) << j;
  // The same seed and index give the same token; the seed matters.
  std::vector<int32_t> a, b, c;
  for (uint64_t i = 0; i < 64; ++i) {
    a.push_back(s.sample(logits.data(), 4, SamplingParams{1.0f, 0, 1.0f, 7}, i));
    b.push_back(s.sample(logits.data(), 4, SamplingParams{1.0f, 0, 1.0f, 7}, i));
    c.push_back(s.sample(logits.data(), 4, SamplingParams{1.0f, 0, 1.0f, 8}, i));
  }
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

}  // namespace
}  // namespace ember
