// AdamW (implementation): one backend update per table row that meets the shard, so each row keeps its own
// weight decay whichever ranks its elements land on.
#include "train/adamw.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace ember {

AdamW::AdamW(Backend& backend, const ParamTable& table, const OptimizerConfig& config, size_t shard_begin,
             size_t shard_end)
    : backend_(backend), table_(table), config_(config), begin_(shard_begin), end_(shard_end) {
  EMBER_ASSERT(shard_begin <= shard_end, "empty or inverted optimizer shard");
  const size_t n = std::max<size_t>(end_ - begin_, 1);
  m_ = static_cast<float*>(backend_.alloc(n * sizeof(float)));
  v_ = static_cast<float*>(backend_.alloc(n * sizeof(float)));
}

AdamW::~AdamW() {
  backend_.free(m_);
  backend_.free(v_);
}

void AdamW::step(float* params, const float* shard_grads, float lr) {
  ++t_;
  for (const ParamInfo& p : table_.params()) {
    const size_t lo = std::max(p.offset, begin_), hi = std::min(p.offset + p.numel, end_);
    if (lo >= hi) continue;
    const float wd = p.decay ? config_.weight_decay : 0.0f;
    const size_t s = lo - begin_;
    backend_.adamw_update(params + lo, shard_grads + s, m_ + s, v_ + s, hi - lo, lr, config_.beta1, config_.beta2,
                          config_.eps, wd, t_);
  }
}

void clip_grads(Backend& backend, float* grads, size_t n, float norm, float max_norm) {
  if (max_norm > 0.0f && norm > max_norm) backend.scale(grads, max_norm / (norm + 1e-6f), n);
}

}  // namespace ember
