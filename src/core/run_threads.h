// Work spread over a few threads that all end before the caller goes on: the first exception any of them throws is
// rethrown in the caller once every thread has joined, so no thread outlives the data it works on.
#pragma once

#include <functional>

namespace ember {

// Runs body(0) .. body(n - 1) on n threads (body(0) on the calling thread) and waits for all of them. When a body
// throws, `on_failure` (if given) runs once at once, so that the others can stop early (e.g. by running out of
// work), and the first exception is rethrown after the join. n < 1 runs one.
void run_threads(int n, const std::function<void(int worker)>& body, const std::function<void()>& on_failure = {});

}  // namespace ember
