// World tests: make_world's fields agree with MPI and with each other on every rank, and the power-of-two topology
// check accepts 1, 2, 4, ... and rejects other sizes with an error naming the size and a hint.
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "parallel/world.h"

namespace ember {
namespace {

// Every rank calls this at the same point, so a failure on any rank fails the test on all of them.
int failures_over_ranks(int local) {
  int total = 0;
  MPI_Allreduce(&local, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  return total;
}

TEST(World, FieldsMatchMpi) {
  const World world = make_world();
  int rank = -1, size = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int bad = 0;
  bad += world.comm != MPI_COMM_WORLD;
  bad += world.rank != rank;
  bad += world.size != size;
  bad += !(world.rank >= 0 && world.rank < world.size);
  bad += !(world.local_rank >= 0 && world.local_rank < world.local_size);
  bad += world.host.empty();
  // The tests run on one machine, so every rank shares one node: the local split is the whole world, in rank order.
  bad += world.local_size != world.size;
  bad += world.local_rank != world.rank;
  if (bad)
    fprintf(stderr, "[rank %d] world: rank %d/%d local %d/%d host '%s'\n", rank, world.rank, world.size,
            world.local_rank, world.local_size, world.host.c_str());
  EXPECT_EQ(failures_over_ranks(bad), 0);
}

TEST(World, EveryRankSeesTheSameHost) {
  const World world = make_world();
  // Compare host names by gathering rank 0's to everyone (names are at most MPI_MAX_PROCESSOR_NAME bytes).
  std::vector<char> root_host(MPI_MAX_PROCESSOR_NAME + 1, '\0');
  if (world.rank == 0) world.host.copy(root_host.data(), MPI_MAX_PROCESSOR_NAME);
  MPI_Bcast(root_host.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0, MPI_COMM_WORLD);
  EXPECT_EQ(failures_over_ranks(world.host != std::string(root_host.data()) ? 1 : 0), 0);
}

TEST(World, PowerOfTwoAcceptedForThisWorld) {
  // ctest runs this at np 1, 2 and 4.
  EXPECT_NO_THROW(require_power_of_two(make_world()));
}

TEST(World, PowerOfTwoAcceptedSizes) {
  for (int n : {1, 2, 4, 8, 16, 1024, 1 << 30}) {
    World world;
    world.size = n;
    EXPECT_NO_THROW(require_power_of_two(world)) << "size " << n;
  }
}

TEST(World, OtherSizesRejectedWithSizeAndHint) {
  for (int n : {3, 5, 6, 7, 12, 0, -4}) {
    World world;
    world.size = n;
    try {
      require_power_of_two(world);
      ADD_FAILURE() << "size " << n << " was accepted";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("world size " + std::to_string(n) + " "), std::string::npos) << message;
      EXPECT_NE(message.find("not a power of two"), std::string::npos) << message;
      EXPECT_FALSE(e.hint().empty()) << "size " << n;
    }
  }
}

}  // namespace
}  // namespace ember
