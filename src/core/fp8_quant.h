// fp8 quantization with one scale per tensor, taken from the tensor itself (current scaling, as Transformer Engine's
// and torchao's "tensorwise" recipes and cuBLASLt's scalar scale pointers have it): the scheme of
// training.precision = fp8. A tensor's scale is s = max|x| / M, M the format's largest finite value (448 for E4M3,
// 57344 for E5M2), and its values become q = fp8(x * (M / max|x|)): an fp32 product rounded on its own, then rounded to
// nearest (ties to even) into the format, saturating (core/fp8.h); q * s is the value the fp8 product stands for.
// A tensor that is all zeros gets scale 0; one holding a NaN or an infinity gets a NaN scale (its product is then NaN,
// as an fp32 product would be) and zeros.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/fp8.h"

namespace ember {

// x (n values) into q (n fp8 codes of format f); returns the scale. Multi-threaded over OpenMP for large n; must not
// be called from inside a parallel region.
float quantize_fp8_tensor(const float* x, size_t n, Fp8Format f, uint8_t* q);
// x cast into format f as it is (scale 1): what the scaling guards against, for tests.
float quantize_fp8_unscaled(const float* x, size_t n, Fp8Format f, uint8_t* q);
// The values of n fp8 codes, unscaled (exact in fp32, and in bf16): what the products multiply.
void widen_fp8(const uint8_t* q, size_t n, Fp8Format f, float* out);

}  // namespace ember
