// Batched dither uniforms: every element equals the single draw of core/dither.h (dither_word_uniform of its Philox
// block), for spans starting at every offset within a block, spans shorter and longer than the sixteen-block vector
// step, low counter words that wrap past 2^32 inside a vector step, and keys differing in each field.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/dither_uniforms.h"
#include "core/int8_quant.h"

namespace ember {
namespace {

void expect_single_draws(const DitherKey& key, uint64_t first, size_t n) {
  std::vector<float> u(n + 1, -1.0f), scalar(n);
  dither_uniforms(key, first, n, u.data());
  dither_uniforms_scalar(key, first, n, scalar.data());
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(u[i], dither_uniform(key, first + i)) << "first " << first << " n " << n << " i " << i;
    ASSERT_EQ(scalar[i], u[i]) << "first " << first << " n " << n << " i " << i;
  }
  EXPECT_EQ(u[n], -1.0f) << "wrote past the span";
}

TEST(DitherUniforms, EqualTheSingleDraws) {
  const DitherKey key{0x123456789abcdefull, 5, 777, 4242};
  for (uint64_t first : {0ull, 1ull, 2ull, 3ull, 1001ull})
    for (size_t n : {0, 1, 3, 4, 5, 63, 64, 65, 127, 128, 129, 1000, 3072}) expect_single_draws(key, first, n);
}

TEST(DitherUniforms, CounterWordsWrapInsideAVectorStep) {
  // Blocks 2^32 - 5 .. 2^32 + 10: the low counter word wraps to 0 partway through sixteen blocks.
  const DitherKey key{99, 1, 2, 3};
  for (uint64_t first : {4 * ((uint64_t(1) << 32) - 5), 4 * ((uint64_t(1) << 32) - 5) + 2})
    expect_single_draws(key, first, 300);
}

TEST(DitherUniforms, EachKeyFieldChangesTheDraws) {
  const size_t n = 256;
  std::vector<float> base(n), other(n);
  dither_uniforms(DitherKey{42, 3, 1000, 77}, 0, n, base.data());
  for (DitherKey k : {DitherKey{43, 3, 1000, 77}, DitherKey{42ull | (1ull << 40), 3, 1000, 77},
                      DitherKey{42, 4, 1000, 77}, DitherKey{42, 3, 1001, 77}, DitherKey{42, 3, 1000, 78}}) {
    dither_uniforms(k, 0, n, other.data());
    size_t same = 0;
    for (size_t i = 0; i < n; ++i) same += base[i] == other[i];
    EXPECT_LT(same, n / 16) << k.seed << " " << k.rank << " " << k.step << " " << k.stream;
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(other[i], dither_uniform(k, i));
  }
}

}  // namespace
}  // namespace ember
