// Batched dither uniforms (see dither_uniforms.h). Philox4x32-10 on sixteen counters per AVX-512 register: each round
// is two 32 x 32 -> 64-bit products per lane, which vpmuludq makes for the even lanes and, after a shift, the odd ones.
// GCC's vectoriser makes 64 x 64-bit products of them (vpmullq) and runs no faster than the scalar loop.
#include "core/dither_uniforms.h"

#include <algorithm>
#include <array>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define EMBER_DITHER_AVX512 1
#endif

namespace ember {

void dither_uniforms_scalar(const DitherKey& key, uint64_t first, size_t n, float* u) {
  size_t i = 0;
  while (i < n) {
    const uint64_t e = first + i;
    const std::array<uint32_t, 4> words = dither_block(key, e / 4);
    for (uint64_t w = e % 4; w < 4 && i < n; ++w, ++i) u[i] = dither_word_uniform(words[w]);
  }
}

#ifdef EMBER_DITHER_AVX512
// GCC 12's own AVX-512 headers trip -Wuninitialized where a shift intrinsic starts from an undefined register.
#pragma GCC diagnostic ignored "-Wuninitialized"
namespace {

// The high and low halves of the 32 x 32-bit products m * x in each lane.
__attribute__((target("avx512f"))) inline void mul_hi_lo(__m512i x, __m512i m, __m512i& hi, __m512i& lo) {
  const __m512i even = _mm512_mul_epu32(x, m);                        // lanes 0, 2, ...: 64-bit products
  const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(x, 32), m);  // lanes 1, 3, ...
  hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
  lo = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
}

// Blocks b0 .. b0 + 15 of the key's stream as 64 uniforms, block after block, into u.
__attribute__((target("avx512f"))) void sixteen_blocks(const DitherKey& key, uint64_t b0, float* u) {
  const uint64_t counter = (uint64_t(key.stream) << 40) | b0;
  // The low counter words of the sixteen blocks; the high words, where the low ones wrap past 2^32 partway.
  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  __m512i x0 = _mm512_add_epi32(_mm512_set1_epi32(int(uint32_t(counter))), lane);
  const __mmask16 wrapped = _mm512_cmplt_epu32_mask(x0, _mm512_set1_epi32(int(uint32_t(counter))));
  __m512i x1 = _mm512_mask_add_epi32(_mm512_set1_epi32(int(uint32_t(counter >> 32))), wrapped,
                                     _mm512_set1_epi32(int(uint32_t(counter >> 32))), _mm512_set1_epi32(1));
  __m512i x2 = _mm512_set1_epi32(int(key.rank ^ (uint32_t(RNG_PURPOSE_DITHER) << 24)));
  __m512i x3 = _mm512_set1_epi32(int(key.step));
  uint32_t k0 = uint32_t(key.seed), k1 = uint32_t(key.seed >> 32);
  const __m512i m0 = _mm512_set1_epi64(0xD2511F53), m1 = _mm512_set1_epi64(0xCD9E8D57);
  for (int round = 0; round < 10; ++round) {
    __m512i hi0, lo0, hi1, lo1;
    mul_hi_lo(x0, m0, hi0, lo0);
    mul_hi_lo(x2, m1, hi1, lo1);
    x0 = _mm512_xor_si512(_mm512_xor_si512(hi1, x1), _mm512_set1_epi32(int(k0)));
    x1 = lo1;
    x2 = _mm512_xor_si512(_mm512_xor_si512(hi0, x3), _mm512_set1_epi32(int(k1)));
    x3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  // word >> 8 scaled by 2^-24, as dither_word_uniform does it (both exact).
  const __m512 scale = _mm512_set1_ps(1.0f / 16777216.0f);
  alignas(64) float words[4][16];
  const __m512i x[4] = {x0, x1, x2, x3};
  for (int w = 0; w < 4; ++w)
    _mm512_store_ps(words[w], _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(x[w], 8)), scale));
  for (int j = 0; j < 16; ++j)
    for (int w = 0; w < 4; ++w) u[4 * j + w] = words[w][j];
}

bool has_avx512() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  return has;
}

}  // namespace
#endif

void dither_uniforms(const DitherKey& key, uint64_t first, size_t n, float* u) {
#ifdef EMBER_DITHER_AVX512
  if (has_avx512()) {
    // Up to the first whole block, then sixteen blocks at a time, then the rest.
    const size_t head = std::min<size_t>(n, (4 - first % 4) % 4);
    dither_uniforms_scalar(key, first, head, u);
    size_t i = head;
    for (; i + 64 <= n; i += 64) sixteen_blocks(key, (first + i) / 4, u + i);
    dither_uniforms_scalar(key, first + i, n - i, u + i);
    return;
  }
#endif
  dither_uniforms_scalar(key, first, n, u);
}

}  // namespace ember
