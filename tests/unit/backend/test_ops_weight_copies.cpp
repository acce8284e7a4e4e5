// The quantized weight copies of the CPU backend under matmul precisions int8 and fp8 (backend.h's weights_changed):
// made by the first product that reads a weight, kept while the weight is written in place without weights_changed()
// (the old products come back), made again after it, and counted by quantized_weight_copy_bytes().
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ops_test_util.h"

namespace ember {
namespace {

class WeightCopies : public ::testing::TestWithParam<MatmulPrecision> {};

TEST_P(WeightCopies, LastUntilWeightsChange) {
  const MatmulPrecision p = GetParam();
  const int N = 9, IC = 24, OC = 40;
  Rng rng(7);
  const auto x = rng.normal(size_t(N) * IC), w1 = rng.normal(size_t(IC) * OC, 0.02f),
             w2 = rng.normal(size_t(IC) * OC, 0.05f), dy = rng.normal(size_t(N) * OC, 1e-3f);
  // Each product on a fresh backend: the reference for a weight's values.
  auto fresh = [&](const std::vector<float>& w, bool forward) {
    auto be = make_cpu_backend();
    be->set_matmul_precision(p);
    Floats d_x(*be, x), d_w(*be, w), d_dy(*be, dy), out(*be, size_t(N) * (forward ? OC : IC)), dw(*be, w.size());
    if (forward)
      be->matmul_forward(out.get(), d_x.get(), d_w.get(), nullptr, N, IC, OC);
    else
      be->matmul_backward(out.get(), dw.get(), nullptr, d_dy.get(), d_x.get(), d_w.get(), N, IC, OC);
    return out.host();
  };
  auto be = make_cpu_backend();
  be->set_matmul_precision(p);
  Floats d_x(*be, x), d_w(*be, w1), d_dy(*be, dy), y(*be, size_t(N) * OC), dx(*be, x.size()), dw(*be, w1.size());
  auto both = [&] {
    be->matmul_forward(y.get(), d_x.get(), d_w.get(), nullptr, N, IC, OC);
    be->matmul_backward(dx.get(), dw.get(), nullptr, d_dy.get(), d_x.get(), d_w.get(), N, IC, OC);
  };
  both();
  ASSERT_EQ(y.host(), fresh(w1, true));
  ASSERT_EQ(dx.host(), fresh(w1, false));
  ASSERT_NE(fresh(w1, true), fresh(w2, true));
  // int8: two copies (per output channel, per input channel) with a scale per row; fp8: one copy and one scale.
  const size_t want = p == MatmulPrecision::int8 ? 2 * w1.size() + (IC + OC) * sizeof(float) : w1.size() + 4;
  EXPECT_EQ(be->quantized_weight_copy_bytes(), want);
  be->copy_to_device(d_w.get(), w2.data(), w2.size() * sizeof(float));
  both();
  EXPECT_EQ(y.host(), fresh(w1, true)) << "the forward copy was remade without weights_changed()";
  EXPECT_EQ(dx.host(), fresh(w1, false)) << "the backward copy was remade without weights_changed()";
  be->weights_changed();
  both();
  EXPECT_EQ(y.host(), fresh(w2, true)) << "a stale forward copy after weights_changed()";
  EXPECT_EQ(dx.host(), fresh(w2, false)) << "a stale backward copy after weights_changed()";
}
INSTANTIATE_TEST_SUITE_P(Precisions, WeightCopies, ::testing::Values(MatmulPrecision::int8, MatmulPrecision::fp8),
                         [](const auto& info) { return matmul_precision_name(info.param); });

}  // namespace
}  // namespace ember
