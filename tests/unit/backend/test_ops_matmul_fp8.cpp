// The dense layers under matmul precision fp8 (cpu_matmul.cpp, cpu_matmul_fp8.cpp) against a reference built here
// from the scheme's definition (backend.h, core/fp8_quant.h, tested on its own): the operands quantized with one
// scale per tensor (activations and weights e4m3, output gradients e5m2), their fp8 values' products summed in
// float64, and the epilogue's roundings in their stated order. The backend sums the exact products in fp32 in an
// order of its own, so each output may differ from the reference by that sum's rounding, bounded here as K * 2^-24
// times the sum of the products' magnitudes (the standard bound for a recursive sum), scaled. Then the error of the
// whole product against float64 and the unscaled test variant (the copies' lifetime: test_ops_weight_copies.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "bf16_vectors.h"
#include "core/fp8_quant.h"
#include "ops_test_util.h"

namespace ember {
namespace {

using Halves = test::BackendArray<BFloat16>;

struct Quantized {
  std::vector<float> values;  // the fp8 values, unscaled
  float scale;
};
Quantized quantized(const std::vector<float>& x, Fp8Format f) {
  std::vector<uint8_t> q(x.size());
  Quantized r{std::vector<float>(x.size()), quantize_fp8_tensor(x.data(), x.size(), f, q.data())};
  widen_fp8(q.data(), q.size(), f, r.values.data());
  return r;
}

// The scheme's product of op(a) (M, K) and op(b) (K, N): a stored (M, K), or (K, M) where a_t; b stored (K, N), or
// (N, K) where b_t. want = ((float(sum) * sa) * sb) + bias (+ base, where accumulating), and the tolerance its sum's
// rounding allows.
struct Expected {
  std::vector<float> want, tol;
};
Expected scheme(const Quantized& a, bool a_t, const Quantized& b, bool b_t, const std::vector<float>* bias,
                const std::vector<float>* base, int M, int N, int K) {
  Expected e{std::vector<float>(size_t(M) * N), std::vector<float>(size_t(M) * N)};
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double sum = 0, mag = 0;
      for (int k = 0; k < K; ++k) {
        const double p = double(a.values[a_t ? size_t(k) * M + m : size_t(m) * K + k]) *
                         b.values[b_t ? size_t(n) * K + k : size_t(k) * N + n];
        sum += p, mag += std::fabs(p);
      }
      volatile float v = float(sum);
      v = v * a.scale;
      v = v * b.scale;
      if (bias) v = v + (*bias)[size_t(n)];
      if (base) v = (*base)[size_t(m) * N + n] + v;
      const double scale = double(a.scale) * b.scale;
      e.want[size_t(m) * N + n] = v;
      // The sum's rounding, carried through the scaling, and a few fp32 roundings of the result.
      e.tol[size_t(m) * N + n] = float(K * 0x1p-24 * mag * scale + 0x1p-21 * std::fabs(double(v)) + 1e-30);
    }
  return e;
}

void expect_within(const std::vector<float>& got, const Expected& e, const std::string& what) {
  ASSERT_EQ(got.size(), e.want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_LE(std::fabs(double(got[i]) - e.want[i]), e.tol[i])
        << what << " at " << i << ": " << got[i] << " vs " << e.want[i];
}

struct Dims {
  int N, IC, OC;
};
const Dims kDims[] = {{1, 7, 5}, {13, 33, 40}, {64, 96, 257}, {150, 48, 145}};

TEST(OpsMatmulFp8, ForwardIsTheScheme) {
  for (const Dims& d : kDims) {
    const std::string tag = std::to_string(d.N) + "x" + std::to_string(d.IC) + "x" + std::to_string(d.OC);
    Rng rng(uint32_t(d.N * 1000 + d.OC));
    const auto x = rng.normal(size_t(d.N) * d.IC, 2.0f), w = rng.normal(size_t(d.IC) * d.OC, 0.02f),
               b = rng.normal(d.OC, 0.1f);
    // The reference: x's bf16 values and the fp32 weight, each e4m3 with one scale.
    const Quantized qx = quantized(test::rounded_to_bf16(x), Fp8Format::e4m3), qw = quantized(w, Fp8Format::e4m3);
    auto be = make_cpu_backend();
    be->set_matmul_precision(MatmulPrecision::fp8);
    Floats d_x(*be, x), d_w(*be, w), d_b(*be, b), out(*be, nans(size_t(d.N) * d.OC));
    be->matmul_forward(out.get(), d_x.get(), d_w.get(), d_b.get(), d.N, d.IC, d.OC);
    expect_within(out.host(), scheme(qx, false, qw, false, &b, nullptr, d.N, d.OC, d.IC), tag + ": fp32 inp");
    // As the model calls it: inp stored in bf16 beside the fp32 master weight; out and bias stored in bf16.
    Halves x16(*be, test::bf16_values(x)), b16(*be, test::bf16_values(b)), out16(*be, size_t(d.N) * d.OC);
    be->matmul_forward(out.get(), x16.get(), d_w.get(), nullptr, d.N, d.IC, d.OC);
    expect_within(out.host(), scheme(qx, false, qw, false, nullptr, nullptr, d.N, d.OC, d.IC), tag + ": bf16 inp");
    be->matmul_forward(out16.get(), x16.get(), d_w.get(), b16.get(), d.N, d.IC, d.OC);
    const auto b_rounded = test::rounded_to_bf16(b);
    Expected e = scheme(qx, false, qw, false, &b_rounded, nullptr, d.N, d.OC, d.IC);
    for (size_t i = 0; i < e.want.size(); ++i) e.tol[i] += std::fabs(e.want[i]) * 0x1p-8f;  // the output's rounding
    expect_within(test::widened(out16.host()), e, tag + ": bf16-stored out and bias");
  }
}

TEST(OpsMatmulFp8, BackwardIsTheScheme) {
  for (const Dims& d : kDims) {
    const std::string tag = std::to_string(d.N) + "x" + std::to_string(d.IC) + "x" + std::to_string(d.OC);
    Rng rng(uint32_t(d.N * 1000 + d.OC + 7));
    const auto x = rng.normal(size_t(d.N) * d.IC), w = rng.normal(size_t(d.IC) * d.OC, 0.02f),
               dy = rng.normal(size_t(d.N) * d.OC, 1e-3f), dw0 = rng.normal(w.size()), db0 = rng.normal(d.OC);
    const Quantized qd = quantized(test::rounded_to_bf16(dy), Fp8Format::e5m2), qw = quantized(w, Fp8Format::e4m3),
                    qx = quantized(test::rounded_to_bf16(x), Fp8Format::e4m3);
    auto be = make_cpu_backend(), be16 = make_cpu_backend();
    be->set_matmul_precision(MatmulPrecision::fp8);
    be16->set_matmul_precision(MatmulPrecision::bf16);
    Floats d_x(*be, x), d_w(*be, w), d_dy(*be, dy), dx(*be, nans(x.size())), dwt(*be, dw0), dbs(*be, db0);
    be->matmul_backward(dx.get(), dwt.get(), dbs.get(), d_dy.get(), d_x.get(), d_w.get(), d.N, d.IC, d.OC);
    // dinp = dout (e5m2) @ W^T (e4m3); dW += inp^T (e4m3) @ dout (e5m2), added to what dW held.
    expect_within(dx.host(), scheme(qd, false, qw, true, nullptr, nullptr, d.N, d.IC, d.OC), tag + ": dinp");
    expect_within(dwt.host(), scheme(qx, true, qd, false, nullptr, &dw0, d.IC, d.OC, d.N), tag + ": dweight");
    // The bias gradient is bf16's (a sum of dout's values, unquantized).
    Floats e_x(*be16, x), e_w(*be16, w), e_dy(*be16, dy), ex(*be16, x.size()), ewt(*be16, dw0), ebs(*be16, db0);
    be16->matmul_backward(ex.get(), ewt.get(), ebs.get(), e_dy.get(), e_x.get(), e_w.get(), d.N, d.IC, d.OC);
    EXPECT_EQ(dbs.host(), ebs.host()) << tag << ": dbias";
    EXPECT_NE(dwt.host(), ewt.host()) << tag << ": dweight must be fp8's, not bf16's";
  }
}

// The whole forward product against float64 on the unrounded inputs. e4m3 keeps 3 fraction bits: a value's rounding
// error is uniform within half a step, a step 2^-3 to 2^-4 of the value, so its rms is at most 2^-4 / sqrt(3) = 3.6%
// of the value for each operand; a product of two such operands summed over random signs errs by at most
// sqrt(2) * 3.6% = 5.1% of the output's rms: the bound is 1.5 times that.
TEST(OpsMatmulFp8, ForwardErrorIsThatOfFp8Operands) {
  const int N = 64, IC = 768, OC = 256;
  Rng rng(99);
  const auto x = rng.normal(size_t(N) * IC), w = rng.normal(size_t(IC) * OC, 0.02f);
  const Vec ref = ref_matmul(to_double(x), to_double(w), nullptr, N, IC, OC);
  auto be = make_cpu_backend();
  be->set_matmul_precision(MatmulPrecision::fp8);
  Floats d_x(*be, x), d_w(*be, w), out(*be, size_t(N) * OC);
  be->matmul_forward(out.get(), d_x.get(), d_w.get(), nullptr, N, IC, OC);
  const auto got = out.host();
  double err2 = 0;
  for (size_t i = 0; i < got.size(); ++i) err2 += (got[i] - ref[i]) * (got[i] - ref[i]);
  const double rms_err = std::sqrt(err2 / double(got.size())), rms_ref = rms(ref);
  EXPECT_LT(rms_err, 1.5 * 0.051 * rms_ref) << "rms error " << rms_err << " of rms " << rms_ref;
  EXPECT_GT(rms_err, 0.1 * 0.036 * rms_ref) << "no rounding error at all: fp8 did not run";
}

// Unscaled (training.fp8_scaling = false, the convergence test's weakened variant), output gradients of the size a
// model's are (rms 1e-5 here) fall among e5m2's subnormals (steps of 2^-16 = 1.5e-5) or flush to zero: the input
// gradient errs by 45% of its rms here (30% is the bound), where the scaled one errs as the forward product does (a
// 2-bit e5m2 fraction: at most 2^-3 / sqrt(3) = 7.2% per value, sqrt(7.2^2 + 3.6^2) = 8.1% of the rms for the product,
// bound 1.5 times that).
TEST(OpsMatmulFp8, UnscaledGradientsVanish) {
  const int N = 32, IC = 256, OC = 384;
  Rng rng(98);
  const auto x = rng.normal(size_t(N) * IC), w = rng.normal(size_t(IC) * OC, 0.02f),
             dy = rng.normal(size_t(N) * OC, 1e-5f);
  const Vec wt = [&] {  // W^T (OC, IC), for dinp = dy @ W^T
    Vec t(w.size());
    for (int i = 0; i < IC; ++i)
      for (int o = 0; o < OC; ++o) t[size_t(o) * IC + i] = w[size_t(i) * OC + o];
    return t;
  }();
  const Vec ref = ref_matmul(to_double(dy), wt, nullptr, N, OC, IC);
  auto relative_rms_error = [&](bool scaled) {
    auto be = make_cpu_backend();
    be->set_matmul_precision(MatmulPrecision::fp8);
    be->set_fp8_scaling(scaled);
    Floats d_x(*be, x), d_w(*be, w), d_dy(*be, dy), dx(*be, x.size()), dw(*be, w.size());
    be->matmul_backward(dx.get(), dw.get(), nullptr, d_dy.get(), d_x.get(), d_w.get(), N, IC, OC);
    const auto got = dx.host();
    double err2 = 0;
    for (size_t i = 0; i < got.size(); ++i) err2 += (got[i] - ref[i]) * (got[i] - ref[i]);
    return std::sqrt(err2 / double(got.size())) / rms(ref);
  };
  const double scaled = relative_rms_error(true), unscaled = relative_rms_error(false);
  EXPECT_LT(scaled, 1.5 * 0.081) << "scaled";
  EXPECT_GT(unscaled, 0.3) << "unscaled gradients must lose much of their value";
  EXPECT_GT(unscaled, 4 * scaled) << "unscaled against scaled";
}

}  // namespace
}  // namespace ember
