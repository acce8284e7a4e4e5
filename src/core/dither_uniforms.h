// The uniforms of dithered rounding drawn many at a time on the host: the same values as dither_word_uniform of
// dither_block (core/dither.h), element by element, sixteen Philox blocks at once where the CPU has AVX-512.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dither.h"

namespace ember {

// u[i] = the uniform of element first + i of the key's stream, for i in [0, n).
void dither_uniforms(const DitherKey& key, uint64_t first, size_t n, float* u);

// The same, a block at a time with no vector code: the reference the vector path is tested against.
void dither_uniforms_scalar(const DitherKey& key, uint64_t first, size_t n, float* u);

}  // namespace ember
