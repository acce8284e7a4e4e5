// CPU causal attention (cpu_attention.cpp) against the float64 reference and finite differences, and under matmul
// precision bf16 within the rounding bounds of attention_bf16_bounds.h.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "attention_bf16_bounds.h"
#include "core/dtype.h"
#include "ops_test_util.h"

namespace ember {
namespace {

class OpsAttention : public CpuOpsTest {};

INSTANTIATE_TEST_SUITE_P(Shapes, OpsAttention, testing::ValuesIn(kShapes), shape_name);

TEST_P(OpsAttention, Attention) {
  const auto [B, T, C, NH] = GetParam();
  Rng rng(stream(5));
  // Scores q.k / sqrt(HS) come out ~N(0, 1.5^2): peaked enough that the max shift and masking matter.
  const auto qkv = rng.normal(size_t(B) * T * 3 * C, 1.5f), R = rng.normal(size_t(B) * T * C);
  Floats d_qkv(*be, qkv), d_R(*be, R), d_out(*be, size_t(B) * T * C), d_lse(*be, size_t(B) * NH * T),
      d_dqkv(*be, nans(qkv.size()));  // dqkv is written: NaN shows an element read or left
  be->attention_forward(d_out.get(), d_lse.get(), d_qkv.get(), B, T, C, NH);
  Vec qd = to_double(qkv), lse;
  const Vec out = ref_attention(qd, B, T, C, NH, &lse);
  // Each output sums T probability-weighted values after HS-term score dot products.
  expect_close("attention out", d_out.host(), out, fp32_tol(T + C / NH, out));
  expect_close("attention lse", d_lse.host(), lse, fp32_tol(T + C / NH, lse));

  be->attention_backward(d_dqkv.get(), d_R.get(), d_qkv.get(), d_out.get(), d_lse.get(), B, T, C, NH);
  const Vec Rd = to_double(R);
  const Vec dqkv = ref_attention_backward(Rd, qd, B, T, C, NH);
  // dq, dk and dv differ in size, so each is checked on its own with its own RMS scale: dS is a T-term softmax
  // backward; dq, dk, dv sum T terms of HS-term products.
  auto loss = [&] { return dot(ref_attention(qd, B, T, C, NH), Rd); };
  expect_dqkv("attention ", d_dqkv.host(), dqkv, qd, loss, rng, C, T + C / NH, 3 * fd_points(double(B) * T * T * C));
}

// Attention under matmul precision bf16 (head sizes 16, 32, 64): the products' inputs are rounded to bf16 as the CUDA
// backend's tensor-core kernels take them. On inputs that are already bf16 values the results must match the float64
// reference within the fp32 tolerance plus twice the first-order bound for rounding P and dS (attention_bf16_bounds.h),
// and be far (> 20 fp32 tolerances) from the fp32 results somewhere, which they would not be if P and dS were left
// unrounded; unrounded q, k and v must give the same forward bits. The backward pass reads the fp32 forward's out
// and lse. A head size of 8 keeps fp32 attention: bitwise.
TEST_F(OpsAttention, AttentionBf16RoundsPAndDS) {
  struct Shape {
    int B, T, C, NH;
  };
  for (const Shape s : {Shape{2, 150, 48, 3}, Shape{1, 70, 128, 2}, Shape{2, 33, 24, 3}}) {
    const int B = s.B, T = s.T, C = s.C, NH = s.NH, HS = C / NH;
    const std::string tag = "HS " + std::to_string(HS) + " ";
    Rng rng(211);
    const auto raw = rng.normal(size_t(B) * T * 3 * C, 1.5f), qkv = test::rounded_to_bf16(raw);
    const auto dout = test::rounded_to_bf16(rng.normal(size_t(B) * T * C));
    const MatmulPrecision precision[2] = {MatmulPrecision::fp32, MatmulPrecision::bf16};
    std::vector<float> out[2], dqkv[2];
    Floats d_qkv(*be, qkv), d_dout(*be, dout), d_out32(*be, dout.size()), d_lse32(*be, size_t(B) * NH * T);
    for (int k = 1; k >= 0; --k) {  // bf16, then fp32, whose out and lse stay for both backward passes
      be->set_matmul_precision(precision[k]);
      be->attention_forward(d_out32.get(), d_lse32.get(), d_qkv.get(), B, T, C, NH);
      out[k] = d_out32.host();
    }
    for (int k = 0; k < 2; ++k) {
      be->set_matmul_precision(precision[k]);
      Floats d_dqkv(*be, qkv.size());
      be->attention_backward(d_dqkv.get(), d_dout.get(), d_qkv.get(), d_out32.get(), d_lse32.get(), B, T, C, NH);
      dqkv[k] = d_dqkv.host();
    }
    be->set_matmul_precision(MatmulPrecision::fp32);
    if (HS == 8) {
      EXPECT_EQ(out[1], out[0]) << tag << "out: a head size without tensor-core kernels must stay fp32";
      EXPECT_EQ(dqkv[1], dqkv[0]) << tag << "dqkv: a head size without tensor-core kernels must stay fp32";
      continue;
    }
    // q, k and v enter every product rounded, so unrounded inputs give the forward pass's bits unchanged.
    Floats d_raw(*be, raw), d_out_raw(*be, dout.size()), d_lse_raw(*be, size_t(B) * NH * T);
    be->set_matmul_precision(MatmulPrecision::bf16);
    be->attention_forward(d_out_raw.get(), d_lse_raw.get(), d_raw.get(), B, T, C, NH);
    be->set_matmul_precision(MatmulPrecision::fp32);
    EXPECT_EQ(d_out_raw.host(), out[1]) << tag << "out: q, k or v was used unrounded";
    const Vec qd = to_double(qkv), want_out = ref_attention(qd, B, T, C, NH),
              want_dqkv = ref_attention_backward(to_double(dout), qd, B, T, C, NH);
    const test::AttnBounds bd = test::attention_bf16_bounds(qkv, dout, B, T, C, NH);
    auto check = [&](const std::string& what, const std::vector<float>& got, const std::vector<float>& fp32,
                     const Vec& want, const std::vector<float>& bound, double K) {
      const Tol tol = fp32_tol(K, want);
      size_t bad = 0;
      double far = 0.0;
      for (size_t i = 0; i < got.size(); ++i) {
        const double allowed = tol.atol + tol.rtol * std::fabs(want[i]) + 2.0 * bound[i];
        bad += !(std::fabs(double(got[i]) - want[i]) <= allowed);
        far = std::max(far, std::fabs(double(got[i]) - double(fp32[i])) / (tol.atol + tol.rtol * std::fabs(want[i])));
      }
      EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements outside the bf16 bound";
      EXPECT_GT(far, 20.0) << what << ": the bf16 results are within 20 fp32 tolerances of the fp32 ones";
    };
    check(tag + "out", out[1], out[0], want_out, bd.out, T + HS);
    check(tag + "dqkv", dqkv[1], dqkv[0], want_dqkv, bd.dqkv, 2.0 * (T + HS));
  }
}

}  // namespace
}  // namespace ember
