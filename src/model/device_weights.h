// A model's weights on the device when its fp32 masters live on the host (GPT built with host masters, for
// training.offload = optimizer): there is no fp32 arena there. The products read the bf16 copy of the whole arena;
// the tensors read in fp32 (the embeddings, the layernorms and the biases: every table row but the layers' four dense
// weights) are packed, in arena order, into one small fp32 array. The optimizer updates the masters on the host and
// sends each updated range in both forms.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "model/param_table.h"

namespace ember {

class PackedFp32Layout {
 public:
  explicit PackedFp32Layout(const ParamTable& table);

  size_t numel() const { return numel_; }  // the packed array's elements
  // Table row `row`'s first element in the packed array; not_packed for a dense weight.
  static constexpr size_t not_packed = ~size_t(0);
  size_t offset(size_t row) const { return row_offset_[row]; }
  // The packed elements [first, second) of arena range [begin, end) (an empty range where it holds none).
  std::pair<size_t, size_t> range(size_t begin, size_t end) const;
  // Copies the packed rows' elements of arena range [begin, end) from src (arena element `begin` first) into dst
  // (packed element `origin` first: packed element p goes to dst[p - origin]) and returns their range (range()).
  std::pair<size_t, size_t> pack(size_t begin, size_t end, const float* src, float* dst, size_t origin = 0) const;
  // The same for a bf16 copy of the arena (its packed bf16 copy, which host_dense's device takes).
  std::pair<size_t, size_t> pack(size_t begin, size_t end, const BFloat16* src, BFloat16* dst, size_t origin = 0) const;

 private:
  struct Span {
    size_t arena, numel, packed;  // a packed row: its arena offset, its extent there, its packed offset
  };
  // Calls f(lo, hi, p) for each packed row overlapping arena range [begin, end), in arena order: [lo, hi) the overlap,
  // p its packed offset; returns range(begin, end). A binary search finds the first row (a 1.5B model packs about
  // 400, and a step asks for each chunk's).
  template <class F>
  std::pair<size_t, size_t> walk(size_t begin, size_t end, F&& f) const;
  std::vector<Span> spans_;  // in arena order
  std::vector<size_t> row_offset_;
  size_t numel_ = 0;
};

// Where a model's weights live (GPT's constructor; training.offload = optimizer chooses):
//  device: the fp32 arena on the device (and its bf16 copy under bf16 storage);
//  host: the fp32 masters on the host only; the device keeps the bf16 copy of the arena and the packed fp32 tensors;
//  host_dense: as host, and the dense weights' bf16 copy stays on the host too (int8 and fp8, whose products read
//   only their quantized copies: the backend quantizes them from the host's copy, once per step); the device keeps the
//   packed tensors in fp32 and in bf16.
enum class WeightHome { device, host, host_dense };

// Where an optimizer that keeps the masters on the host writes such a model's weights (GPT::device_weights).
struct DeviceWeights {
  BFloat16* bf16 = nullptr;                  // (arena) the bf16 copy the products read; null under host_dense
  BFloat16* packed_bf16 = nullptr;           // (layout->numel()) under host_dense: the packed tensors' bf16 copy
  float* fp32 = nullptr;                     // (layout->numel()) the packed fp32 tensors
  const PackedFp32Layout* layout = nullptr;  // null: the model has an fp32 arena (WeightHome::device)
};

}  // namespace ember
