// The watchdog thread behind StallGuard: one per process, started by the first guard, sleeping until the earliest
// armed deadline (or a change), and ending the process when a deadline passes with its guard still alive.
#include "parallel/stall_watchdog.h"

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "core/log.h"

namespace ember {
namespace {

using Clock = std::chrono::steady_clock;

struct Armed {
  Clock::time_point deadline;
  std::string error, hint;
};

class Watchdog {
 public:
  static Watchdog& instance() {
    static Watchdog* w = new Watchdog();  // never destroyed: the thread may still wait at exit
    return *w;
  }

  uint64_t arm(double seconds, std::string error, std::string hint) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!started_) {
      std::thread([this] { watch(); }).detach();
      started_ = true;
    }
    const uint64_t id = next_id_++;
    const auto bound = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    armed_.emplace(id, Armed{Clock::now() + bound, std::move(error), std::move(hint)});
    changed_.notify_one();
    return id;
  }

  void disarm(uint64_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    armed_.erase(id);
  }

 private:
  void watch() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      if (armed_.empty()) {
        changed_.wait(lock);
        continue;
      }
      auto first = armed_.begin();
      for (auto it = armed_.begin(); it != armed_.end(); ++it)
        if (it->second.deadline < first->second.deadline) first = it;
      if (Clock::now() >= first->second.deadline) {
        // The format of main()'s error report, so that scripts find the same two lines; _exit, since the thread
        // that owns MPI is stuck inside it and nothing may unwind.
        std::fprintf(stderr, "[rank %d] error: %s\nhint: %s\n", log_rank(), first->second.error.c_str(),
                     first->second.hint.c_str());
        std::fflush(stderr);
        ::_exit(1);
      }
      // A copy: wait_until reads its deadline again after waking, by when disarm() may have erased the entry.
      const Clock::time_point deadline = first->second.deadline;
      changed_.wait_until(lock, deadline);
    }
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<uint64_t, Armed> armed_;
  uint64_t next_id_ = 1;
  bool started_ = false;
};

}  // namespace

StallGuard::StallGuard(double seconds, std::string error, std::string hint)
    : id_(Watchdog::instance().arm(seconds, std::move(error), std::move(hint))) {}

StallGuard::~StallGuard() { Watchdog::instance().disarm(id_); }

}  // namespace ember
