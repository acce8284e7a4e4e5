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

template <class F>
std::pair<size_t, size_t> PackedFp32Layout::walk(size_t begin, size_t end, F&& f) const {
  // The first span that ends after begin: the spans are sorted and disjoint, so their ends are sorted too.
  auto it =
      std::partition_point(spans_.begin(), spans_.end(), [&](const Span& s) { return s.arena + s.numel <= begin; });
  size_t first = numel_, last = numel_;
  for (; it != spans_.end() && it->arena < end; ++it) {
    const size_t lo = std::max(begin, it->arena), hi = std::min(end, it->arena + it->numel);
    if (lo >= hi) continue;
    const size_t p = it->packed + (lo - it->arena);
    f(lo, hi, p);
    if (first == numel_) first = p;
    last = p + (hi - lo);
  }
  return {first, last};
}

std::pair<size_t, size_t> PackedFp32Layout::range(size_t begin, size_t end) const {
  return walk(begin, end, [](size_t, size_t, size_t) {});
}

namespace {

// Copies the overlap [lo, hi) of an arena range that starts at `begin` from src to packed element p of dst (packed
// element `origin` first).
template <class T>
auto packer(size_t begin, const T* src, T* dst, size_t origin) {
  return [=](size_t lo, size_t hi, size_t p) {
    std::memcpy(dst + (p - origin), src + (lo - begin), (hi - lo) * sizeof(T));
  };
}

}  // namespace

std::pair<size_t, size_t> PackedFp32Layout::pack(size_t begin, size_t end, const float* src, float* dst,
                                                 size_t origin) const {
  return walk(begin, end, packer(begin, src, dst, origin));
}

std::pair<size_t, size_t> PackedFp32Layout::pack(size_t begin, size_t end, const BFloat16* src, BFloat16* dst,
                                                 size_t origin) const {
  return walk(begin, end, packer(begin, src, dst, origin));
}

}  // namespace ember
