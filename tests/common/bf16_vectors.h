// Host vectors between fp32 and bf16 for the tests: fp32 values rounded to bf16 (to nearest even, as a bf16-stored
// output holds them), as bf16 or as fp32, and bf16 values widened back to fp32 (exact).
#pragma once

#include <vector>

#include "core/dtype.h"

namespace ember::test {

inline std::vector<float> rounded_to_bf16(std::vector<float> v) {
  for (float& x : v) x = round_to_bf16(x);
  return v;
}

inline std::vector<BFloat16> bf16_values(const std::vector<float>& v) {
  std::vector<BFloat16> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = to_bf16(v[i]);
  return h;
}

inline std::vector<float> widened(const std::vector<BFloat16>& v) {
  std::vector<float> f(v.size());
  for (size_t i = 0; i < v.size(); ++i) f[i] = from_bf16(v[i]);
  return f;
}

}  // namespace ember::test
