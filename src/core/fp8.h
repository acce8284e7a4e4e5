// The two 8-bit floating-point formats of fp8 tensor cores (OCP 8-bit floating point, as sm_89 and sm_90 implement
// them). E4M3: exponent bias 7, 3 mantissa bits, no infinities, largest finite 448, NaN 0x7f and 0xff. E5M2: bias 15,
// 2 mantissa bits, IEEE-style infinities and NaNs, largest finite 57344. Both have subnormals and a signed zero.
// Conversion from fp32 rounds to nearest, ties to even, and saturates as CUDA's __NV_SATFINITE does: anything past the
// largest finite value, infinities included, becomes the largest finite value of its sign; a NaN stays a NaN.
#pragma once

#include <cstdint>

namespace ember {

enum class Fp8Format { e4m3, e5m2 };

struct Fp8Limits {
  int exponent_bits, mantissa_bits, bias;
  float max_finite;         // 448 or 57344
  float min_subnormal;      // 2^-9 or 2^-16
  uint8_t nan_bits;         // the NaN a conversion writes (sign clear)
  uint8_t max_finite_bits;  // the largest finite value's bits (sign clear)
};
Fp8Limits fp8_limits(Fp8Format f);
// The largest finite value alone (448 or 57344), for code that links nothing but this header (the CUDA kernels).
constexpr float fp8_max_finite(Fp8Format f) { return f == Fp8Format::e4m3 ? 448.0f : 57344.0f; }
const char* fp8_format_name(Fp8Format f);  // "e4m3" or "e5m2"

uint8_t to_fp8(float x, Fp8Format f);       // rounded to nearest, ties to even, saturating (above)
float from_fp8(uint8_t bits, Fp8Format f);  // exact
inline float round_to_fp8(float x, Fp8Format f) { return from_fp8(to_fp8(x, f), f); }

}  // namespace ember
