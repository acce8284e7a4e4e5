// CPU attention with a layer's schedule (backend/attention_layer.h: a causal window, an ALiBi bias, rotary positions)
// against the float64 reference written from the definitions, and finite differences of that reference; under
// matmul precision bf16 against the reference within bf16's rounding. Windows of 1, of a tile (64), longer than T;
// T not a multiple of the 64-query blocks; head sizes 4 to 128.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backend/attention_layer.h"
#include "bf16_vectors.h"
#include "ops_test_util.h"

namespace ember {
namespace {

struct ScheduleCase {
  Shape shape;
  AttentionLayer layer;
};

std::string case_name(const testing::TestParamInfo<ScheduleCase>& info) {
  const ScheduleCase& c = info.param;
  const Shape& s = c.shape;
  return "T" + std::to_string(s.T) + "_HS" + std::to_string(s.C / s.NH) + "_w" + std::to_string(c.layer.window) +
         "_alibi" + std::to_string(int(c.layer.alibi_slope * 100)) + "_rope" + std::to_string(int(c.layer.rope_theta));
}

// Every schedule on shapes with T across several query blocks (150 = 64 + 64 + 22), a window that cuts inside a block
// and one that covers none, and head sizes of the bf16 kernels (16 to 128) and off them (4).
std::vector<ScheduleCase> cases(bool bf16_only = false) {
  const Shape shapes[] = {{2, 7, 12, 3}, {2, 150, 48, 3}, {1, 130, 64, 2}, {1, 70, 128, 2}, {1, 66, 256, 2}};
  const AttentionLayer layers[] = {{1, 0.0f, 0.0f},       {1, 0.0f, 10000.0f},    {5, 0.5f, 0.0f}, {64, 0.25f, 5e5f},
                                   {100, 0.0f, 10000.0f}, {1000, 0.5f, 10000.0f}, {0, 0.5f, 0.0f}, {0, 0.0f, 5e5f}};
  std::vector<ScheduleCase> out;
  for (const Shape& s : shapes)
    for (const AttentionLayer& l : layers)
      if ((s.T > 7 || l.window != 64) && (!bf16_only || attention_in_bf16(MatmulPrecision::bf16, s.C / s.NH)))
        out.push_back({s, l});
  return out;
}

class OpsAttentionSchedule : public testing::TestWithParam<ScheduleCase> {
 protected:
  std::unique_ptr<Backend> be = make_cpu_backend();
};

INSTANTIATE_TEST_SUITE_P(Schedules, OpsAttentionSchedule, testing::ValuesIn(cases()), case_name);

// The cases whose head size has bf16 attention (attention_in_bf16).
class OpsAttentionScheduleBf16 : public OpsAttentionSchedule {};
INSTANTIATE_TEST_SUITE_P(Schedules, OpsAttentionScheduleBf16, testing::ValuesIn(cases(true)), case_name);

TEST_P(OpsAttentionSchedule, MatchesTheReferenceAndFiniteDifferences) {
  const auto [B, T, C, NH] = GetParam().shape;
  const AttentionLayer layer = GetParam().layer;
  const int HS = C / NH;
  Rng rng(uint32_t(17 + T * 31 + HS * 7 + layer.window));
  // Scores ~N(0, 1.5^2) as in OpsAttention: peaked enough that the max shift and the window's edge matter.
  const auto qkv = rng.normal(size_t(B) * T * 3 * C, 1.5f), R = rng.normal(size_t(B) * T * C);
  Floats d_qkv(*be, qkv), d_R(*be, R), d_out(*be, size_t(B) * T * C), d_lse(*be, size_t(B) * NH * T),
      d_dqkv(*be, nans(qkv.size()));  // dqkv is written whole: NaN shows an element read or left
  be->attention_forward(d_out.get(), d_lse.get(), d_qkv.get(), B, T, C, NH, layer);
  Vec qd = to_double(qkv), lse;
  const Vec out = ref_attention(qd, B, T, C, NH, &lse, layer);
  // As OpsAttention: T probability-weighted values after HS-term products; the rotation adds two terms to each
  // product's inputs, and the bias one to each score.
  expect_close("out", d_out.host(), out, fp32_tol(T + HS + 2, out));
  expect_close("lse", d_lse.host(), lse, fp32_tol(T + HS + 2, lse));

  be->attention_backward(d_dqkv.get(), d_R.get(), d_qkv.get(), d_out.get(), d_lse.get(), B, T, C, NH, layer);
  const Vec Rd = to_double(R);
  const Vec dqkv = ref_attention_backward(Rd, qd, B, T, C, NH, layer);
  // The reference's own backward is checked against its forward (finite differences): the definitions of the window,
  // bias and rotation agree.
  auto loss = [&] { return dot(ref_attention(qd, B, T, C, NH, nullptr, layer), Rd); };
  expect_dqkv("", d_dqkv.host(), dqkv, qd, loss, rng, C, T + HS + 4, 3 * fd_points(double(B) * T * T * C));
}

// Under matmul precision bf16 (the CUDA tensor-core kernels' roundings, for head sizes 16 to 128): within bf16's
// rounding of the reference, 2% of the RMS (8 bits of mantissa on P, dS and the operands: about 0.4% per rounding,
// a few roundings deep), and bitwise the same as full attention where the schedule changes nothing.
TEST_P(OpsAttentionScheduleBf16, IsWithinItsRounding) {
  const auto [B, T, C, NH] = GetParam().shape;
  const AttentionLayer layer = GetParam().layer;
  const int HS = C / NH;
  Rng rng(uint32_t(91 + T + HS));
  const auto qkv = test::rounded_to_bf16(rng.normal(size_t(B) * T * 3 * C, 1.5f));
  const auto dout = test::rounded_to_bf16(rng.normal(size_t(B) * T * C));
  be->set_matmul_precision(MatmulPrecision::bf16);
  Floats d_qkv(*be, qkv), d_dout(*be, dout), d_out(*be, dout.size()), d_lse(*be, size_t(B) * NH * T),
      d_dqkv(*be, qkv.size());
  be->attention_forward(d_out.get(), d_lse.get(), d_qkv.get(), B, T, C, NH, layer);
  be->attention_backward(d_dqkv.get(), d_dout.get(), d_qkv.get(), d_out.get(), d_lse.get(), B, T, C, NH, layer);
  const Vec qd = to_double(qkv);
  const Vec out = ref_attention(qd, B, T, C, NH, nullptr, layer);
  const Vec dqkv = ref_attention_backward(to_double(dout), qd, B, T, C, NH, layer);
  auto rel_rms = [](const std::vector<float>& got, const Vec& want) {
    double e = 0.0;
    for (size_t i = 0; i < got.size(); ++i) e += (got[i] - want[i]) * (got[i] - want[i]);
    return std::sqrt(e / double(got.size())) / rms(want);
  };
  EXPECT_LT(rel_rms(d_out.host(), out), 0.02) << "out";
  const auto got = d_dqkv.host();
  for (int w = 0; w < 3; ++w)
    EXPECT_LT(rel_rms(qkv_part(got, C, w), qkv_part(dqkv, C, w)), 0.02) << "d"
                                                                        << "qkv"[w];
  if (layer.window >= T && layer.alibi_slope == 0.0f && layer.rope_theta == 0.0f) {
    Floats f_out(*be, dout.size()), f_lse(*be, size_t(B) * NH * T), f_dqkv(*be, qkv.size());
    be->attention_forward(f_out.get(), f_lse.get(), d_qkv.get(), B, T, C, NH);
    be->attention_backward(f_dqkv.get(), d_dout.get(), d_qkv.get(), f_out.get(), f_lse.get(), B, T, C, NH);
    EXPECT_EQ(d_out.host(), f_out.host()) << "a window past T changed the forward pass";
    EXPECT_EQ(got, f_dqkv.host()) << "a window past T changed the backward pass";
  }
}

// A window of T or more, no bias and no rotation is full attention, bitwise (fp32).
TEST(OpsAttentionScheduleFull, AWindowPastTIsFullAttentionBitwise) {
  std::unique_ptr<Backend> be = make_cpu_backend();
  const int B = 2, T = 150, C = 48, NH = 3;
  Rng rng(5);
  const auto qkv = rng.normal(size_t(B) * T * 3 * C, 1.5f), R = rng.normal(size_t(B) * T * C);
  std::vector<float> outs[2], grads[2];
  for (int k = 0; k < 2; ++k) {
    const AttentionLayer layer = k == 0 ? AttentionLayer{} : AttentionLayer{T, 0.0f, 0.0f};
    Floats d_qkv(*be, qkv), d_R(*be, R), d_out(*be, size_t(B) * T * C), d_lse(*be, size_t(B) * NH * T),
        d_dqkv(*be, qkv.size());
    be->attention_forward(d_out.get(), d_lse.get(), d_qkv.get(), B, T, C, NH, layer);
    be->attention_backward(d_dqkv.get(), d_R.get(), d_qkv.get(), d_out.get(), d_lse.get(), B, T, C, NH, layer);
    outs[k] = d_out.host(), grads[k] = d_dqkv.host();
  }
  EXPECT_EQ(outs[0], outs[1]);
  EXPECT_EQ(grads[0], grads[1]);
}

}  // namespace
}  // namespace ember
