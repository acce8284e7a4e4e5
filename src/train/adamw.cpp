// AdamW (implementation): one backend update per table row so each row gets its own weight decay.
#include "train/adamw.h"

#include <cmath>

namespace ember {

AdamW::AdamW(Backend& backend, const ParamTable& table, const OptimizerConfig& config)
    : backend_(backend), table_(table), config_(config) {
  m_ = static_cast<float*>(backend_.alloc(table_.total_numel() * sizeof(float)));
  v_ = static_cast<float*>(backend_.alloc(table_.total_numel() * sizeof(float)));
}

AdamW::~AdamW() {
  backend_.free(m_);
  backend_.free(v_);
}

void AdamW::step(float* params, const float* grads, float lr) {
  ++t_;
  for (const ParamInfo& p : table_.params()) {
    const float wd = p.decay ? config_.weight_decay : 0.0f;
    backend_.adamw_update(params + p.offset, grads + p.offset, m_ + p.offset, v_ + p.offset, p.numel, lr,
                          config_.beta1, config_.beta2, config_.eps, wd, t_);
  }
}

float clip_grad_norm(Backend& backend, float* grads, size_t n, float max_norm) {
  const float norm = float(std::sqrt(backend.sum_squares(grads, n)));
  if (max_norm > 0.0f && norm > max_norm) backend.scale(grads, max_norm / (norm + 1e-6f), n);
  return norm;
}

}  // namespace ember
