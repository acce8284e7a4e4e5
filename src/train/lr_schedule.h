// Learning-rate schedule: linear warm-up to the peak, then cosine decay to a floor at the last step.
// A pure function of the step, so a resumed run needs no saved scheduler state.
#pragma once

#include <algorithm>
#include <cmath>

namespace ember {

// Learning rate for optimizer step `step` (0-based) of `total_steps`.
inline float lr_at_step(int step, int total_steps, int warmup_steps, float lr, float min_lr) {
  if (step < warmup_steps) return lr * float(step + 1) / float(warmup_steps);
  const int decay_steps = std::max(1, total_steps - warmup_steps);
  const double progress = std::min(1.0, double(step - warmup_steps) / double(decay_steps));
  return float(min_lr + 0.5 * (1.0 + std::cos(M_PI * progress)) * (lr - min_lr));
}

}  // namespace ember
