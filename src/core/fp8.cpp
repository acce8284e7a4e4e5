// fp8 E4M3 and E5M2: conversion from fp32 (to nearest, ties to even, saturating) and back (exact).
#include "core/fp8.h"

#include <algorithm>
#include <cmath>

namespace ember {

Fp8Limits fp8_limits(Fp8Format f) {
  if (f == Fp8Format::e4m3) return {4, 3, 7, 448.0f, 0x1p-9f, 0x7f, 0x7e};
  return {5, 2, 15, 57344.0f, 0x1p-16f, 0x7f, 0x7b};
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
  // a = 1.f x 2^e, with e no lower than the smallest normal exponent: the spacing of fp8 values around a is then
  // 2^(e - mantissa_bits), subnormals included, and a / spacing is exact in double.
  const int min_exponent = 1 - l.bias;
  int e = 0;
  std::frexp(a, &e);
  e = std::max(e - 1, min_exponent);
  double steps = std::nearbyint(std::ldexp(double(a), l.mantissa_bits - e));  // ties to even, the default mode
  const double one = double(1 << l.mantissa_bits);
  if (steps >= 2 * one) {  // rounded up into the next binade
    steps = one;
    ++e;
  }
  if (steps < one) return sign | uint8_t(steps);  // a subnormal (or zero), only when e is the smallest exponent
  return sign | uint8_t(((e + l.bias) << l.mantissa_bits) | int(steps - one));
}

}  // namespace ember
