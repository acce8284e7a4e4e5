// The memory estimate of a training run (implementation): the model's footprint with gradients, and the optimizer's
// shard; a unit test builds both and compares.
#include "train/memory_estimate.h"

#include "model/device_weights.h"
#include "model/gpt.h"
#include "model/param_table.h"
#include "train/adamw.h"

namespace ember {

MemoryEstimate estimate_training_memory(const RunConfig& c, int world_size, MatmulPrecision precision) {
  const WeightHome home = offload_weight_home(c, precision);
  const GPT::Footprint fp = GPT::footprint(c.model, c.training.batch_size, c.training.seq_len, /*with_grads=*/true,
                                           c.training.recompute, gemm_inputs_in_bf16(precision), home);
  // As the trainers shard it: each rank holds arena / world_size of the moments (and a gradient shard) under ZeRO-1.
  const size_t arena = (ParamTable(c.model).total_numel() + GPT::ARENA_ALIGN - 1) / GPT::ARENA_ALIGN * GPT::ARENA_ALIGN;
  const bool zero = c.training.zero == 1 && c.training.mode == TrainingMode::sync;
  const size_t shard = zero ? arena / size_t(world_size) : arena;
  MemoryEstimate m;
  m.weights = fp.weight_bytes + GPT::quantized_weight_copy_bytes(c.model, precision);
  m.activations = fp.activation_bytes;
  const bool offload = c.training.offload == Offload::optimizer;
  m.moments = offload ? 0 : 2 * shard * sizeof(float);
  // With host masters the host also stages the bf16 copy and the packed tensors (all of them: rank 0's shard, which
  // holds wte, the largest, has nearly all).
  const size_t packed = home != WeightHome::device ? PackedFp32Layout(ParamTable(c.model)).numel() : 0;
  m.host = offload ? AdamW::offload_host_bytes({shard, offload_hands_off(c, world_size), home, packed}) : 0;
  m.extra = zero ? shard * sizeof(float) : 0;
  return m;
}

std::string training_memory_hint() {
  return "lower training.batch_size or training.seq_len (raise grad_accum_steps to keep the batch), set "
         "training.recompute = full, training.precision = bf16, training.zero = 1 or (on a GPU) training.offload = "
         "optimizer, or use fewer layers (model.n_layer) or a narrower model (model.n_embd)";
}

}  // namespace ember
