// A bound on blocking calls that cannot be polled: MPI's one-sided lock, flush and unlock (osc/pt2pt, osc/ucx) wait
// inside MPI for the target to answer, and a target whose host is down, frozen or cut off never does. While a
// StallGuard lives, a watchdog thread watches the clock; past the guard's bound it prints the guard's error and hint
// as main() prints every error and ends the process with exit code 1, which makes the launcher end the job.
#pragma once

#include <cstdint>
#include <string>

namespace ember {

class StallGuard {
 public:
  // Past `seconds` (> 0) without the guard being destroyed: "[rank r] error: <error>", "hint: <hint>", exit 1.
  StallGuard(double seconds, std::string error, std::string hint);
  ~StallGuard();
  StallGuard(const StallGuard&) = delete;
  StallGuard& operator=(const StallGuard&) = delete;

 private:
  uint64_t id_;
};

}  // namespace ember
