// The MPI communicator under dist.timeout: a wait past the limit ends with an error naming the operation and the
// step, and what was pending on the same communicator is then dropped at once. Registered at np 1 (skipped), 2, 4.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <memory>
#include <thread>

#include "core/error.h"
#include "parallel/communicator.h"
#include "parallel/mpi_communicator.h"

namespace ember {
namespace {

// dist.timeout: rank 0's all-reduce, which the other ranks join only after 1.5 s, ends at its 0.3 s timeout with an
// error naming the operation and the context; a second request of the same communicator, pending meanwhile, is then
// destroyed at once (its peers are known to be gone) instead of after another timeout. The others, without a limit,
// wait until rank 0 (through the barrier that follows, which progresses its abandoned requests) completes theirs.
// Bounds as in test_collective_wait.cpp.
TEST(MpiCommunicatorTimeout, AWaitPastTheTimeoutNamesTheOperationAndStep) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 2) GTEST_SKIP() << "needs 2 or more ranks";
  auto watch = std::make_shared<CollectiveWatch>();
  if (rank == 0) *watch = CollectiveWatch{0.3, "step 7"};
  auto comm = make_mpi_communicator(MPI_COMM_WORLD, watch);
  float x = 1.0f, y = 2.0f;
  if (rank == 0) {
    const double start = MPI_Wtime();
    std::unique_ptr<PendingCollective> first = comm->all_reduce_async(&x, 1, REDUCE_OP_SUM);
    std::unique_ptr<PendingCollective> second = comm->all_reduce_async(&y, 1, REDUCE_OP_SUM);
    try {
      first->wait();
      ADD_FAILURE() << "no error thrown";
    } catch (const Error& e) {
      EXPECT_STREQ(e.what(),
                   "MPI all-reduce did not complete within dist.timeout = 0.3 s (step 7): a peer rank died, froze or "
                   "lost its network link");
    }
    const double waited = MPI_Wtime() - start;
    EXPECT_GE(waited, 0.3);
    EXPECT_LT(waited, 1.4);
    const double destroy = MPI_Wtime();
    second.reset();
    EXPECT_LT(MPI_Wtime() - destroy, 0.1);
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    comm->all_reduce_async(&x, 1, REDUCE_OP_SUM)->wait();
    comm->all_reduce_async(&y, 1, REDUCE_OP_SUM)->wait();
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace ember
