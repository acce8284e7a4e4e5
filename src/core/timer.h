// Wall-clock timing for progress lines and benchmarks (steady clock, seconds as double).
#pragma once

#include <chrono>

namespace ember {

inline double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace ember
