// AdamW over the parameter arena, or over one ZeRO-1 shard of it: fp32 first and second moments for the arena range
// [shard_begin, shard_end), weight decay on the table rows marked for it (matrices), clipping by global L2 norm.
#pragma once

#include <cstddef>
#include <vector>

#include "backend/backend.h"
#include "model/param_table.h"
#include "train/run_config.h"

namespace ember {

class AdamW {
 public:
  // Owns moments for the arena elements [shard_begin, shard_end) (the whole arena without ZeRO-1).
  AdamW(Backend& backend, const ParamTable& table, const OptimizerConfig& config, size_t shard_begin, size_t shard_end);
  ~AdamW();
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;

  // One update with learning rate lr of params[shard_begin, shard_end) (params is the whole arena) from
  // shard_grads times grad_scale (clip_scale's factor), whose element 0 is arena element shard_begin. The gradients
  // are read, not changed. Increments the step used for bias correction.
  void step(float* params, const float* shard_grads, float lr, float grad_scale = 1.0f);

  size_t shard_begin() const { return begin_; }
  size_t shard_end() const { return end_; }
  float* exp_avg() { return m_; }     // (shard_end - shard_begin) backend memory
  float* exp_avg_sq() { return v_; }  // (shard_end - shard_begin) backend memory
  int step_count() const { return t_; }
  void set_step_count(int t) { t_ = t; }

 private:
  Backend& backend_;
  const ParamTable& table_;
  OptimizerConfig config_;
  size_t begin_, end_;
  float* m_ = nullptr;
  float* v_ = nullptr;
  int t_ = 0;
  std::vector<AdamWSegment> segments_;  // the shard's table rows, relative to begin_, merged where decay agrees
};

// The factor that scales gradients of global norm `norm` to max_norm, when max_norm > 0 and norm exceeds it; else 1.
float clip_scale(float norm, float max_norm);

}  // namespace ember
