// The async center's outer optimizer: it folds the workers' deltas (each the change a worker's local steps made, the
// negative of a pseudo-gradient) into the global parameters with Nesterov momentum, weighting each delta by its share
// of a sync step's tokens and down-weighting stale ones. The counterpart of AdamW for the center.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "train/run_config.h"

namespace ember {

// The weight of one delta of `tokens` tokens among `workers` deltas per round, a full round being `round_tokens`
// tokens (async.local_steps x grad_accum_steps x batch_size x seq_len): tokens / round_tokens / sqrt(workers),
// divided by 1 + k where k is how many versions the delta's base is staler than a round-robin of the workers implies
// anyway (workers - 1). The share is 1 / sqrt(workers), not 1 / workers: each worker's AdamW normalises gradients
// sqrt(workers) times noisier than sync's, so the mean of the deltas moves sqrt(workers) times too little along the
// direction they share (docs/async-experiments.md).
float outer_weight(uint64_t tokens, uint64_t staleness, int workers, double round_tokens);

class OuterOptimizer {
 public:
  // n parameters; async.outer_lr and async.outer_momentum.
  OuterOptimizer(size_t n, const AsyncConfig& config);

  // Starts a new version: the weighted sum of deltas becomes zero.
  void begin_version();
  // Adds weight x delta (n values) to the sum.
  void add_delta(const float* delta, float weight);
  // Applies the sum to `params` (n values): momentum = mu momentum + sum, update = lr (sum + mu momentum),
  // params += update. `update` (n values) receives what was added, for the workers to fetch.
  void apply(float* params, float* update);

  // The momentum buffer (n values), for checkpoints.
  std::vector<float>& momentum() { return momentum_; }
  const std::vector<float>& momentum() const { return momentum_; }

 private:
  float lr_, mu_;
  std::vector<float> sum_;       // (n) the weighted deltas of this version
  std::vector<float> momentum_;  // (n)
};

}  // namespace ember
