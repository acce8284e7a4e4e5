// Device selection (implementation). Discovery goes through backend/device.h (cuda/device_info.cu, or zero devices
// in a CPU-only build), so this file holds no CUDA call and builds everywhere.
#include "parallel/device_select.h"

#include <mpi.h>

#include <cstdlib>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "backend/device.h"
#include "core/enum_names.h"
#include "core/error.h"
#include "core/log.h"
#include "parallel/host_collectives.h"
#include "parallel/mpi_check.h"
#include "parallel/world.h"

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

// The error for a rank that sees no usable GPU: none visible, or the runtime's reason (an old driver).
Error no_gpu_error(const World& world, const CudaDevices& visible, const std::string& option,
                   const std::string& chosen) {
  if (visible.problem)
    return Error(chosen + ": " + visible.problem->what + " on " + rank_on_host(world),
                 visible.problem->hint + ", or set " + setting(option, "cpu"));
  return Error(chosen + ": no CUDA device is visible to " + rank_on_host(world),
               "check nvidia-smi and CUDA_VISIBLE_DEVICES on " + world.host +
                   " (and that the job asked for GPUs, e.g. --gpus-per-node), or set " + setting(option, "cpu"));
}

// GPU local_rank (modulo the visible count) of the devices this rank sees: with every GPU of a node visible that is
// one GPU per local rank, and with one bound to each rank (srun --gpus-per-task=1, --gpu-bind) it is that one. Ranks
// share a GPU when they picked the same UUID, which only the UUIDs can tell: allowed with EMBER_SHARE_GPU=1, refused
// otherwise. Collective over world.comm; every rank throws the same error. `option = value` is the setting being
// resolved, named in errors; `why` says in the log why the GPU was chosen.
DeviceChoice choose_cuda(const World& world, const CudaDevices& visible, const std::string& option,
                         const std::string& value, const std::string& why) {
  const std::string chosen = setting(option, value);
  std::optional<Error> local;
  bool share = false;
  if (visible.count() == 0)
    local = no_gpu_error(world, visible, option, chosen);
  else
    local = attempt([&] { share = share_gpus_from_env(); }, "");
  if (std::optional<AgreedError> e = agree_on_error(world, local)) throw *e;

  const int ordinal = world.local_rank % visible.count();
  const CudaDevice& gpu = visible.devices[size_t(ordinal)];
  // Without a UUID (its properties could not be read) a GPU is known by host and ordinal.
  const std::string id = gpu.uuid.empty() ? world.host + "/cuda:" + std::to_string(ordinal) : gpu.uuid;
  // Every rank's host and GPU, as "host\nid" (host names hold no newline).
  std::vector<std::string> hosts = all_gather_strings(world, world.host + "\n" + id), ids(hosts.size());
  for (size_t r = 0; r < hosts.size(); ++r) {
    ids[r] = hosts[r].substr(hosts[r].find('\n') + 1);
    hosts[r].resize(hosts[r].find('\n'));
  }
  int first = -1, second = -1;  // the first two ranks that picked the same GPU
  for (int j = 1; j < world.size && first < 0; ++j)
    for (int i = 0; i < j; ++i)
      if (ids[size_t(i)] == ids[size_t(j)]) {
        first = i, second = j;
        break;
      }
  const bool shared = first >= 0;
  if (shared && !share) {
    const std::string& host = hosts[size_t(first)];
    std::set<std::string> gpus;
    int ranks = 0;
    for (int r = 0; r < world.size; ++r)
      if (hosts[size_t(r)] == host) gpus.insert(ids[size_t(r)]), ++ranks;
    const std::string n = std::to_string(gpus.size());
    throw_error(chosen + ": ranks " + std::to_string(first) + " and " + std::to_string(second) + " on " + host +
                    " would share one GPU (" + ids[size_t(first)] + "): " + std::to_string(ranks) +
                    " ranks run there on " + n + " GPU(s) (one rank per GPU)",
                "launch at most " + n + " rank(s) per node (mpirun -np " + n + ", srun --ntasks-per-node=" + n +
                    " --gpus-per-task=1), or set EMBER_SHARE_GPU=1 to let ranks share GPUs round-robin (for tests on "
                    "a one-GPU machine: slower, and with training.comm = mpi)");
  }
  DeviceChoice c;
  c.kind = DEVICE_KIND_CUDA;
  c.cuda_device = ordinal;
  c.gpus_shared = shared;
  c.name = "cuda:" + std::to_string(ordinal) + " (" + gpu.name + ")";
  log_info("device: cuda (%s) | %s -> %s, %s%s", why.c_str(), rank_on_host(world).c_str(), c.name.c_str(), id.c_str(),
           shared ? " | EMBER_SHARE_GPU=1: ranks share GPUs round-robin" : "");
  return c;
}

// `fallback`: auto wanted a GPU that the CUDA build could not have, which the log says as a warning.
DeviceChoice choose_cpu(const std::string& why, bool fallback = false) {
  DeviceChoice c;
  c.name = "cpu";
  if (fallback)
    log_warn("device: cpu (%s)", why.c_str());
  else
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
  return select_device(world, device, discover ? discover_cuda_devices() : CudaDevices{}, option);
}

DeviceChoice select_device(const World& world, DeviceRequest device, const CudaDevices& visible,
                           const std::string& option) {
  if (device == DeviceRequest::cpu) return choose_cpu(setting(option, "cpu"));
  if (device == DeviceRequest::cuda) {
    if (!kBuiltWithCuda)
      throw_error(setting(option, "cuda") + ": this ember was built without the CUDA backend",
                  "install the CUDA toolkit (nvcc on PATH, or -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc) and "
                  "rebuild, or set " +
                      setting(option, "cpu"));
    return choose_cuda(world, visible, option, "cuda", setting(option, "cuda"));
  }
  // Every rank must take the same branch: a job never mixes backends, and NCCL needs every rank on a GPU.
  const std::string chosen = setting(option, "auto");
  if (!kBuiltWithCuda) return choose_cpu(chosen + ": this ember was built without the CUDA backend");
  const int without_gpu = all_ranks(world, visible.count() == 0, MPI_SUM);
  // This rank's reason, where the runtime gave one (an old driver): the warning shows it.
  const std::string reason = visible.problem ? " (" + visible.problem->what + ")" : "";
  if (without_gpu == world.size)
    return choose_cpu(world.size == 1 ? chosen + ": no CUDA device is visible on " + world.host + reason
                                      : chosen + ": no rank sees a CUDA device" + reason,
                      true);
  if (without_gpu > 0)
    return choose_cpu(chosen + ": " + std::to_string(without_gpu) + " of " + std::to_string(world.size) +
                          " ranks see no CUDA device" + reason,
                      true);
  return choose_cuda(world, visible, option, "auto", chosen + ": the CUDA backend is built and every rank sees a GPU");
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
