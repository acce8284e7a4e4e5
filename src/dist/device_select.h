// Device selection: turns training.device, or the --device of eval and generate (cpu, cuda or auto), into this rank's
// backend, one GPU per rank by local rank. CPU-only builds compile it too: they know no CUDA device and refuse `cuda`
// with a hint. It lives with the distributed code because it is collective: ranks agree on the device over MPI.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"

namespace ember {

struct World;

enum DeviceKind { DEVICE_KIND_CPU, DEVICE_KIND_CUDA };

struct DeviceChoice {
  DeviceKind kind = DEVICE_KIND_CPU;
  int cuda_device = -1;      // CUDA ordinal among the visible devices: the local rank (modulo the count when shared)
  bool gpus_shared = false;  // on some node more ranks than GPUs share them (EMBER_SHARE_GPU=1): no NCCL
  std::string name;          // "cpu" or "cuda:0 (NVIDIA GeForce RTX 4090)", for the log
};

// Resolves training.device on every rank alike (it is collective over world.comm unless device is "cpu"):
//  - cpu:  the CPU backend.
//  - cuda: GPU `local_rank` of this node. Errors (ember::Error with a hint): the build has no CUDA backend; no device
//          is visible; the node runs more ranks than it has visible GPUs, unless the environment variable
//          EMBER_SHARE_GPU=1 lets ranks share them round-robin (local_rank % count; for tests on a one-GPU machine).
//  - auto: cuda when the build has the CUDA backend and every rank's node has a visible GPU, else cpu (one job never
//          mixes the two); logs which and why.
// `option` names the setting in the log and in errors: the config key (messages read "training.device = cuda") or a
// command-line flag such as "--device" (they read "--device cuda"). A value other than the three is an error.
DeviceChoice select_device(const World& world, const std::string& device,
                           const std::string& option = "training.device");
// As above with the number of visible CUDA devices given instead of discovered, so tests reach every rule on any
// machine (the build check still applies: a CPU-only build refuses `cuda` and picks cpu for `auto`).
DeviceChoice select_device(const World& world, const std::string& device, int visible_cuda_devices,
                           const std::string& option = "training.device");

// The backend of a choice: make_cpu_backend() or make_cuda_backend(choice.cuda_device).
std::unique_ptr<Backend> make_backend(const DeviceChoice& choice);

}  // namespace ember
