// Stop requests (implementation): a lock-free atomic written by the handler and read by the training loop.
#include "train/signals.h"

#include <atomic>
#include <csignal>

namespace ember {

static std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free flag");

static void on_stop_signal(int sig) { g_stop_signal.store(sig, std::memory_order_relaxed); }

void install_stop_signal_handlers() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // blocking reads and MPI calls resume instead of failing with EINTR
  sigaction(SIGUSR1, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

int stop_signal_received() { return g_stop_signal.load(std::memory_order_relaxed); }

}  // namespace ember
