// Waiting on a collective that a failed peer may never let finish. NCCL's kernels spin until a peer's data arrives,
// so a rank that blocks in the driver (cudaStreamSynchronize) waits forever when a peer died or its link broke. The
// wait here polls instead: completion, and between polls the library's asynchronous error; on an error it aborts the
// communicator (ncclCommAbort, which stops its kernels and frees it) and throws, so the rank ends through the usual
// error path (every rank exits: main's MPI session aborts the job). After an abort nothing waits again: later waits
// throw at once, and destructors skip the work they would otherwise finish.
#pragma once

#include <functional>
#include <string>

#include "parallel/collective_watch.h"

namespace ember {

// A communicator's health, shared with its pending requests.
struct CollectiveHealth {
  bool aborted = false;
  std::string error;  // the error that aborted it
};

// How to poll one communicator: whether the awaited work is done, its asynchronous error ("" while there is none),
// and how to abort it.
struct CollectivePoll {
  std::function<bool()> done;
  std::function<std::string()> async_error;
  std::function<void()> abort;
};

// Polls done() until it is true, backing off from a yield to sleeps of at most 1 ms, so a wait costs little CPU and
// adds little latency; between polls calls check() where given. When watch.timeout_seconds > 0 and the wait has
// lasted that long, calls on_timeout() where given and throws ember::Error naming `what` ("MPI all-reduce"),
// dist.timeout and watch.context, with a hint.
void poll_until(const std::function<bool()>& done, const CollectiveWatch& watch, const std::string& what,
                const std::function<void()>& check = {}, const std::function<void()>& on_timeout = {});

// The error and hint of a collective `what` that did not complete within watch.timeout_seconds.
std::string collective_timeout_error(const std::string& what, const CollectiveWatch& watch);
std::string collective_timeout_hint(const CollectiveWatch& watch);

// poll_until over poll.done(), checking poll.async_error() between polls and once more at the end. On an error, or
// when the wait outlasts watch.timeout_seconds: calls poll.abort() once, marks `health` aborted and throws
// ember::Error naming `what` ("NCCL all-reduce") and the cause, with a hint. With `health` already aborted it throws
// at once, polling nothing.
void wait_or_abort(CollectiveHealth& health, const CollectivePoll& poll, const std::string& what,
                   const CollectiveWatch& watch = {});

}  // namespace ember
