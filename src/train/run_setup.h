// What every kind of training run sets up the same way: the compute backend of a training rank (threads, device,
// matmul precision, determinism), and the log lines of the memory it holds.
#pragma once

#include <cstddef>
#include <memory>

#include "backend/backend.h"
#include "parallel/device_select.h"
#include "parallel/world.h"
#include "train/run_config.h"

namespace ember {

class AdamW;
class GPT;

// Applies training.threads (0 keeps the OpenMP default).
void set_training_threads(const TrainingConfig& training);

// A training rank's backend: the device agreed over `world` (select_device, collective unless training.device is cpu),
// with training.precision and training.deterministic applied. Also applies training.threads.
struct TrainingBackend {
  DeviceChoice device;
  std::unique_ptr<Backend> backend;
};
TrainingBackend make_training_backend(const World& world, const TrainingConfig& training);

// Logs the backend memory the model and optimizer hold for the configured batch: parameters and gradients, AdamW
// moments, activations with the recompute mode, and extra_bytes (ZeRO-1's gradient shard). All of it is allocated at
// start-up, so this is the training peak apart from op scratch, the communicator's buckets and the GPU libraries'
// workspaces. Returns the bytes counted.
size_t log_model_memory(const GPT& model, const AdamW& optimizer, const Backend& backend, size_t extra_bytes = 0);

// Logs what was measured once a step has run: the backend's peak allocation against the start-up count, and on a GPU
// the memory the device reports in use (CUDA context and library workspaces included, and with `gpu_shared` the other
// ranks on the same GPU).
void log_measured_memory(const Backend& backend, size_t counted_bytes, bool gpu_shared = false);

}  // namespace ember
