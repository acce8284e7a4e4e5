// Host-side collectives (implementation): thin, checked wrappers of MPI's non-blocking calls, each waited for within
// the World's dist.timeout (a watchdog bounds the wait); with one rank none of them calls MPI.
#include "parallel/host_collectives.h"

#include <mpi.h>

#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <exception>

#include "parallel/collective_wait.h"
#include "parallel/mpi_check.h"
#include "parallel/stall_watchdog.h"

namespace ember {

namespace {

// Waits for `request` within the World's dist.timeout. MPI_Wait, not a polling loop: with ranks oversubscribing the
// cores, polled waits here made a checkpoint take seconds instead of tens of milliseconds, past the second mpirun
// gives ranks between SIGTERM and SIGKILL. A wait that outlasts the timeout (a peer died, froze or lost its link)
// ends the rank from the watchdog thread (parallel/stall_watchdog.h) with the error the communicator's waits give.
void wait_for(const World& world, MPI_Request& request, const char* what) {
  const CollectiveWatch& watch = *world.watch;
  if (watch.timeout_seconds <= 0.0) {
    EMBER_MPI_CHECK(MPI_Wait(&request, MPI_STATUS_IGNORE));
    return;
  }
  const StallGuard guard(watch.timeout_seconds, collective_timeout_error(std::string("MPI ") + what, watch),
                         collective_timeout_hint(watch));
  EMBER_MPI_CHECK(MPI_Wait(&request, MPI_STATUS_IGNORE));
}

}  // namespace

World self_world() {
  World w;
  w.comm = MPI_COMM_SELF;
  return w;
}

std::string broadcast_string(const World& world, const std::string& text, int root) {
  if (world.size == 1) return text;
  uint64_t n = world.rank == root ? text.size() : 0;
  MPI_Request r = MPI_REQUEST_NULL;
  EMBER_MPI_CHECK(MPI_Ibcast(&n, 1, MPI_UINT64_T, root, world.comm, &r));
  wait_for(world, r, "broadcast");
  EMBER_ASSERT(n <= uint64_t(INT_MAX), "string too long for one MPI_Bcast");
  std::string out = world.rank == root ? text : std::string(size_t(n), '\0');
  if (n > 0) {
    EMBER_MPI_CHECK(MPI_Ibcast(out.data(), int(n), MPI_CHAR, root, world.comm, &r));
    wait_for(world, r, "broadcast");
  }
  return out;
}

void broadcast_values(const World& world, uint64_t* values, int n, int root) {
  if (world.size == 1 || n == 0) return;
  MPI_Request r = MPI_REQUEST_NULL;
  EMBER_MPI_CHECK(MPI_Ibcast(values, n, MPI_UINT64_T, root, world.comm, &r));
  wait_for(world, r, "broadcast");
}

namespace {

template <typename T>
std::vector<T> all_gather(const World& world, const T* values, int n, MPI_Datatype type) {
  if (world.size == 1) return std::vector<T>(values, values + n);
  std::vector<T> all(size_t(n) * size_t(world.size));
  MPI_Request r = MPI_REQUEST_NULL;
  EMBER_MPI_CHECK(MPI_Iallgather(values, n, type, all.data(), n, type, world.comm, &r));
  wait_for(world, r, "all-gather");
  return all;
}

}  // namespace

std::vector<int64_t> all_gather_values(const World& world, const int64_t* values, int n) {
  return all_gather(world, values, n, MPI_INT64_T);
}

std::vector<uint64_t> all_gather_values(const World& world, const uint64_t* values, int n) {
  return all_gather(world, values, n, MPI_UINT64_T);
}

std::vector<std::string> all_gather_strings(const World& world, const std::string& text) {
  if (world.size == 1) return {text};
  EMBER_ASSERT(text.size() <= size_t(INT_MAX), "string too long for one MPI_Allgatherv");
  const int n = int(text.size());
  std::vector<int> lengths(size_t(world.size)), offsets(size_t(world.size), 0);
  MPI_Request r = MPI_REQUEST_NULL;
  EMBER_MPI_CHECK(MPI_Iallgather(&n, 1, MPI_INT, lengths.data(), 1, MPI_INT, world.comm, &r));
  wait_for(world, r, "all-gather");
  int64_t total = 0;
  for (int k = 0; k < world.size; ++k) {
    offsets[size_t(k)] = int(total);
    total += lengths[size_t(k)];
  }
  EMBER_ASSERT(total <= INT_MAX, "strings too long for one MPI_Allgatherv");
  std::string all(size_t(total), '\0');
  EMBER_MPI_CHECK(
      MPI_Iallgatherv(text.data(), n, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, world.comm, &r));
  wait_for(world, r, "all-gather");
  std::vector<std::string> out;
  for (int k = 0; k < world.size; ++k)
    out.push_back(all.substr(size_t(offsets[size_t(k)]), size_t(lengths[size_t(k)])));
  return out;
}

bool any_rank(const World& world, bool flag) {
  if (world.size == 1) return flag;
  int mine = flag ? 1 : 0, any = 0;
  MPI_Request r = MPI_REQUEST_NULL;
  EMBER_MPI_CHECK(MPI_Iallreduce(&mine, &any, 1, MPI_INT, MPI_MAX, world.comm, &r));
  wait_for(world, r, "all-reduce");
  return any != 0;
}

std::optional<AgreedError> agree_on_error(const World& world, std::optional<Error> local) {
  if (world.size == 1)
    return local ? std::optional<AgreedError>(AgreedError(local->what(), local->hint())) : std::nullopt;
  int mine = local ? world.rank : INT_MAX, first = INT_MAX;
  MPI_Request r = MPI_REQUEST_NULL;
  EMBER_MPI_CHECK(MPI_Iallreduce(&mine, &first, 1, MPI_INT, MPI_MIN, world.comm, &r));
  wait_for(world, r, "all-reduce");
  if (first == INT_MAX) return std::nullopt;
  const bool owner = world.rank == first;
  const std::string what = broadcast_string(world, owner ? std::string(local->what()) : std::string(), first);
  const std::string hint = broadcast_string(world, owner ? local->hint() : std::string(), first);
  return AgreedError(what, hint);
}

std::optional<Error> agree_on_error_within(const World& world, std::optional<Error> local, double bound_s,
                                           const std::function<void(const Error&)>& on_stuck) {
  if (world.size == 1) return local;
  int mine = local ? world.rank : INT_MAX, first = INT_MAX;
  MPI_Request req = MPI_REQUEST_NULL;
  EMBER_MPI_CHECK(MPI_Iallreduce(&mine, &first, 1, MPI_INT, MPI_MIN, world.comm, &req));
  if (!local) {
    wait_for(world, req, "all-reduce");
  } else {
    // Polled every millisecond: the test is cheap, and the bound is seconds.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(bound_s);
    for (int done = 0;;) {
      EMBER_MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
      if (done) break;
      if (std::chrono::steady_clock::now() > deadline) on_stuck(*local);
      ::usleep(1000);
    }
  }
  if (first == INT_MAX) return std::nullopt;
  // Every rank is past the reduction, hence outside the other library's collective calls: plain broadcasts are safe.
  const bool owner = world.rank == first;
  const std::string what = broadcast_string(world, owner ? std::string(local->what()) : std::string(), first);
  const std::string hint = broadcast_string(world, owner ? local->hint() : std::string(), first);
  return Error(what, hint);
}

void abort_job(const World& world, const Error& e) {
  // The format of main()'s report of every other error, so that scripts find the same two lines.
  std::fprintf(stderr, "%serror: %s\nhint: %s\n",
               world.size > 1 ? ("[rank " + std::to_string(world.rank) + "] ").c_str() : "", e.what(),
               e.hint().c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  ::_exit(1);  // MPI_Abort does not return; should it, this rank still must not unwind into the stuck call
}

std::optional<Error> attempt(const std::function<void()>& fn, const std::string& hint) {
  try {
    fn();
    return std::nullopt;
  } catch (const Error& e) {
    return e;
  } catch (const std::exception& e) {
    return Error(e.what(), hint);
  }
}

void run_agreed(const World& world, bool root_only, const std::function<void()>& fn, const std::string& hint) {
  std::optional<Error> local;
  if (!root_only || world.rank == 0) local = attempt(fn, hint);
  if (std::optional<Error> e = agree_on_error(world, std::move(local))) throw *e;
}

void barrier(const World& world) {
  if (world.size == 1) return;
  MPI_Request r = MPI_REQUEST_NULL;
  EMBER_MPI_CHECK(MPI_Ibarrier(world.comm, &r));
  wait_for(world, r, "barrier");
}

SubWorld::SubWorld(const World& parent, int color) {
  MPI_Comm comm = MPI_COMM_NULL;
  EMBER_MPI_CHECK(MPI_Comm_split(parent.comm, color, parent.rank, &comm));
  world_ = make_world(comm);
}

SubWorld::~SubWorld() {
  if (world_.comm != MPI_COMM_NULL) MPI_Comm_free(&world_.comm);
}

}  // namespace ember
