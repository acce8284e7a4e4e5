// The local optimizer step every training rank takes, in its two halves: gradients accumulated over the micro-batches
// of a step, then clipping, the scheduled learning rate and the AdamW update. What happens between the halves (a sync
// run averages the gradients over the ranks; an async worker does nothing) is the caller's policy.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "data/data_loader.h"
#include "model/gpt.h"
#include "train/adamw.h"
#include "train/run_config.h"

namespace ember {

// Host buffers of one micro-batch: B sequences of T input and target tokens.
struct TokenBatch {
  TokenBatch(int batch, int seq_len) : B(batch), T(seq_len), inputs(size_t(B) * size_t(T)), targets(inputs.size()) {}
  int B, T;
  std::vector<int32_t> inputs;   // (B, T)
  std::vector<int32_t> targets;  // (B, T)
};

// Zeroes the gradients, then runs forward and backward over `micro_batches` micro-batches: micro-batch m takes the
// batch.B samples from global sample index first + m * stride of `data`, and its loss gradient is scaled by
// 1 / micro_batches. `last_hook` (may be empty) is the backward hook of the last micro-batch (GPT::set_backward_hook:
// a sync run starts its gradient buckets there). Returns the mean loss of the micro-batches.
double accumulate_gradients(GPT& model, DataLoader& data, TokenBatch& batch, int micro_batches, uint64_t first,
                            uint64_t stride, const std::function<void(int)>& last_hook = nullptr);

// Takes one AdamW step of `params` from the gradients `grads`, whose global L2 norm is `norm`, clipped to
// training.max_norm inside the update (the gradients are left as they are), at the learning rate the schedule gives
// optimizer step `step` (0-based). Returns that learning rate.
float apply_update(AdamW& optimizer, float* params, const float* grads, float norm, const RunConfig& config,
                   int64_t step);

// Arms the per-stage hand-off of an offloaded optimizer (AdamW::begin_handoff) for optimizer step `step` (0-based) of
// `model`, and returns the backward hook that hands each stage over as backward finishes it; apply_update then
// finishes the step. The scale is given in advance where training.max_norm does not clip.
std::function<void(int)> begin_handoff_step(AdamW& optimizer, GPT& model, const RunConfig& config, int64_t step);

// A contiguous range of the gradient arena averaged over ranks as one message, launched once backward has finished
// the lowest layer it covers (stage as in GPT::set_backward_hook).
struct GradientBucket {
  size_t begin, end;
  int stage;
};

// Buckets from the last layer down, each at least bucket_mb MiB (the last may be smaller): layer l's parameters are
// contiguous in the arena and become final in the order n_layer-1, ..., 0, then wte and wpe (stage -1).
std::vector<GradientBucket> gradient_buckets(const ParamTable& table, int n_layer, size_t arena_numel, float bucket_mb);

// Throws ember::Error "training diverged [on worker rank R ]at step S: loss is L" with `hint` unless the loss is
// finite (worker_rank < 0: no rank named). The message is built only on failure: this runs every step.
void require_finite_loss(double loss, int64_t step, int worker_rank, const char* hint);

}  // namespace ember
