// Host-side collectives over a World for the layers above src/parallel: strings and small arrays broadcast or gathered,
// and agreement on the outcome of a step, so trainers and the checkpoint layer never call MPI themselves.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "parallel/world.h"

namespace ember {

// A World of one rank over MPI_COMM_SELF: every helper below is then a no-op that calls no MPI at all, so tools that
// never initialise MPI (and single-rank saves) can use them.
World self_world();

// Root's `text` on every rank (length first, then the bytes). Collective over world.comm.
std::string broadcast_string(const World& world, const std::string& text, int root);

// Root's n values in place on every rank. Collective over world.comm.
void broadcast_values(const World& world, uint64_t* values, int n, int root);

// Every rank's n values, rank-major: element [r * n + i] is rank r's values[i]. Collective over world.comm.
std::vector<int64_t> all_gather_values(const World& world, const int64_t* values, int n);
std::vector<uint64_t> all_gather_values(const World& world, const uint64_t* values, int n);

// Every rank's `text`, by rank. Collective over world.comm.
std::vector<std::string> all_gather_strings(const World& world, const std::string& text);

// True on every rank when `flag` is true on any rank. Collective over world.comm.
bool any_rank(const World& world, bool flag);

// Agreement on the outcome of a step that every rank took: when any rank failed, every rank gets the error of the
// lowest failing rank (message and hint), so that no rank goes on into a collective call a failed rank will never
// make. Collective over world.comm.
std::optional<AgreedError> agree_on_error(const World& world, std::optional<Error> local);

// agree_on_error for a step made of collective calls of another library (parallel HDF5) that a failing rank may
// have left early, stranding the others inside it. A rank without an error waits as long as the others take; a rank
// holding an error waits at most `bound_s` seconds, then takes it that some rank is stuck in a collective call it
// will never leave, and calls `on_stuck` with its error, which must end the job (abort_job). Collective over
// world.comm.
std::optional<Error> agree_on_error_within(const World& world, std::optional<Error> local, double bound_s,
                                           const std::function<void(const Error&)>& on_stuck);

// Prints `e` as main() does ("[rank r] error: ..." and "hint: ...") and ends every rank of the job at once
// (MPI_Abort with exit code 1): for a rank that cannot unwind, because other ranks are stuck in a collective call.
[[noreturn]] void abort_job(const World& world, const Error& e);

// Runs `fn` (on every rank, or on rank 0 only) and throws the agreed error on every rank. Any exception other than
// ember::Error is turned into one with `hint`. Collective over world.comm.
void run_agreed(const World& world, bool root_only, const std::function<void()>& fn, const std::string& hint);

// Runs `fn` and returns the ember::Error it threw, if any (other exceptions become an Error with `hint`).
std::optional<Error> attempt(const std::function<void()>& fn, const std::string& hint);

void barrier(const World& world);

// The ranks of `parent` that pass the same `color`, as a World of their own (collective over parent.comm). The
// communicator lives as long as this object.
class SubWorld {
 public:
  SubWorld(const World& parent, int color);
  ~SubWorld();
  SubWorld(const SubWorld&) = delete;
  SubWorld& operator=(const SubWorld&) = delete;
  const World& world() const { return world_; }

 private:
  World world_;
};

}  // namespace ember
