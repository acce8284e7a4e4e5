// The packed fp32 tensors of a model whose masters live on the host (implementation).
#include "model/device_weights.h"

#include <algorithm>
#include <cstring>

namespace ember {

namespace {

// The layers' four dense weights: only the bf16 copy of these is on the device.
bool dense_weight(const ParamInfo& p) { return p.layer >= 0 && p.shape.size() == 2; }

}  // namespace

// Each packed row takes its whole extent in the arena (up to the next row): its alignment, and wte's padding rows,
// which the lm_head reads (zero).
PackedFp32Layout::PackedFp32Layout(const ParamTable& table) {
  const std::vector<ParamInfo>& rows = table.params();
  for (size_t i = 0; i < rows.size(); ++i) {
    const ParamInfo& p = rows[i];
    if (dense_weight(p)) {
      row_offset_.push_back(not_packed);
      continue;
    }
    const size_t extent = (i + 1 < rows.size() ? rows[i + 1].offset : table.total_numel()) - p.offset;
    row_offset_.push_back(numel_);
    spans_.push_back({p.offset, extent, numel_});
    numel_ += extent;
  }
}

std::pair<size_t, size_t> PackedFp32Layout::range(size_t begin, size_t end) const {
  size_t first = numel_, last = numel_;
  for (const Span& s : spans_) {
    const size_t lo = std::max(begin, s.arena), hi = std::min(end, s.arena + s.numel);
    if (lo >= hi) continue;
    first = std::min(first, s.packed + (lo - s.arena));
    last = s.packed + (hi - s.arena);
  }
  return first < last ? std::make_pair(first, last) : std::make_pair(last, last);
}

void PackedFp32Layout::pack(size_t begin, size_t end, const float* src, float* dst) const {
  const size_t first = range(begin, end).first;
  for (const Span& s : spans_) {
    const size_t lo = std::max(begin, s.arena), hi = std::min(end, s.arena + s.numel);
    if (lo < hi) std::memcpy(dst + (s.packed + (lo - s.arena) - first), src + (lo - begin), (hi - lo) * sizeof(float));
  }
}

}  // namespace ember
