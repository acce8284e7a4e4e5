// Sampling (implementation): candidates ordered by logit where top-k or top-p needs an order, probabilities in fp64
// relative to the largest logit, and one uniform draw from Philox keyed by (seed, token index).
#include "infer/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/philox.h"

namespace ember {

int32_t Sampler::sample(const float* logits, int candidates, const SamplingParams& params, uint64_t index) {
  EMBER_ASSERT(candidates >= 1, "sampling needs at least one candidate");
  // More likely first; equal logits by lower id, so every order below is total and the result reproducible.
  auto before = [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  if (params.temperature <= 0.0f) {
    int best = 0;
    for (int i = 1; i < candidates; ++i)
      if (before(i, best)) best = i;
    return best;
  }
  const int k = params.top_k > 0 ? std::min(params.top_k, candidates) : candidates;
  const bool nucleus = params.top_p < 1.0f;
  order_.resize(size_t(candidates));
  std::iota(order_.begin(), order_.end(), 0);
  if (k < candidates || nucleus) std::partial_sort(order_.begin(), order_.begin() + k, order_.end(), before);
  float top = logits[order_[0]];
  if (k == candidates && !nucleus)
    for (int i = 1; i < candidates; ++i) top = std::max(top, logits[i]);
  probs_.resize(size_t(k));
  double total = 0.0;
  for (int j = 0; j < k; ++j) total += probs_[j] = std::exp(double(logits[order_[j]] - top) / params.temperature);
  int n = k;
  if (nucleus) {  // the smallest prefix of the order whose probability reaches top_p (at least one token)
    const double target = double(params.top_p) * total;
    double sum = 0.0;
    for (n = 0; n < k;) {
      sum += probs_[n++];
      if (sum >= target) break;
    }
    total = sum;
  }
  Philox rng(params.seed, uint32_t(index >> 32), uint32_t(index), RNG_PURPOSE_SAMPLE);
  double u = rng.uniform_double() * total;
  for (int j = 0; j < n; ++j) {
    if ((u -= probs_[j]) < 0.0) return order_[j];
  }
  return order_[n - 1];  // u within rounding of the total
}

}  // namespace ember
