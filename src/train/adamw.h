// AdamW over the parameter arena: fp32 first and second moments mirroring the parameter table, weight decay on
// the rows the table marks (matrices), gradient clipping by the global L2 norm.
#pragma once

#include <cstddef>

#include "backend/backend.h"
#include "model/param_table.h"
#include "train/run_config.h"

namespace ember {

class AdamW {
 public:
  AdamW(Backend& backend, const ParamTable& table, const OptimizerConfig& config);
  ~AdamW();
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;

  // One update with learning rate lr; increments the step counter used for bias correction.
  void step(float* params, const float* grads, float lr);

  float* exp_avg() { return m_; }     // (total_numel) backend memory
  float* exp_avg_sq() { return v_; }  // (total_numel) backend memory
  int step_count() const { return t_; }
  void set_step_count(int t) { t_ = t; }

 private:
  Backend& backend_;
  const ParamTable& table_;
  OptimizerConfig config_;
  float* m_ = nullptr;
  float* v_ = nullptr;
  int t_ = 0;
};

// Global L2 norm of the gradient arena; if max_norm > 0 and the norm exceeds it, scales the gradients down to
// max_norm. Returns the norm before clipping.
float clip_grad_norm(Backend& backend, float* grads, size_t n, float max_norm);

}  // namespace ember
