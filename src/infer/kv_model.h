// The GPT forward pass for inference with a KV cache: each layer's keys and values of every token already seen are
// kept in backend memory, so a step runs the model only over its new tokens. A step's rows may belong to several
// sequences (continuous batching) and a sequence's rows to a prompt being prefilled or to one decoded token: each
// row names its cache slot and its position. fp32 throughout, on any backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "checkpoint/checkpoint.h"
#include "model/model_config.h"
#include "model/param_table.h"

namespace ember {

struct KvModelShape {
  int max_slots = 1;       // sequences cached at once
  int max_rows = 1;        // tokens run in one step, over all sequences
  int max_logit_rows = 1;  // rows of one step whose logits are computed
  int max_T = 0;           // cached positions per sequence (0: the model's block_size)
};

class KvModel {
 public:
  // Allocates the weights, the caches and the activations of one step; shape.max_T 0 becomes block_size.
  KvModel(const ModelConfig& config, Backend& backend, KvModelShape shape);
  ~KvModel();
  KvModel(const KvModel&) = delete;
  KvModel& operator=(const KvModel&) = delete;

  // The backend memory a KvModel of this shape allocates, from its arguments alone.
  static size_t footprint_bytes(const ModelConfig& config, KvModelShape shape);

  const ModelConfig& config() const { return config_; }
  const KvModelShape& shape() const { return shape_; }
  const ParamTable& table() const { return table_; }
  Backend& backend() { return backend_; }
  // (table().total_numel()) backend memory in the arena layout of the table, as GPT's params().
  float* params() { return params_; }

  // One step over n rows (host arrays): row i is token tokens[i] at position pos[i] of the sequence in slot slots[i].
  // A slot's rows in one step have consecutive positions, and every earlier position of the slot was cached by an
  // earlier step (positions restart at 0 for a slot that begins a new sequence). The logits of the m rows
  // logit_rows[0..m) (indexes into the n rows) are written to logits (host, m x vocab_size, fp32).
  void forward(const int32_t* tokens, const int32_t* slots, const int32_t* pos, int n, const int* logit_rows, int m,
               float* logits);

 private:
  float* alloc_floats(size_t n);

  ModelConfig config_;
  Backend& backend_;
  KvModelShape shape_;
  ParamTable table_;
  std::vector<void*> allocations_;
  float* params_ = nullptr;
  std::vector<float*> k_cache_, v_cache_;                                   // per layer, (max_slots, max_T, C)
  int32_t *tokens_ = nullptr, *slots_ = nullptr, *pos_ = nullptr;           // (max_rows)
  float *x_ = nullptr, *ln_ = nullptr, *mean_ = nullptr, *rstd_ = nullptr;  // (rows, C), (rows, C), (rows), (rows)
  float *qkv_ = nullptr, *att_ = nullptr, *proj_ = nullptr;                 // (rows, 3C), (rows, C), (rows, C)
  float *fc_ = nullptr, *fc_gelu_ = nullptr;                                // (rows, 4C)
  float *picked_ = nullptr, *logits_ = nullptr;                             // (max_logit_rows, C), (max_logit_rows, V)
};

// A KvModel of `shape` holding the weights of the checkpoint at `path` (metadata `meta`, as read_checkpoint_meta
// gives it), after checking that it and `extra_bytes` of the caller's buffers fit in the memory available.
std::unique_ptr<KvModel> load_kv_model(const std::string& path, const CheckpointMeta& meta, Backend& backend,
                                       KvModelShape shape, size_t extra_bytes = 0);

}  // namespace ember
