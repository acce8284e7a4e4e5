// World (implementation): reads rank, size, node-local placement and host from MPI, and checks the topology.
// Node-local rank comes from a shared-memory split rather than environment variables, so it works under any launcher.
#include "dist/world.h"

#include <string>

#include "core/error.h"

namespace ember {

World make_world() {
  int initialized = 0;
  EMBER_MPI_CHECK(MPI_Initialized(&initialized));
  EMBER_ASSERT(initialized, "make_world() called before MPI_Init");

  World world;
  world.comm = MPI_COMM_WORLD;
  EMBER_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world.rank));
  EMBER_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world.size));

  // Ranks sharing memory share a node; keying by world rank keeps their local order the same as their global order,
  // so local rank 0 is the lowest world rank on the node (the one that picks GPU 0).
  MPI_Comm node = MPI_COMM_NULL;
  EMBER_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world.rank, MPI_INFO_NULL, &node));
  EMBER_MPI_CHECK(MPI_Comm_rank(node, &world.local_rank));
  EMBER_MPI_CHECK(MPI_Comm_size(node, &world.local_size));
  EMBER_MPI_CHECK(MPI_Comm_free(&node));

  char host[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  EMBER_MPI_CHECK(MPI_Get_processor_name(host, &len));
  world.host.assign(host, len);
  return world;
}

void require_power_of_two(const World& world) {
  const int n = world.size;
  if (n >= 1 && (n & (n - 1)) == 0) return;
  // Every rank sees the same size and throws the same error, so no rank is left waiting in a collective.
  throw_error("world size " + std::to_string(n) + " is not a power of two (ember trains on 1, 2, 4, 8, ... ranks)",
              "launch with a power-of-two task count: mpirun -np 4 / srun -n 4 (or --ntasks-per-node so that "
              "nodes x tasks is a power of two)");
}

}  // namespace ember
