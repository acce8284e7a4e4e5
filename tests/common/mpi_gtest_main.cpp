// An MPI-aware GoogleTest main: MPI initialised once, failures printed with their rank, the exit code combined
// across ranks so that a failure on any rank fails the test at every rank count, and a fatal failure on one rank of
// several aborting the job: that rank leaves the test body early, and its peers would wait in a collective or for a
// message that never comes.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

namespace {

// Prefixes failure reports with the rank so multi-rank output says where a test failed; ends the job on a fatal
// failure (an ASSERT, or an exception out of the test body) when there are other ranks to strand.
class RankPrinter : public ::testing::EmptyTestEventListener {
 public:
  RankPrinter(int rank, int size) : rank_(rank), size_(size) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    fprintf(stderr, "[rank %d] failure in %s:%d\n%s\n", rank_, r.file_name() ? r.file_name() : "?", r.line_number(),
            r.summary());
    if (r.fatally_failed() && size_ > 1) {
      fprintf(stderr, "[rank %d] fatal failure: aborting all %d ranks, whose test bodies no longer match\n", rank_,
              size_);
      fflush(stdout);
      fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }

 private:
  int rank_;
  int size_;
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  ::testing::InitGoogleTest(&argc, argv);
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) delete listeners.Release(listeners.default_result_printer());
  listeners.Append(new RankPrinter(rank, size));
  int local = RUN_ALL_TESTS() != 0 ? 1 : 0, global = 0;
  MPI_Allreduce(&local, &global, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return global;
}
