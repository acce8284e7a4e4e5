// AdamW (implementation): one backend call per step over the shard's table rows, each row keeping its own weight
// decay whichever ranks its elements land on; adjacent rows with the same decay form one segment.
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
  std::vector<const ParamInfo*> rows;
  for (const ParamInfo& p : table_.params()) rows.push_back(&p);
  std::sort(rows.begin(), rows.end(), [](const ParamInfo* a, const ParamInfo* b) { return a->offset < b->offset; });
  for (const ParamInfo* p : rows) {
    const size_t lo = std::max(p->offset, begin_), hi = std::min(p->offset + p->numel, end_);
    if (lo >= hi) continue;
    const float wd = p->decay ? config_.weight_decay : 0.0f;
    AdamWSegment* last = segments_.empty() ? nullptr : &segments_.back();
    if (last && last->end == lo - begin_ && last->weight_decay == wd)
      last->end = hi - begin_;
    else
      segments_.push_back({lo - begin_, hi - begin_, wd});
  }
}

AdamW::~AdamW() {
  backend_.free(m_);
  backend_.free(v_);
}

void AdamW::step(float* params, const float* shard_grads, float lr, float grad_scale) {
  ++t_;
  backend_.adamw_update_segments(params + begin_, shard_grads, m_, v_, segments_.data(), segments_.size(), lr,
                                 config_.beta1, config_.beta2, config_.eps, t_, grad_scale);
}

float clip_scale(float norm, float max_norm) {
  return max_norm > 0.0f && norm > max_norm ? max_norm / (norm + 1e-6f) : 1.0f;
}

}  // namespace ember
