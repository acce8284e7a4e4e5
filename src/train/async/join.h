// Hosts that join a running async job (async.join = true). The shared run folder is the meeting point: the center
// opens an MPI port and writes its name to <run.dir>/join/port; a joining start writes a request beside it
// (<host>-<pid>.request: its ranks and its resolved config) and waits for the answer (<host>-<pid>.answer). The
// center checks the request (same config, whole worker groups), answers "seen", and at its next barrier writes a
// checkpoint, answers "accepted" with its path, and every rank still in the job accepts the joiners on the port
// (parallel/job_port.h). Then all of them, the joiners last, start the run again from that checkpoint: the joiners as
// new workers with fresh AdamW state, in the metrics and in every checkpoint from then on.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "parallel/world.h"
#include "train/run_config.h"

namespace ember {

// The center's side (rank 0), for the whole life of the run: the port and the requests.
class JoinDesk {
 public:
  // Opens the port and writes <run.dir>/join/port. `spans_hosts`: one launch started this job's ranks on several
  // hosts, which Open MPI 4.1 cannot connect another launch to (the joining mpirun crashes): requests are refused.
  JoinDesk(const RunConfig& c, const std::string& config_ini, bool spans_hosts);
  ~JoinDesk();  // removes join/port and closes the port
  JoinDesk(const JoinDesk&) = delete;
  JoinDesk& operator=(const JoinDesk&) = delete;

  // At most once a second (else false at once): whether a request waits to be taken in at the next barrier. A
  // request that cannot join (another config, ranks that are not whole groups of `ranks_per_worker`) is answered
  // "refused" with the reason and skipped.
  bool poll(int ranks_per_worker);
  // After the join barrier's checkpoint: answers the waiting request "accepted" with `checkpoint`, then takes its
  // ranks in (collective over `members`, the ranks still in the job, rank 0 first). Returns the World of members
  // followed by the joiners, or nothing when the joining start stopped waiting (the run goes on as it was).
  std::optional<World> accept(const World& members, const std::string& checkpoint, double seconds);
  const std::string& pending_host() const { return pending_host_; }

 private:
  std::string dir_, port_, config_ini_;
  std::string pending_;  // the waiting request's file stem ("" when none)
  std::string pending_host_;
  bool spans_hosts_ = false;
  double last_poll_ = 0.0;
  // Requests seen so far, by file stem: their last beat and when it last changed (the joining start beats once a
  // second while it waits; a request whose beat stands still is from a start that stopped waiting).
  std::map<std::string, std::pair<uint64_t, double>> beats_;
};

// A worker rank's side of the join barrier: collective with the center's JoinDesk::accept over `members`.
std::optional<World> accept_joiners_as_member(const World& members, double seconds);

// The joining start's side: asks the job running in run.dir to take in this start's ranks (collective over `world`,
// every rank of this mpirun) and returns the World of the job's members followed by them, and in `checkpoint` the
// checkpoint they start from. Refusals and a job that does not answer end in ember::Error on every rank alike, before
// any work.
World join_running_job(const World& world, const RunConfig& c, const std::string& config_ini, std::string& checkpoint);

}  // namespace ember
