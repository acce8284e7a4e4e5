// PackedFp32Layout against a map built element by element: which arena elements are packed, where each one lands,
// and what range() and pack() give for ranges that start and end inside rows, between them, inside a dense weight
// and past the arena's end (the chunks and stages an offloaded step sends fall anywhere), in fp32 and in bf16.
#include <gtest/gtest.h>

#include <cstddef>
#include <utility>
#include <vector>

#include "model/device_weights.h"
#include "model/param_table.h"

namespace ember {
namespace {

constexpr size_t kNone = ~size_t(0);

// Arena element -> packed element (kNone for a dense weight's), from the table alone: every row but the layers'
// two-dimensional weights is packed, each with its whole extent up to the next row, in arena order.
std::vector<size_t> element_map(const ParamTable& table) {
  std::vector<size_t> map(table.total_numel(), kNone);
  const std::vector<ParamInfo>& rows = table.params();
  size_t next = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const size_t end = i + 1 < rows.size() ? rows[i + 1].offset : table.total_numel();
    if (rows[i].layer >= 0 && rows[i].shape.size() == 2) continue;
    for (size_t e = rows[i].offset; e < end; ++e) map[e] = next++;
  }
  return map;
}

TEST(PackedFp32Layout, RangeAndPackFollowTheElementMap) {
  const ParamTable table(ModelConfig{2, 2, 16, 8, 67});  // a vocabulary that wte pads
  const PackedFp32Layout layout(table);
  const std::vector<size_t> map = element_map(table);
  const size_t arena = map.size();
  size_t packed_numel = 0;
  for (size_t p : map) packed_numel += p != kNone;
  ASSERT_EQ(layout.numel(), packed_numel);
  for (size_t i = 0; i < table.params().size(); ++i)
    EXPECT_EQ(layout.offset(i),
              map[table.params()[i].offset] == kNone ? PackedFp32Layout::not_packed : map[table.params()[i].offset]);

  std::vector<float> src(arena);
  for (size_t e = 0; e < arena; ++e) src[e] = float(e) + 0.5f;
  std::vector<BFloat16> src16(arena);
  for (size_t e = 0; e < arena; ++e) src16[e] = to_bf16(src[e]);
  // Every row boundary, one element either side of it, and a spread of points between.
  std::vector<size_t> cuts = {0, 1, arena - 1, arena};
  for (const ParamInfo& p : table.params())
    for (size_t d : {size_t(0), size_t(1), p.numel / 2, p.numel - 1}) cuts.push_back(p.offset + d);
  for (size_t e = 0; e < arena; e += arena / 16 + 1) cuts.push_back(e);
  size_t checked = 0, empty = 0;
  for (size_t begin : cuts)
    for (size_t end : cuts) {
      if (begin > end) continue;
      size_t first = kNone, last = kNone;
      for (size_t e = begin; e < end; ++e)
        if (map[e] != kNone) {
          if (first == kNone) first = map[e];
          last = map[e] + 1;
        }
      const std::pair<size_t, size_t> want =
          first == kNone ? std::make_pair(layout.numel(), layout.numel()) : std::make_pair(first, last);
      ASSERT_EQ(layout.range(begin, end), want) << "[" << begin << ", " << end << ")";
      // pack() writes exactly the packed elements of the range, each to dst[p - origin], and nothing else.
      const size_t origin = want.first == layout.numel() ? 0 : want.first;
      std::vector<float> dst(layout.numel(), -1.0f);
      ASSERT_EQ(layout.pack(begin, end, src.data() + begin, dst.data(), origin), want);
      std::vector<float> expect(layout.numel(), -1.0f);
      for (size_t e = begin; e < end; ++e)
        if (map[e] != kNone) expect[map[e] - origin] = src[e];
      ASSERT_EQ(dst, expect) << "[" << begin << ", " << end << ")";
      // The bf16 overload moves the same elements.
      std::vector<BFloat16> dst16(layout.numel(), BFloat16{0xffff});
      ASSERT_EQ(layout.pack(begin, end, src16.data() + begin, dst16.data(), origin), want);
      for (size_t p = 0; p < layout.numel(); ++p)
        ASSERT_EQ(dst16[p].bits, expect[p] == -1.0f ? 0xffff : to_bf16(expect[p]).bits) << "packed element " << p;
      ++checked;
      empty += want.first == want.second;
    }
  EXPECT_GT(empty, 0u) << "no range fell inside a dense weight";
  EXPECT_GT(checked - empty, 1000u);
}

}  // namespace
}  // namespace ember
