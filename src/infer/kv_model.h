// The GPT forward pass for inference with a KV cache: each layer's keys and values of every token already seen are
// kept in backend memory, so a step runs the model only over its new tokens. A step's rows may belong to several
// sequences (continuous batching) and a sequence's rows to a prompt being prefilled or to one decoded token: each
// row names its cache slot and its position. fp32, or under the backend's matmul precision bf16 (set before
// construction) with the weights and the GEMMs' inputs stored in bf16, as GPT stores them: half the bytes a decoding
// step reads. Under int8, as under bf16, save that the four dense layers' products and the lm_head's are int8
// (backend.h; the constructor sets Backend::set_int8_lm_head): the backend quantizes each of those weights from its
// fp32 master once, per output channel, and a decoding step reads those int8 copies, a quarter of the fp32 bytes. The
// caches, the attention and the residual stream stay fp32 either way.
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

  // The backend memory a KvModel of this shape allocates, from its arguments alone, at the backend's matmul precision
  // `precision` (fp32, bf16 or int8).
  static size_t footprint_bytes(const ModelConfig& config, KvModelShape shape, MatmulPrecision precision);
  // What the backend keeps beside it under int8: the int8 copy of each dense weight and of wte (the lm_head) per output
  // channel, with its scales (the forward products' copies only: a KvModel runs no backward pass). 0 otherwise.
  static size_t quantized_weight_copy_bytes(const ModelConfig& config, MatmulPrecision precision);

  const ModelConfig& config() const { return config_; }
  const KvModelShape& shape() const { return shape_; }
  const ParamTable& table() const { return table_; }
  Backend& backend() { return backend_; }
  // (table().total_numel()) backend memory in the arena layout of the table, as GPT's params(). Taking it marks the
  // weights changed: under bf16 the next forward() casts them again.
  float* params() {
    weights_changed_ = true;
    return params_;
  }
  bool bf16_storage() const { return bf16_; }
  // Under rotary positions (no wpe) a sequence runs past max_T without recomputing anything: positions go on growing,
  // each full-attention layer's cache is a ring of the last max_T - 1 tokens (and this step's), so a query attends to
  // at most max_T - 1 earlier tokens, as in training. Otherwise positions stay below max_T.
  bool rolling_context() const { return rolling_; }
  // Layer l's attention over its cache: its ring of rows per slot, its window, bias and (rope) rotation.
  Backend::KvAttention layer_attention(int l) const;

  // One step over n rows (host arrays): row i is token tokens[i] at position pos[i] of the sequence in slot slots[i].
  // A slot's rows in one step have consecutive positions, and every earlier position of the slot was cached by an
  // earlier step (positions restart at 0 for a slot that begins a new sequence); below max_T unless rolling_context().
  // The logits of the m rows logit_rows[0..m) (indexes into the n rows) are written to logits (host, m x vocab_size,
  // fp32).
  void forward(const int32_t* tokens, const int32_t* slots, const int32_t* pos, int n, const int* logit_rows, int m,
               float* logits);

 private:
  float* alloc_floats(size_t n);
  TensorOut alloc_gemm_input(size_t n);  // bf16 under bf16 storage, else fp32
  TensorIn w(const ParamInfo& info) const {
    return bf16_ ? TensorIn(params_bf16_ + info.offset) : TensorIn(params_ + info.offset);
  }
  // A dense layer's weight (or wte, for the lm_head) as its product reads it: under int8 the fp32 master, which the
  // backend quantizes.
  TensorIn dense_w(const ParamInfo& info) const { return int8_ ? TensorIn(params_ + info.offset) : w(info); }

  ModelConfig config_;
  Backend& backend_;
  KvModelShape shape_;
  ParamTable table_;
  std::vector<void*> allocations_;
  size_t allocated_bytes_ = 0;  // as footprint_bytes() counts them
  bool bf16_ = false;           // the weights' working copy and the GEMMs' inputs in bf16 (bf16 and int8)
  bool int8_ = false;           // the dense layers' products in int8
  float* params_ = nullptr;
  BFloat16* params_bf16_ = nullptr;  // (total_numel) the working copy under bf16 storage
  bool weights_changed_ = true;      // since the working copy was cast
  bool rolling_ = false;
  std::vector<float*> k_cache_, v_cache_;                          // per layer, (max_slots, ring, C)
  float *rope_cos_ = nullptr, *rope_sin_ = nullptr;                // under rope, (max_rows, HS/2): the step's rows
  std::vector<float> rope_host_;                                   // under rope, their cos then sin, built on the host
  int32_t *tokens_ = nullptr, *slots_ = nullptr, *pos_ = nullptr;  // (max_rows)
  float *x_ = nullptr, *mean_ = nullptr, *rstd_ = nullptr;         // (rows, C), (rows), (rows)
  float *qkv_ = nullptr, *att_ = nullptr, *proj_ = nullptr;        // (rows, 3C), (rows, C), (rows, C)
  float* fc_ = nullptr;                                            // (rows, 4C)
  TensorOut ln_, att_in_, fc_gelu_;  // GEMM inputs: (rows, C), (rows, C) (att_ itself in fp32), (rows, 4C)
  TensorOut picked_;                 // (max_logit_rows, C): the ln_f rows whose logits are wanted
  float* logits_ = nullptr;          // (max_logit_rows, V)
};

// A KvModel of `shape` holding the weights of the checkpoint at `path` (metadata `meta`, as read_checkpoint_meta
// gives it), after checking that it and `extra_bytes` of the caller's buffers fit in the memory available.
std::unique_ptr<KvModel> load_kv_model(const std::string& path, const CheckpointMeta& meta, Backend& backend,
                                       KvModelShape shape, size_t extra_bytes = 0);

}  // namespace ember
