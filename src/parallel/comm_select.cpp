// Communicator selection (implementation). The GPU communicators live in cuda/ and are reached only behind
// EMBER_HAVE_CUDA / EMBER_HAVE_NCCL, so a CPU-only build holds no reference to them.
#include "parallel/comm_select.h"

#include "core/enum_names.h"
#include "core/error.h"
#include "core/log.h"
#include "parallel/mpi_communicator.h"
#ifdef EMBER_HAVE_CUDA
#include "host_staged_communicator.h"
#endif
#ifdef EMBER_HAVE_NCCL
#include "nccl_communicator.h"
#endif

namespace ember {
namespace {

#ifdef EMBER_HAVE_NCCL
constexpr bool kBuiltWithNccl = true;
#else
constexpr bool kBuiltWithNccl = false;
#endif

std::unique_ptr<Communicator> make_mpi(const World& world, const DeviceChoice& device, Backend& backend,
                                       const std::string& why) {
  log_info("communicator: %s (%s)", device.kind == DEVICE_KIND_CUDA ? "mpi, staged through pinned host memory" : "mpi",
           why.c_str());
  if (device.kind == DEVICE_KIND_CPU) return make_mpi_communicator(world.comm, world.watch);
#ifdef EMBER_HAVE_CUDA
  return make_host_staged_communicator(world.comm, &backend, world.watch);
#else
  (void)backend;
  EMBER_ASSERT(false, "a CUDA device was chosen in a build without the CUDA backend");
  return nullptr;
#endif
}

std::unique_ptr<Communicator> make_nccl(const World& world, Backend& backend, const std::string& why) {
  log_info("communicator: nccl (%s)", why.c_str());
#ifdef EMBER_HAVE_NCCL
  return make_nccl_communicator(world.comm, &backend, world.watch);
#else
  (void)world, (void)backend;
  EMBER_ASSERT(false, "NCCL chosen in a build without it");
  return nullptr;
#endif
}

}  // namespace

const char* comm_request_name(CommRequest c) {
  switch (c) {
    case CommRequest::automatic:
      return "auto";
    case CommRequest::nccl:
      return "nccl";
    case CommRequest::mpi:
      return "mpi";
  }
  return "?";
}

std::optional<CommRequest> parse_comm_request(const std::string& name) {
  return find_by_name(kCommRequests, comm_request_name, name);
}

std::unique_ptr<Communicator> make_communicator(const World& world, const DeviceChoice& device, CommRequest comm,
                                                Backend& backend) {
  const bool gpu = device.kind == DEVICE_KIND_CUDA;
  if (comm == CommRequest::mpi) return make_mpi(world, device, backend, "training.comm = mpi");
  if (comm == CommRequest::nccl) {
    if (!gpu)
      throw_error("training.comm = nccl: NCCL needs the CUDA backend, but this run trains on the CPU",
                  "set training.comm = mpi (or auto), or train on GPUs with training.device = cuda");
    if (!kBuiltWithNccl)
      throw_error("training.comm = nccl: this ember was built without NCCL",
                  "install NCCL (libnccl-dev, or NVIDIA's nccl package) and rebuild, or set training.comm = mpi "
                  "(or auto)");
    if (device.gpus_shared)
      throw_error("training.comm = nccl: ranks share GPUs (EMBER_SHARE_GPU=1), and NCCL needs one GPU per rank",
                  "set training.comm = mpi (or auto), or launch at most one rank per GPU");
    return make_nccl(world, backend, "training.comm = nccl");
  }
  if (!gpu) return make_mpi(world, device, backend, "training.comm = auto on the CPU");
  if (!kBuiltWithNccl)
    return make_mpi(world, device, backend, "training.comm = auto: this ember was built without NCCL");
  if (device.gpus_shared)
    return make_mpi(world, device, backend, "training.comm = auto: ranks share GPUs, which NCCL does not allow");
  return make_nccl(world, backend, "training.comm = auto on GPUs");
}

}  // namespace ember
