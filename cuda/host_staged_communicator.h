// The MPI Communicator for GPU buffers without a CUDA-aware MPI: device buffers are copied through pinned host memory
// around each MPI collective. The fallback when NCCL is missing, and the path for ranks that share one GPU.
#pragma once

#include <mpi.h>

#include <memory>

#include "parallel/communicator.h"

namespace ember {

class Backend;

// An MPI communicator on a duplicate of `comm` that also takes device buffers: a device buffer is copied into a
// pinned staging buffer once every op `backend` queued before the call has finished (every op on the device when
// backend is null), reduced by MPI on the host, and copied back before the call (blocking) or the request's
// completion (non-blocking) returns. The copy in is synchronous, so non-blocking collectives start in call order on
// every rank; staging buffers are pooled and reused. Host buffers go to MPI directly. Requests must not outlive the
// communicator.
std::unique_ptr<Communicator> make_host_staged_communicator(MPI_Comm comm, Backend* backend = nullptr,
                                                            std::shared_ptr<const CollectiveWatch> watch = {});

}  // namespace ember
