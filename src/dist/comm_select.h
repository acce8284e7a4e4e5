// Communicator selection: turns training.comm (auto, nccl or mpi) and the chosen device into this rank's
// Communicator: NCCL for GPU buffers when built, MPI over host memory on the CPU, host-staged MPI for GPU buffers.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"
#include "dist/communicator.h"
#include "dist/device_select.h"
#include "dist/world.h"

namespace ember {

// Collective over world.comm; every rank passes the same comm and an agreed device kind (select_device).
//  - mpi:  MPI; on a GPU, through pinned host buffers (the distribution's MPI is not CUDA-aware).
//  - nccl: NCCL on the GPU of `backend`. Errors (ember::Error with a hint): the device is the CPU; the build has no
//          NCCL; ranks share GPUs (EMBER_SHARE_GPU=1), which NCCL refuses.
//  - auto: nccl on a GPU when the build has NCCL and no GPU is shared, else mpi; logs which and why.
// Collectives on `backend`'s buffers are ordered after the ops queued on it, so `backend` must outlive every call
// (the communicator itself may be destroyed after it).
std::unique_ptr<Communicator> make_communicator(const World& world, const DeviceChoice& device, const std::string& comm,
                                                Backend& backend);

}  // namespace ember
