// Waiting on a collective by polling, with abort on an asynchronous error (implementation).
#include "dist/collective_wait.h"

#include <chrono>
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

void wait_or_abort(CollectiveHealth& health, const CollectivePoll& poll, const std::string& what) {
  if (health.aborted) fail(health, what);
  const auto check = [&] {
    std::string error = poll.async_error();
    if (error.empty()) return;
    health.aborted = true;
    health.error = std::move(error);
    poll.abort();
    fail(health, what);
  };
  int polls = 0;
  while (!poll.done()) {
    check();
    if (++polls < 64)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(polls < 1024 ? 20 : 1000));
  }
  check();
}

}  // namespace ember
