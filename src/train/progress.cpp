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

std::string format_hms(double seconds) {
  const int s = int(seconds);
  char buf[32];
  snprintf(buf, sizeof(buf), "%02d:%02d:%02d", s / 3600, s / 60 % 60, s % 60);
  return buf;
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
