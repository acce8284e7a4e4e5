// fp8 quantization with one scale per tensor; see fp8_quant.h. The product x * (M / max|x|) is rounded to fp32 on its
// own before the conversion, as the GPU's kernels round it: this file is compiled without FMA contraction.
#include "core/fp8_quant.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>

namespace ember {

namespace {

constexpr size_t kParallelFrom = size_t(1) << 16;

// The largest magnitude of x; NaN if any value is a NaN.
float amax_of(const float* x, size_t n) {
  float m = 0.0f;
  bool nan = false;
#pragma omp parallel for schedule(static) reduction(max : m) reduction(|| : nan) if (n >= kParallelFrom)
  for (size_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    nan = nan || std::isnan(a);
    m = std::max(m, a);
  }
  return nan ? NAN : m;
}

// Every code's value, by format.
const std::array<float, 256>& fp8_values(Fp8Format f) {
  static const auto make = [](Fp8Format g) {
    std::array<float, 256> t{};
    for (int b = 0; b < 256; ++b) t[size_t(b)] = from_fp8(uint8_t(b), g);
    return t;
  };
  static const std::array<float, 256> e4m3 = make(Fp8Format::e4m3), e5m2 = make(Fp8Format::e5m2);
  return f == Fp8Format::e4m3 ? e4m3 : e5m2;
}

}  // namespace

float quantize_fp8_tensor(const float* x, size_t n, Fp8Format f, uint8_t* q) {
  const float amax = amax_of(x, n), max_finite = fp8_limits(f).max_finite;
  if (!std::isfinite(amax)) {
    std::fill(q, q + n, uint8_t(0));
    return NAN;
  }
  const float inverse = max_finite / amax;
  if (!std::isfinite(inverse)) {  // all zeros, or too small for their scale to be represented
    std::fill(q, q + n, uint8_t(0));
    return 0.0f;
  }
  const float scale = amax / max_finite;
#pragma omp parallel for schedule(static) if (n >= kParallelFrom)
  for (size_t i = 0; i < n; ++i) q[i] = to_fp8(x[i] * inverse, f);
  return scale;
}

float quantize_fp8_unscaled(const float* x, size_t n, Fp8Format f, uint8_t* q) {
#pragma omp parallel for schedule(static) if (n >= kParallelFrom)
  for (size_t i = 0; i < n; ++i) q[i] = to_fp8(x[i], f);
  return 1.0f;
}

void widen_fp8(const uint8_t* q, size_t n, Fp8Format f, float* out) {
  const std::array<float, 256>& values = fp8_values(f);
#pragma omp parallel for schedule(static) if (n >= kParallelFrom)
  for (size_t i = 0; i < n; ++i) out[i] = values[q[i]];
}

}  // namespace ember
