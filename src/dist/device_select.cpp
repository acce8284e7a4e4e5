// Device selection (implementation). Discovery goes through backend/device.h (cuda/device_info.cu, or zero devices
// in a CPU-only build), so this file holds no CUDA call and builds everywhere.
#include "dist/device_select.h"

#include <mpi.h>

#include <cstdlib>
#include <string>

#include "backend/device.h"
#include "core/enum_names.h"
#include "core/error.h"
#include "core/log.h"
#include "dist/mpi_check.h"
#include "dist/world.h"

namespace ember {
namespace {

#ifdef EMBER_HAVE_CUDA
constexpr bool kBuiltWithCuda = true;
#else
constexpr bool kBuiltWithCuda = false;
#endif

// EMBER_SHARE_GPU=1 lets more ranks than GPUs share a node's GPUs round-robin; unset, empty or 0 keeps one rank
// per GPU. Anything else is a typo worth stopping for.
bool share_gpus_from_env() {
  const char* v = std::getenv("EMBER_SHARE_GPU");
  const std::string s = v ? v : "";
  if (s.empty() || s == "0") return false;
  if (s == "1") return true;
  throw_error("EMBER_SHARE_GPU=" + s + ": must be 0 or 1",
              "unset it (one rank per GPU) or set EMBER_SHARE_GPU=1 to let ranks share GPUs round-robin");
}

int all_ranks(const World& world, int v, MPI_Op op) {
  int out = v;
  EMBER_MPI_CHECK(MPI_Allreduce(&v, &out, 1, MPI_INT, op, world.comm));
  return out;
}

std::string rank_on_host(const World& world) { return "rank " + std::to_string(world.rank) + " on " + world.host; }

// How a setting of the option reads in messages: "training.device = cuda" for a config key, "--device cuda" for a
// command-line flag.
std::string setting(const std::string& option, const std::string& value) {
  return option.rfind("--", 0) == 0 ? option + " " + value : option + " = " + value;
}

// GPU local_rank of this node, after the checks every rank of a node makes alike (they see the same devices).
// `option = value` is the setting being resolved, named in errors; `why` says in the log why the GPU was chosen.
DeviceChoice choose_cuda(const World& world, int count, const std::string& option, const std::string& value,
                         const std::string& why) {
  const std::string chosen = setting(option, value);
  if (count == 0)
    throw_error(chosen + ": no CUDA device is visible to " + rank_on_host(world),
                "check nvidia-smi and CUDA_VISIBLE_DEVICES on " + world.host +
                    " (and that the job asked for GPUs, e.g. --gpus-per-node), or set " + setting(option, "cpu"));
  const bool share = share_gpus_from_env();
  if (world.local_size > count && !share)
    throw_error(chosen + ": " + std::to_string(world.local_size) + " ranks run on " + world.host + " but only " +
                    std::to_string(count) + " CUDA device(s) are visible there (one rank per GPU)",
                "launch at most " + std::to_string(count) + " rank(s) per node (mpirun -np " + std::to_string(count) +
                    ", srun --ntasks-per-node=" + std::to_string(count) +
                    "), or set EMBER_SHARE_GPU=1 to let ranks share GPUs round-robin (for tests on a one-GPU "
                    "machine: slower, and with training.comm = mpi)");
  DeviceChoice c;
  c.kind = DEVICE_KIND_CUDA;
  c.cuda_device = world.local_rank % count;
  c.gpus_shared = all_ranks(world, world.local_size > count, MPI_MAX) != 0;
  c.name = "cuda:" + std::to_string(c.cuda_device) + " (" + cuda_device_name(c.cuda_device) + ")";
  log_info("device: cuda (%s) | %s -> %s%s", why.c_str(), rank_on_host(world).c_str(), c.name.c_str(),
           world.local_size > count ? " | EMBER_SHARE_GPU=1: ranks share the node's GPUs round-robin" : "");
  return c;
}

DeviceChoice choose_cpu(const std::string& why) {
  DeviceChoice c;
  c.name = "cpu";
  log_info("device: cpu (%s)", why.c_str());
  return c;
}

}  // namespace

const char* device_request_name(DeviceRequest d) {
  switch (d) {
    case DeviceRequest::cpu:
      return "cpu";
    case DeviceRequest::cuda:
      return "cuda";
    case DeviceRequest::automatic:
      return "auto";
  }
  return "?";
}

std::optional<DeviceRequest> parse_device_request(const std::string& name) {
  return find_by_name(kDeviceRequests, device_request_name, name);
}

DeviceChoice select_device(const World& world, DeviceRequest device, const std::string& option) {
  // Only cpu skips discovery: a CPU run never touches the CUDA driver.
  const bool discover = device != DeviceRequest::cpu && kBuiltWithCuda;
  return select_device(world, device, discover ? cuda_device_count() : 0, option);
}

DeviceChoice select_device(const World& world, DeviceRequest device, int visible_cuda_devices,
                           const std::string& option) {
  if (device == DeviceRequest::cpu) return choose_cpu(setting(option, "cpu"));
  if (device == DeviceRequest::cuda) {
    if (!kBuiltWithCuda)
      throw_error(setting(option, "cuda") + ": this ember was built without the CUDA backend",
                  "install the CUDA toolkit (nvcc on PATH, or -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc) and "
                  "rebuild, or set " +
                      setting(option, "cpu"));
    return choose_cuda(world, visible_cuda_devices, option, "cuda", setting(option, "cuda"));
  }
  // Every rank must take the same branch: a job never mixes backends, and NCCL needs every rank on a GPU.
  const std::string chosen = setting(option, "auto");
  const int count = kBuiltWithCuda ? visible_cuda_devices : 0;
  const int without_gpu = all_ranks(world, count == 0, MPI_SUM);
  if (!kBuiltWithCuda) return choose_cpu(chosen + ": this ember was built without the CUDA backend");
  if (without_gpu == world.size)
    return choose_cpu(world.size == 1 ? chosen + ": no CUDA device is visible on " + world.host
                                      : chosen + ": no rank sees a CUDA device");
  if (without_gpu > 0)
    return choose_cpu(chosen + ": " + std::to_string(without_gpu) + " of " + std::to_string(world.size) +
                      " ranks see no CUDA device");
  return choose_cuda(world, count, option, "auto", chosen + ": the CUDA backend is built and every rank sees a GPU");
}

std::unique_ptr<Backend> make_backend(const DeviceChoice& choice) {
  if (choice.kind == DEVICE_KIND_CPU) return make_cpu_backend();
#ifdef EMBER_HAVE_CUDA
  return make_cuda_backend(choice.cuda_device);
#else
  EMBER_ASSERT(false, "a CUDA device was chosen in a build without the CUDA backend");
  return nullptr;
#endif
}

}  // namespace ember
