// Progress reporting every kind of run shares: the time of the steps of this invocation (the first left out of the
// average: it pays for page faults and thread start-up), the ETA, and the stop-early message.
#pragma once

#include <cstdint>
#include <string>

#include "core/timer.h"

namespace ember {

class StepClock {
 public:
  // first_step: the step this invocation starts from; total_steps: training.steps.
  StepClock(int64_t first_step, int total_steps) : first_step_(first_step), total_steps_(total_steps) {}

  // Records that step `step` (1-based, counted over the whole run) took dt seconds.
  void record(int64_t step, double dt);
  // Mean seconds per step so far (the last dt while only the first step has run).
  double mean_seconds() const { return timed_ > 0 ? sum_ / double(timed_) : last_; }
  int64_t timed_steps() const { return timed_; }
  // Wall time left at `step`: the mean step time times the steps still to go.
  double eta_seconds(int64_t step) const { return mean_seconds() * double(total_steps_ - step); }

 private:
  int64_t first_step_;
  int total_steps_;
  double sum_ = 0.0, last_ = 0.0;
  int64_t timed_ = 0;
};

// Logs that the run stopped at `step` before training.steps, after writing its checkpoint, naming the signal that
// asked for it (stop_signal_received) when there was one.
void log_stopped_early(int64_t step);

}  // namespace ember
