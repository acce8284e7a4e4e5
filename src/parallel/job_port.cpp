// The job's door (implementation): MPI_Open_port / MPI_Comm_accept / MPI_Comm_connect, then MPI_Intercomm_merge so
// that the job's ranks keep their numbers and the new ranks follow them.
#include "parallel/job_port.h"

#include <mpi.h>

#include <csignal>

#include "core/error.h"
#include "parallel/mpi_check.h"
#include "parallel/stall_watchdog.h"

namespace ember {
namespace {

// The merged communicator of an intercommunicator, this side high or low, as a World with the members' watch.
World merged_world(MPI_Comm inter, bool high, const World& side) {
  // Connected to another launch, a rank may write to a socket the other side closed as the run ends: that must be
  // an error code, not a SIGPIPE that kills the rank.
  signal(SIGPIPE, SIG_IGN);
  MPI_Comm merged = MPI_COMM_NULL;
  EMBER_MPI_CHECK(MPI_Intercomm_merge(inter, high ? 1 : 0, &merged));
  EMBER_MPI_CHECK(MPI_Comm_set_errhandler(merged, MPI_ERRORS_RETURN));
  World w = make_world(merged);
  w.watch = side.watch;
  return w;
}

}  // namespace

std::string open_job_port() {
  char port[MPI_MAX_PORT_NAME] = {};
  EMBER_MPI_CHECK(MPI_Open_port(MPI_INFO_NULL, port));
  return port;
}

void close_job_port(const std::string& port) {
  std::string p = port;
  MPI_Close_port(p.data());  // at the end of the job: nothing is left to report a failure to
}

World accept_joiners(const World& members, const std::string& port, double seconds) {
  std::string p = port;
  MPI_Comm inter = MPI_COMM_NULL;
  {
    const StallGuard guard(seconds,
                           "the ranks that asked to join did not connect within " + std::to_string(int(seconds)) +
                               " s after the job accepted them (their host died or lost its link while joining)",
                           "resume the job with --resume auto: the checkpoint written just before the join is whole");
    EMBER_MPI_CHECK(MPI_Comm_accept(p.data(), MPI_INFO_NULL, 0, members.comm, &inter));
  }
  return merged_world(inter, /*high=*/false, members);
}

World connect_to_job(const World& joiners, const std::string& port, double seconds) {
  std::string p = port;
  MPI_Comm inter = MPI_COMM_NULL;
  // A failed connect returns its error here rather than aborting inside MPI.
  EMBER_MPI_CHECK(MPI_Comm_set_errhandler(joiners.comm, MPI_ERRORS_RETURN));
  int rc = MPI_SUCCESS;
  {
    const StallGuard guard(
        seconds,
        "the running job did not take these ranks in within " + std::to_string(int(seconds)) + " s of accepting them",
        "check that the job is still running and that both mpiruns were given the same "
        "--ompi-server");
    rc = MPI_Comm_connect(p.data(), MPI_INFO_NULL, 0, joiners.comm, &inter);
  }
  if (rc != MPI_SUCCESS)
    throw_error("cannot connect to the running job's port " + port + ": " + mpi_error_string(rc),
                "Open MPI connects two mpirun launches only through its rendezvous server: start `ompi-server "
                "--report-uri FILE` where both can reach it and give both mpiruns --ompi-server file:FILE");
  return merged_world(inter, /*high=*/true, joiners);
}

}  // namespace ember
