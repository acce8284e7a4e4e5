// Wall-clock timing for progress lines and benchmarks (steady clock, seconds as double), and the UTC time stamps that
// files written for people and scripts carry.
#pragma once

#include <chrono>
#include <cstdio>
#include <ctime>
#include <string>

namespace ember {

inline double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The current UTC time as ISO 8601, e.g. 2025-03-01T12:00:00Z.
inline std::string utc_timestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// "hh:mm:ss" of a duration in seconds.
inline std::string format_hms(double seconds) {
  const int s = int(seconds);
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%02d:%02d:%02d", s / 3600, s / 60 % 60, s % 60);
  return buf;
}

}  // namespace ember
