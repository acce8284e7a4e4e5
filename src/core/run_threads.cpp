// Work spread over a few threads (implementation).
#include "core/run_threads.h"

#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace ember {

void run_threads(int n, const std::function<void(int worker)>& body, const std::function<void()>& on_failure) {
  std::exception_ptr failure;
  std::mutex failure_mutex;
  auto guarded = [&](int worker) {
    try {
      body(worker);
    } catch (...) {
      std::lock_guard<std::mutex> lock(failure_mutex);
      if (!failure) {
        failure = std::current_exception();
        if (on_failure) on_failure();
      }
    }
  };
  std::vector<std::thread> threads;
  for (int w = 1; w < n; ++w) threads.emplace_back(guarded, w);
  guarded(0);
  for (std::thread& t : threads) t.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace ember
