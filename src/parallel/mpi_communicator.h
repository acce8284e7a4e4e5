// The MPI Communicator's one tunable: the largest piece a single MPI call moves (MPI counts are int, ours size_t).
// Tests lower it to drive the chunked path that real counts above INT_MAX take, without 8 GiB buffers.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <memory>

#include "parallel/communicator.h"

namespace ember {

// 2^30 elements: below INT_MAX as a count, and a power of two so pieces of a float buffer stay 4 KiB aligned.
inline constexpr size_t MPI_MAX_CHUNK_ELEMENTS = size_t{1} << 30;

// As make_mpi_communicator, but every collective is split into pieces of at most max_chunk elements (bytes for
// broadcast). make_mpi_communicator(comm, watch) is make_mpi_communicator_chunked(comm, MPI_MAX_CHUNK_ELEMENTS, watch).
std::unique_ptr<Communicator> make_mpi_communicator_chunked(MPI_Comm comm, size_t max_chunk,
                                                            std::shared_ptr<const CollectiveWatch> watch = {});

}  // namespace ember
