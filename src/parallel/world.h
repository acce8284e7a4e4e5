// The MPI world as the trainer sees it: rank, size, the rank's place on its node (shared-memory split) and host.
// Built once at start-up; the start-up checks (one configuration on every rank, a power-of-two size) run on every rank.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "parallel/collective_watch.h"

namespace ember {

struct World {
  MPI_Comm comm = MPI_COMM_WORLD;
  int rank = 0;
  int size = 1;
  int local_rank = 0;  // rank among the processes on this node (MPI_COMM_TYPE_SHARED split)
  int local_size = 1;
  std::string host;
  // dist.timeout and what the rank is doing: shared by every copy of this World and the communicators made from it
  // (make_communicator); the host collectives (parallel/host_collectives.h) wait by it too.
  std::shared_ptr<CollectiveWatch> watch = std::make_shared<CollectiveWatch>();
};

// Describes MPI_COMM_WORLD. MPI must be initialised.
World make_world();
// Describes `comm` (collective over it): its ranks, and each rank's place among the ranks of `comm` on its node.
World make_world(MPI_Comm comm);

// Throws ember::Error (on every rank alike, since every rank sees the same size) unless size is a power of two.
void require_power_of_two(const World& world);

// The first key line ("section.key = value", as require_same_config names it) where two resolved config texts differ,
// as {mine, theirs}, leaving out the keys listed in `ignored` ("section.key"); two empty strings when they agree.
std::pair<std::string, std::string> first_config_difference(const std::string& mine, const std::string& theirs,
                                                            const std::vector<std::string>& ignored = {});

// Throws ember::Error on every rank alike unless every rank resolved the same configuration text: the message names
// the first rank whose config differs from rank 0's and its first differing line ("rank 2: training.seq_len = 64,
// rank 0: training.seq_len = 32"; keys are "section.key" from the INI text's [section] headers), with a hint.
// Collective over world.comm: every rank must call it.
void require_same_config(const World& world, const std::string& config_ini);

// The ranks of world.comm listed in `ranks` (ascending, in world.comm's numbering) as a World of their own, made by
// those ranks alone (MPI_Comm_create_group with `tag`), so ranks left out may be dead. Bounded by dist.timeout;
// shares world's watch.
World make_sub_world(const World& world, const std::vector<int>& ranks, int tag);
// Frees the communicator of a World from make_sub_world. MPI calls the free collective, yet Open MPI completes it on
// each rank alone (no other rank takes part), so ranks of it that are gone do not matter.
void free_sub_world(World& world);

// This rank goes on without some ranks of the job (an async worker was dropped, or this worker was): MPI_Finalize
// would wait for them and MPI_Abort would end the ranks still at work, so MpiSession::finish() then ends the process
// with its exit code and without MPI.
void leave_job();

// MPI for the life of the process: initialised at construction, with MPI_ERRORS_RETURN on MPI_COMM_WORLD so that
// EMBER_MPI_CHECK reports a failed call itself. finish() ends it: after leave_job() it exits with `code`; else with
// `failed` and several ranks it aborts every rank with `code` (no rank is left waiting in a collective), otherwise
// it finalises.
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  int rank() const { return rank_; }
  int size() const { return size_; }
  // Ends MPI. A failure ends every rank (MPI_Abort); an `agreed` one (every rank holds it) first waits up to
  // 10 s for every rank to get here, so that no rank's clean-up is cut short by another's abort.
  void finish(bool failed, int code, bool agreed = false);

 private:
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace ember
