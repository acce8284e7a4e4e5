// Waiting on a collective by polling, with abort on an asynchronous error (implementation).
#include "parallel/collective_wait.h"

#include <chrono>
#include <cstdio>
#include <thread>

#include "core/error.h"

namespace ember {
namespace {

[[noreturn]] void fail(const CollectiveHealth& health, const std::string& what) {
  throw_error(what + " failed: " + health.error + "; the communicator was aborted",
              "another rank probably failed or lost its connection first: its error names the cause; resume the job "
              "from its last checkpoint once that is fixed (NCCL_DEBUG=WARN shows what NCCL saw)");
}

}  // namespace

std::string collective_timeout_error(const std::string& what, const CollectiveWatch& watch) {
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%g", watch.timeout_seconds);
  return what + " did not complete within dist.timeout = " + seconds + " s" +
         (watch.context.empty() ? "" : " (" + watch.context + ")") +
         ": a peer rank died, froze or lost its network link";
}

std::string collective_timeout_hint(const CollectiveWatch& watch) {
  if (!watch.hint.empty()) return watch.hint;
  return "every rank of the job stops with an error like this one; the host that failed is the one whose log ends "
         "without it, or with another error: fix it (or leave it out), then resume with --resume auto. Raise "
         "dist.timeout if a collective can legitimately take longer on these links";
}

void poll_until(const std::function<bool()>& done, const CollectiveWatch& watch, const std::string& what,
                const std::function<void()>& check, const std::function<void()>& on_timeout) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  const bool bounded = watch.timeout_seconds > 0.0;
  const auto limit = std::chrono::duration<double>(watch.timeout_seconds);
  // As MPI's own blocking waits do (yielding when ranks oversubscribe the cores): poll back to back, yielding in
  // between, for the first 20 ms, where nearly every collective of a training step completes; then every 50 us up to
  // 200 ms; then every 1 ms, which bounds the CPU a long wait (a slower peer, a lost one) costs.
  const auto spin = std::chrono::milliseconds(20), fine = std::chrono::milliseconds(200);
  while (!done()) {
    if (check) check();
    const auto waited = Clock::now() - start;
    if (waited < spin)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(waited < fine ? 50 : 1000));
    if (bounded && waited > limit) {
      if (on_timeout) on_timeout();
      throw_error(collective_timeout_error(what, watch), collective_timeout_hint(watch));
    }
  }
}

void wait_or_abort(CollectiveHealth& health, const CollectivePoll& poll, const std::string& what,
                   const CollectiveWatch& watch) {
  if (health.aborted) fail(health, what);
  const auto check = [&] {
    std::string error = poll.async_error();
    if (error.empty()) return;
    health.aborted = true;
    health.error = std::move(error);
    poll.abort();
    fail(health, what);
  };
  poll_until(poll.done, watch, what, check, [&] {
    health.aborted = true;
    health.error = "timed out after dist.timeout = " + std::to_string(int(watch.timeout_seconds)) + " s";
    poll.abort();
  });
  check();
}

}  // namespace ember
