// The Trainer: one synchronous data-parallel training run over the ranks of a World, from a resolved RunConfig.
// It validates every input (data, resume checkpoint) before writing anything, then loops micro-batches, gradient
// all-reduce (bucketed, overlapped with backward) or ZeRO-1, AdamW steps, logging, validation and checkpoints.
#pragma once

#include <memory>
#include <string>

#include "dist/world.h"
#include "train/run_config.h"

namespace ember {

// Limits of one invocation; the learning-rate schedule still spans training.steps.
struct TrainLimits {
  int stop_after = 0;      // optimizer steps in this invocation (0: no limit)
  double max_runtime = 0;  // seconds of wall clock (0: no limit)
};

struct TrainResult {
  int64_t step = 0;  // optimizer steps completed (in total, counting a resumed run's earlier steps)
  double last_loss = 0.0;
  double last_val_loss = -1.0;  // -1 when never evaluated
  std::string last_checkpoint;  // "" when none was written
  bool stopped_early = false;   // a signal or --max-runtime stopped the run (after a checkpoint)
};

class Trainer {
 public:
  // config_ini is the resolved configuration as INI text (printed and stored in checkpoints).
  Trainer(const World& world, const RunConfig& config, std::string config_ini, TrainLimits limits = {});
  ~Trainer();
  TrainResult run();

 private:
  struct State;
  std::unique_ptr<State> s_;
};

class AdamW;
class Backend;
class GPT;
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
