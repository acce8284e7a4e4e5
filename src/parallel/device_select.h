// Device selection: turns training.device, or the --device of eval and generate (cpu, cuda or auto), into this rank's
// backend, one GPU per rank by local rank. CPU-only builds compile it too: they know no CUDA device and refuse `cuda`
// with a hint. It lives with the distributed code because it is collective: ranks agree on the device over MPI.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "backend/backend.h"
#include "backend/device.h"

namespace ember {

struct World;

// A requested device (training.device, or --device of eval and generate): cpu, cuda, or auto (written "auto").
enum class DeviceRequest { cpu, cuda, automatic };
inline constexpr DeviceRequest kDeviceRequests[] = {DeviceRequest::cpu, DeviceRequest::cuda, DeviceRequest::automatic};

// "cpu", "cuda" or "auto": the one place these names are spelled.
const char* device_request_name(DeviceRequest d);
// The request a name denotes, or nothing for any other text.
std::optional<DeviceRequest> parse_device_request(const std::string& name);

enum DeviceKind { DEVICE_KIND_CPU, DEVICE_KIND_CUDA };

struct DeviceChoice {
  DeviceKind kind = DEVICE_KIND_CPU;
  int cuda_device = -1;      // CUDA ordinal among this rank's visible devices: local rank modulo their count
  bool gpus_shared = false;  // two ranks picked the same GPU (by UUID; allowed with EMBER_SHARE_GPU=1): no NCCL
  std::string name;          // "cpu" or "cuda:0 (NVIDIA GeForce RTX 4090)", for the log
};

// Resolves training.device on every rank alike (it is collective over world.comm unless device is cpu):
//  - cpu:  the CPU backend.
//  - cuda: GPU local_rank modulo the number this rank sees: one per local rank when every GPU of a node is visible,
//          the rank's own when the launcher binds one to each (srun --gpus-per-task=1, --gpu-bind,
//          CUDA_VISIBLE_DEVICES per rank). Ranks exchange the UUIDs they picked; two ranks on one GPU are an error
//          unless the environment variable EMBER_SHARE_GPU=1 lets ranks share GPUs (for tests on a one-GPU machine).
//          Other errors (ember::Error with a hint, on every rank): the build has no CUDA backend; no device is
//          visible; the driver is too old for the CUDA runtime (the runtime's error and both versions).
//  - auto: cuda when the build has the CUDA backend and every rank's node has a visible GPU, else cpu (one job never
//          mixes the two); logs which and why, as a warning when a CUDA build falls back to the CPU.
// `option` names the setting in the log and in errors: the config key (messages read "training.device = cuda") or a
// command-line flag such as "--device" (they read "--device cuda").
DeviceChoice select_device(const World& world, DeviceRequest device, const std::string& option = "training.device");
// As above with this rank's visible CUDA devices given instead of discovered, so tests reach every rule on any
// machine (the build check still applies: a CPU-only build refuses `cuda` and picks cpu for `auto`).
DeviceChoice select_device(const World& world, DeviceRequest device, const CudaDevices& visible,
                           const std::string& option = "training.device");

// The backend of a choice: make_cpu_backend() or make_cuda_backend(choice.cuda_device).
std::unique_ptr<Backend> make_backend(const DeviceChoice& choice);

}  // namespace ember
