// HDF5 checkpoints (layout in docs/checkpoint-format.md): fp32 weights under Hugging Face GPT-2 paths, AdamW state,
// run metadata and per-rank state. Written atomically (temp file, fsync, rename, then `latest`), newest K kept.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model_config.h"
#include "model/param_table.h"

namespace ember {

constexpr const char* CHECKPOINT_FORMAT = "ember-checkpoint";
constexpr int CHECKPOINT_FORMAT_VERSION = 1;

// Everything in a checkpoint except the big tensors.
struct CheckpointMeta {
  int64_t step = 0;              // optimizer steps completed
  int64_t tokens_seen = 0;
  int world_size = 1;
  std::string mode = "sync";
  std::string created;           // ISO 8601 time, filled in by save
  std::string version;           // ember version, filled in by save
  std::string config_ini;        // the resolved run configuration
  ModelConfig model;             // also stored as root attributes, so readers need not parse config_ini
  // AdamW hyper-parameters and its step counter (root of /optimizer).
  int64_t optimizer_step = 0;
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.0f, lr = 0.0f;
  // Per-rank state (single rank here: /ranks/0).
  uint64_t data_cursor = 0;      // next global sample index of the training DataLoader
  uint64_t rng_offset = 0;       // Philox counter offset of the run's RNG stream
};

// Host-side views of the arenas (each ParamTable::total_numel() floats). m and v may be null when only weights
// are needed (eval, generate).
struct CheckpointTensors {
  float* params = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
};

// Path of the checkpoint for `step` inside `folder`: folder/step_00001000.h5.
std::string checkpoint_path(const std::string& folder, int64_t step);

// Writes folder/step_<8 digits>.h5 via a .tmp file (flushed, closed, fsynced, renamed), points folder/latest at it
// atomically, and deletes all but the newest `keep_latest_k` step_*.h5. On failure (unwritable folder, full disk)
// throws ember::Error and leaves earlier checkpoints and `latest` untouched. Returns the path written.
std::string save_checkpoint(const std::string& folder, const CheckpointMeta& meta, const ParamTable& table,
                            const CheckpointTensors& tensors, int keep_latest_k);

// Reads and validates format name, version and metadata (throws ember::Error naming the file, with a hint).
CheckpointMeta read_checkpoint_meta(const std::string& path);

// Loads the tensors after checking that every dataset of `table` exists with its exact shape (mismatch: an error
// naming the dataset, both shapes and a hint); the Fletcher32 filter turns corruption into an error too.
// Fills `meta` as read_checkpoint_meta does.
void load_checkpoint(const std::string& path, const ParamTable& table, const CheckpointTensors& tensors,
                     CheckpointMeta& meta);

// Resolves a --resume value: "" -> "" (fresh start); "auto" -> the checkpoint `latest` names in `folder`, or the
// newest step_*.h5 if `latest` is missing, or "" if the folder has none; anything else must be an existing file.
std::string resolve_resume(const std::string& folder, const std::string& resume);

}  // namespace ember
