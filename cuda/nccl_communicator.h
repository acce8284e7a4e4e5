// The NCCL Communicator: data-parallel collectives on GPU memory, one NCCL communicator per rank on one device.
// Built only when CMake finds NCCL (EMBER_HAVE_NCCL); code outside cuda/ includes this header behind that macro.
#pragma once

#include <mpi.h>

#include <memory>

#include "parallel/communicator.h"

namespace ember {

class Backend;

// Creates an NCCL communicator over the ranks of `comm` (collective over it): rank 0 makes the ncclUniqueId, an MPI
// broadcast hands it to every rank, then ncclCommInitRank. Each rank uses the device of `backend` when it is a
// CudaBackend (else the current CUDA device); every rank must have a device of its own (NCCL refuses two ranks on one
// GPU). Collectives on device buffers run on a dedicated stream, ordered after every op `backend` queued before the
// call (after all work on the device when backend is null); blocking calls return with the result in place,
// non-blocking ones return a request whose wait() synchronizes on its event. Host buffers (scalars, the resume path)
// go over MPI on a duplicate of `comm`. Requests must not outlive the communicator.
std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, Backend* backend = nullptr,
                                                     std::shared_ptr<const CollectiveWatch> watch = {});

}  // namespace ember
