// Progress reporting (implementation).
#include "train/progress.h"

#include <csignal>
#include <cstdio>

#include "core/log.h"
#include "train/signals.h"

namespace ember {

void StepClock::record(int64_t step, double dt) {
  last_ = dt;
  if (step > first_step_ + 1 || total_steps_ - first_step_ == 1) {
    sum_ += dt;
    ++timed_;
  }
}

void log_stopped_early(int64_t step) {
  const int sig = stop_signal_received();
  log_info("stopping early at step %lld (%s): checkpoint written; rerun with --resume auto to continue",
           (long long)step,
           sig == SIGUSR1   ? "SIGUSR1"
           : sig == SIGTERM ? "SIGTERM"
                            : "stop request or --max-runtime");
}

}  // namespace ember
