// Communicator selection: turns training.comm (auto, nccl or mpi) and the chosen device into this rank's
// Communicator: NCCL for GPU buffers when built, MPI over host memory on the CPU, host-staged MPI for GPU buffers.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "backend/backend.h"
#include "parallel/communicator.h"
#include "parallel/device_select.h"
#include "parallel/world.h"

namespace ember {

// A requested communicator (training.comm): auto (written "auto"), nccl or mpi.
enum class CommRequest { automatic, nccl, mpi };
inline constexpr CommRequest kCommRequests[] = {CommRequest::automatic, CommRequest::nccl, CommRequest::mpi};

// "auto", "nccl" or "mpi": the one place these names are spelled.
const char* comm_request_name(CommRequest c);
// The request a name denotes, or nothing for any other text.
std::optional<CommRequest> parse_comm_request(const std::string& name);

// Collective over world.comm; every rank passes the same comm and an agreed device kind (select_device).
//  - mpi:  MPI; on a GPU, through pinned host buffers (the distribution's MPI is not CUDA-aware).
//  - nccl: NCCL on the GPU of `backend`. Errors (ember::Error with a hint): the device is the CPU; the build has no
//          NCCL; ranks share GPUs (EMBER_SHARE_GPU=1), which NCCL refuses.
//  - auto: nccl on a GPU when the build has NCCL and no GPU is shared, else mpi; logs which and why.
// Collectives on `backend`'s buffers are ordered after the ops queued on it, so `backend` must outlive every call
// (the communicator itself may be destroyed after it).
std::unique_ptr<Communicator> make_communicator(const World& world, const DeviceChoice& device, CommRequest comm,
                                                Backend& backend);

}  // namespace ember
