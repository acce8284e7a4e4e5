// A running job's door for ranks started later (MPI's dynamic process interface): the job opens a port, a later
// mpirun's ranks connect to it, and both sides end up in one communicator, the job's ranks first. Across two mpirun
// launches Open MPI needs its rendezvous server: both mpiruns get --ompi-server (docs/cluster.md, "Hosts that join").
// MPI_Comm_accept and MPI_Comm_connect cannot be polled or cancelled, so each runs under a StallGuard: past its bound
// the process ends with an error instead of waiting for a partner that is gone.
#pragma once

#include <string>

#include "parallel/world.h"

namespace ember {

// MPI_Open_port on this rank: the name a later job's ranks connect to. close_job_port() gives it back.
std::string open_job_port();
void close_job_port(const std::string& port);

// Collective over `members`: takes in the ranks connecting to `port` (named by members' rank 0, the root) and returns
// the World of members followed by them. `seconds` bounds the wait for the other side.
World accept_joiners(const World& members, const std::string& port, double seconds);

// Collective over `joiners`: connects them to the job that opened `port` and returns the World of that job's members
// followed by these ranks. Throws ember::Error when the runtime cannot connect (no rendezvous server); `seconds`
// bounds the wait for the job to accept.
World connect_to_job(const World& joiners, const std::string& port, double seconds);

}  // namespace ember
