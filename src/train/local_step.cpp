// The local optimizer step (implementation).
#include "train/local_step.h"

#include <cmath>
#include <optional>

#include "core/error.h"
#include "train/lr_schedule.h"

namespace ember {

double accumulate_gradients(GPT& model, DataLoader& data, TokenBatch& batch, int micro_batches, uint64_t first,
                            uint64_t stride, const std::function<void(int)>& last_hook) {
  const int A = micro_batches;
  model.zero_grad();
  double loss = 0.0;
  for (int m = 0; m < A; ++m) {
    data.batch_at(first + uint64_t(m) * stride, batch.inputs.data(), batch.targets.data(), batch.B);
    model.set_dither_sample(first + uint64_t(m) * stride);
    model.set_backward_hook(m == A - 1 ? last_hook : nullptr);
    loss += model.forward_backward(batch.inputs.data(), batch.targets.data(), batch.B, batch.T, 1.0f / float(A)) / A;
  }
  model.set_backward_hook(nullptr);
  return loss;
}

float apply_update(AdamW& optimizer, float* params, const float* grads, float norm, const RunConfig& config,
                   int64_t step) {
  const float lr = lr_at_step(config, step);
  optimizer.step(params, grads, lr, clip_scale(norm, config.training.max_norm));
  return lr;
}

std::function<void(int)> begin_handoff_step(AdamW& optimizer, GPT& model, const RunConfig& config, int64_t step) {
  const std::optional<float> scale =
      config.training.max_norm > 0.0f ? std::nullopt : std::optional<float>(clip_scale(0.0f, 0.0f));
  optimizer.begin_handoff(model.device_masters(), model.grads(), lr_at_step(config, step), scale);
  // One stage per layer, as GPT's backward hook counts them (bucket size 0: every layer its own bucket).
  return [&optimizer,
          stages = gradient_buckets(model.table(), config.model.n_layer, model.arena_numel(), 0.0f)](int stage) {
    for (const GradientBucket& b : stages)
      if (b.stage == stage) optimizer.hand_off(b.begin, b.end);
  };
}

void require_finite_loss(double loss, int64_t step, int worker_rank, const char* hint) {
  if (std::isfinite(loss)) return;
  const std::string who = worker_rank >= 0 ? "on worker rank " + std::to_string(worker_rank) + " " : "";
  throw_error("training diverged " + who + "at step " + std::to_string(step) + ": loss is " + std::to_string(loss),
              hint);
}

std::vector<GradientBucket> gradient_buckets(const ParamTable& table, int n_layer, size_t arena_numel,
                                             float bucket_mb) {
  const size_t bucket_floats = size_t(double(bucket_mb) * 1048576.0 / sizeof(float));
  std::vector<GradientBucket> buckets;
  size_t end = arena_numel;  // the first bucket also carries ln_f and the arena padding
  for (int l = n_layer - 1; l >= 0; --l) {
    const size_t begin = table.block(l, BlockParam(0)).offset;
    if (end - begin >= bucket_floats || l == 0) {
      buckets.push_back({begin, end, l});
      end = begin;
    }
  }
  buckets.push_back({0, end, -1});  // wte and wpe (and everything left when n_layer is 0)
  return buckets;
}

}  // namespace ember
