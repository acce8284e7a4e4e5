// fp8 E4M3 and E5M2: conversion from fp32 (to nearest, ties to even, saturating) and back (exact).
#include "core/fp8.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace ember {

Fp8Limits fp8_limits(Fp8Format f) {
  if (f == Fp8Format::e4m3) return {4, 3, 7, fp8_max_finite(f), 0x1p-9f, 0x7f, 0x7e};
  return {5, 2, 15, fp8_max_finite(f), 0x1p-16f, 0x7f, 0x7b};
}

const char* fp8_format_name(Fp8Format f) { return f == Fp8Format::e4m3 ? "e4m3" : "e5m2"; }

float from_fp8(uint8_t bits, Fp8Format f) {
  const Fp8Limits l = fp8_limits(f);
  const float sign = (bits & 0x80) ? -1.0f : 1.0f;
  const int top = (1 << l.exponent_bits) - 1;
  const int exponent = (bits >> l.mantissa_bits) & top, mantissa = bits & ((1 << l.mantissa_bits) - 1);
  if (f == Fp8Format::e4m3 && exponent == top && mantissa == (1 << l.mantissa_bits) - 1) return NAN;
  if (f == Fp8Format::e5m2 && exponent == top) return mantissa ? NAN : sign * INFINITY;
  if (exponent == 0) return sign * std::ldexp(float(mantissa), 1 - l.bias - l.mantissa_bits);
  return sign * std::ldexp(float((1 << l.mantissa_bits) + mantissa), exponent - l.bias - l.mantissa_bits);
}

uint8_t to_fp8(float x, Fp8Format f) {
  const Fp8Limits l = fp8_limits(f);
  if (std::isnan(x)) return l.nan_bits;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const float a = std::fabs(x);
  if (a >= l.max_finite) return sign | l.max_finite_bits;
  if (a == 0.0f) return sign;
  uint32_t bits = 0;
  std::memcpy(&bits, &a, sizeof(bits));
  const int e = int(bits >> 23) - 127;  // a = 1.f x 2^e (fp32 subnormals have e = -127)
  if (e < 1 - l.bias) {
    // Below the smallest normal: a counted in steps of the smallest subnormal, exact in fp32 (a power-of-two
    // scaling), rounded ties to even (the default mode); 2^mantissa_bits steps is the smallest normal's code.
    return sign | uint8_t(std::nearbyint(std::ldexp(a, l.bias - 1 + l.mantissa_bits)));
  }
  // Normal: drop the low 23 - mantissa_bits bits of fp32's exponent and fraction, rounding to nearest, ties to even
  // (a carry out of the fraction steps the exponent, as it should); then rebias the exponent. a < max_finite, so the
  // result is at most the largest finite code.
  const int shift = 23 - l.mantissa_bits;
  const uint32_t rounded = (bits + ((1u << (shift - 1)) - 1) + ((bits >> shift) & 1)) >> shift;
  return sign | uint8_t(rounded - (uint32_t(127 - l.bias) << l.mantissa_bits));
}

}  // namespace ember
