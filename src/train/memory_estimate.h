// The memory a training run will need: the model's estimate (model/memory_estimate.h) plus AdamW's moments and
// ZeRO-1's gradient shard, from the run's configuration alone.
#pragma once

#include <string>

#include "backend/backend.h"
#include "model/memory_estimate.h"
#include "train/run_config.h"

namespace ember {

// What one training rank of a world of `world_size` ranks allocates at start-up at matmul precision `precision` (the
// backend's, which training.precision = auto leaves to the device): the figure log_model_memory() prints once the
// model and optimizer exist (op scratch, communication buckets and library workspaces aside).
MemoryEstimate estimate_training_memory(const RunConfig& config, int world_size, MatmulPrecision precision);

// The hint of a training run that does not fit.
std::string training_memory_hint();

}  // namespace ember
