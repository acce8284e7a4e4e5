// An MPI-aware GoogleTest main: MPI initialised once, failures printed with their rank, and the exit code combined
// across ranks so that a failure on any rank fails the test at every rank count.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

namespace {

// Prefixes failure reports with the rank so multi-rank output says where a test failed.
class RankPrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankPrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      fprintf(stderr, "[rank %d] failure in %s:%d\n%s\n", rank_, r.file_name() ? r.file_name() : "?", r.line_number(),
              r.summary());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  ::testing::InitGoogleTest(&argc, argv);
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) delete listeners.Release(listeners.default_result_printer());
  listeners.Append(new RankPrinter(rank));
  int local = RUN_ALL_TESTS() != 0 ? 1 : 0, global = 0;
  MPI_Allreduce(&local, &global, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return global;
}
