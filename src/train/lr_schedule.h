// Learning-rate schedule: linear warm-up to the peak, then cosine decay to a floor at the last step.
// A pure function of the step, so a resumed run needs no saved scheduler state.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "train/run_config.h"

namespace ember {

// Learning rate for optimizer step `step` (0-based) of training.steps: optimizer.warmup_steps of warm-up to
// optimizer.lr, then cosine decay to optimizer.min_lr.
inline float lr_at_step(const RunConfig& config, int64_t step) {
  const int total_steps = config.training.steps, warmup_steps = config.optimizer.warmup_steps;
  const float lr = config.optimizer.lr, min_lr = config.optimizer.min_lr;
  if (step < warmup_steps) return lr * float(step + 1) / float(warmup_steps);
  const int64_t decay_steps = std::max(1, total_steps - warmup_steps);
  const double progress = std::min(1.0, double(step - warmup_steps) / double(decay_steps));
  return float(min_lr + 0.5 * (1.0 + std::cos(M_PI * progress)) * (lr - min_lr));
}

}  // namespace ember
