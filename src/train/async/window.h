// The async-mode exchange (internal to exchange*.cpp): the window both sides open, and what they share of it.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>

#include "train/async/exchange.h"

namespace ember {

// One MPI_Put/MPI_Get moves at most this many bytes (its count is an int).
constexpr size_t kMaxTransfer = size_t(1) << 30;
constexpr int kCenter = 0;  // the center's rank in the exchange's communicator

// The window over `comm` (collective): `bytes` of memory at *base on the center, none on a worker. Errors on the
// window return to the checks instead of aborting inside MPI.
MPI_Win allocate_window(MPI_Comm comm, size_t bytes, uint8_t** base);
// Checks that `comm` fits the shape and this rank the role (expected_rank < 0: any worker rank).
void check_comm(MPI_Comm comm, const AsyncShape& shape, int expected_rank);

}  // namespace ember
