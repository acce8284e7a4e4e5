// An async invocation's limits (--stop-after, --max-runtime) over its passes: a join barrier ends a pass, and the next
// starts again from that barrier's checkpoint, so each pass gets what the earlier ones left. The run folder's start
// (on_start) is the first pass's alone: it is collective over the first launch's ranks, some of which may be gone by
// then (a dropped worker), and the run state says "running" since.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <utility>

#include "core/timer.h"
#include "train/run.h"

namespace ember {

class PassLimits {
 public:
  // `clock`: seconds, as now_seconds() gives them (a test's own clock).
  explicit PassLimits(TrainLimits limits, std::function<double()> clock = now_seconds)
      : limits_(std::move(limits)), clock_(std::move(clock)), start_(clock_()) {}

  // The limits of the next pass: what is left of the invocation's, at least one step and one second.
  TrainLimits next() {
    TrainLimits pass = limits_;
    if (limits_.max_runtime > 0) pass.max_runtime = std::max(1.0, limits_.max_runtime - (clock_() - start_));
    if (limits_.stop_after > 0) pass.stop_after = int(std::max<int64_t>(1, limits_.stop_after - steps_done_));
    pass.on_start = [this, on_start = passes_ == 0 ? limits_.on_start : nullptr](int64_t step) {
      first_step_ = step;
      if (on_start) on_start(step);
    };
    ++passes_;
    return pass;
  }

  // A pass ended at `step` (a pass that never started counts no steps).
  void ended(int64_t step) {
    if (first_step_ >= 0) steps_done_ += step - first_step_;
    first_step_ = -1;
  }

 private:
  TrainLimits limits_;
  std::function<double()> clock_;
  double start_;
  int passes_ = 0;
  int64_t first_step_ = -1;  // where the current pass started (-1: not started)
  int64_t steps_done_ = 0;   // optimizer steps of the passes that ended
};

}  // namespace ember
