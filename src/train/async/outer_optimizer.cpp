// The async center's outer optimizer (implementation): plain fp32 loops over the arena, split among OpenMP threads.
#include "train/async/outer_optimizer.h"

#include <algorithm>
#include <cmath>

namespace ember {

float outer_weight(uint64_t tokens, uint64_t staleness, int workers, double round_tokens) {
  const uint64_t expected = uint64_t(workers - 1);
  const double extra = staleness > expected ? double(staleness - expected) : 0.0;
  return float(double(tokens) / round_tokens / std::sqrt(double(workers)) / (1.0 + extra));
}

OuterOptimizer::OuterOptimizer(size_t n, const AsyncConfig& config)
    : lr_(config.outer_lr), mu_(config.outer_momentum), sum_(n, 0.0f), momentum_(n, 0.0f) {}

void OuterOptimizer::begin_version() { std::fill(sum_.begin(), sum_.end(), 0.0f); }

void OuterOptimizer::add_delta(const float* delta, float weight) {
  float* g = sum_.data();
  const size_t n = sum_.size();
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) g[i] += weight * delta[i];
}

void OuterOptimizer::apply(float* params, float* update) {
  const float lr = lr_, mu = mu_;
  const float* g = sum_.data();
  float* m = momentum_.data();
  const size_t n = sum_.size();
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) {
    m[i] = mu * m[i] + g[i];
    update[i] = lr * (g[i] + mu * m[i]);
    params[i] += update[i];
  }
}

}  // namespace ember
