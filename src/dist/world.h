// The MPI world as the trainer sees it: rank, size, the rank's place on its node (shared-memory split) and host.
// Built once at start-up; the topology check (a power-of-two number of ranks) runs on every rank.
#pragma once

#include <mpi.h>

#include <string>

namespace ember {

struct World {
  MPI_Comm comm = MPI_COMM_WORLD;
  int rank = 0;
  int size = 1;
  int local_rank = 0;   // rank among the processes on this node (MPI_COMM_TYPE_SHARED split)
  int local_size = 1;
  std::string host;
};

// Describes MPI_COMM_WORLD. MPI must be initialised.
World make_world();

// Throws ember::Error (on every rank alike, since every rank sees the same size) unless size is a power of two.
void require_power_of_two(const World& world);

}  // namespace ember
