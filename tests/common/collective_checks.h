// Helpers shared by the communicator suites (MPI on host buffers, NCCL and host-staged MPI on device buffers):
// per-rank mismatch counting combined over the world, and inputs whose reductions are exact in fp32.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdio>
#include <string>

#include "parallel/communicator.h"
#include "test_support.h"

namespace ember::test {

// Mismatches on this rank; the first few are printed with the rank so a multi-rank log says where it went wrong.
struct Mismatches {
  long long count = 0;

  template <class T>
  void check(const std::string& what, size_t index, T got, T want) {
    if (got == want) return;
    if (count++ < 5)
      fprintf(stderr, "[rank %d] %s: index %zu: got %.17g, want %.17g\n", world_rank(), what.c_str(), index,
              double(got), double(want));
  }
};

// Every rank calls this at the same point, so a failure on any rank fails the test on all of them.
inline long long total_over_ranks(const Mismatches& m) {
  long long total = 0;
  MPI_Allreduce(&m.count, &total, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  return total;
}

// Inputs for SUM and AVG: multiples of 0.5 below 2^10, so every partial sum (in any order) is exact in fp32.
template <class T>
T sum_input(int rank, size_t i) {
  return T(rank + 1) * T(0.5) + T(i % 97);
}

// Inputs for MAX: the maximum sits on a different rank from one index to the next.
template <class T>
T max_input(int rank, size_t i) {
  return T((size_t(rank) * 7 + i) % 13) * T(0.25) - T(1);
}

template <class T>
T input(ReduceOp op, int rank, size_t i) {
  return op == REDUCE_OP_MAX ? max_input<T>(rank, i) : sum_input<T>(rank, i);
}

}  // namespace ember::test
