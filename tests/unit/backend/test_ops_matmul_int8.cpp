// The dense layers under matmul precision int8 (cpu_matmul.cpp, cpu_matmul_int8.cpp) bitwise against a reference
// built here from the scheme's definition (backend.h): the quantized operands (core/int8_quant.h, tested on its own),
// their products summed in int64, and the epilogue's roundings in their stated order; the weight gradient and bias
// gradient bitwise those of bf16 (or, with the int8 weight-gradient option, the tiled int8 scheme, bitwise); the
// dither key's effect; the error of the whole product against float64 (their copies' lifetime:
// test_ops_weight_copies.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/cpu/cpu_matmul_int8.h"
#include "bf16_vectors.h"
#include "core/int8_quant.h"
#include "ops_test_util.h"

namespace ember {
namespace {

using Halves = test::BackendArray<BFloat16>;

// fp32 operations one at a time (volatile: no contraction into an FMA), as the scheme states them.
float scaled(int64_t sum, float sa, float sb, const float* bias) {
  volatile float v = float(sum);
  v = v * sa;
  v = v * sb;
  if (bias) v = v + *bias;
  return v;
}

// out (R, N) = the scheme's product of qa (R, K) and qb: (K, N), or (N, K) where b_rows_are_n.
std::vector<float> reference_product(const std::vector<int8_t>& qa, const std::vector<float>& sa,
                                     const std::vector<int8_t>& qb, const std::vector<float>& sb, bool b_rows_are_n,
                                     const std::vector<float>* bias, int R, int K, int N) {
  std::vector<float> out(size_t(R) * N);
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < N; ++n) {
      int64_t sum = 0;
      for (int k = 0; k < K; ++k)
        sum += int64_t(qa[size_t(r) * K + k]) * (b_rows_are_n ? qb[size_t(n) * K + k] : qb[size_t(k) * N + n]);
      out[size_t(r) * N + n] = scaled(sum, sa[r], sb[n], bias ? &(*bias)[n] : nullptr);
    }
  return out;
}

struct Dims {
  int N, IC, OC;
};
const Dims kDims[] = {{1, 7, 5}, {13, 33, 40}, {64, 96, 257}, {150, 48, 145}};

TEST(OpsMatmulInt8, ForwardIsTheSchemeBitwise) {
  for (const Dims& d : kDims) {
    const std::string tag = std::to_string(d.N) + "x" + std::to_string(d.IC) + "x" + std::to_string(d.OC);
    Rng rng(uint32_t(d.N * 1000 + d.OC));
    const auto x = rng.normal(size_t(d.N) * d.IC, 2.0f), w = rng.normal(size_t(d.IC) * d.OC, 0.02f),
               b = rng.normal(d.OC, 0.1f);
    // The reference: x's bf16 values per row, the fp32 weight per column.
    const auto xb = test::rounded_to_bf16(x);
    std::vector<int8_t> qx(x.size()), qw(w.size());
    std::vector<float> sx(d.N), sw(d.OC);
    quantize_int8_rows(xb.data(), d.N, d.IC, qx.data(), sx.data());
    quantize_int8_columns(w.data(), d.IC, d.OC, qw.data(), sw.data());
    const auto want = reference_product(qx, sx, qw, sw, false, &b, d.N, d.IC, d.OC);
    const auto want_nobias = reference_product(qx, sx, qw, sw, false, nullptr, d.N, d.IC, d.OC);

    auto be = make_cpu_backend();
    be->set_matmul_precision(MatmulPrecision::int8);
    Floats d_x(*be, x), d_w(*be, w), d_b(*be, b), out(*be, nans(size_t(d.N) * d.OC));
    be->matmul_forward(out.get(), d_x.get(), d_w.get(), d_b.get(), d.N, d.IC, d.OC);
    EXPECT_EQ(out.host(), want) << tag << ": fp32 inp and weight";
    be->matmul_forward(out.get(), d_x.get(), d_w.get(), nullptr, d.N, d.IC, d.OC);
    EXPECT_EQ(out.host(), want_nobias) << tag << ": no bias";
    // As the model calls it: inp stored in bf16 beside the fp32 master weight; out and bias stored in bf16.
    Halves x16(*be, test::bf16_values(x)), b16(*be, test::bf16_values(b)), out16(*be, size_t(d.N) * d.OC);
    be->matmul_forward(out.get(), x16.get(), d_w.get(), d_b.get(), d.N, d.IC, d.OC);
    EXPECT_EQ(out.host(), want) << tag << ": bf16-stored inp";
    const auto b_rounded = test::rounded_to_bf16(b);
    be->matmul_forward(out16.get(), x16.get(), d_w.get(), b16.get(), d.N, d.IC, d.OC);
    EXPECT_EQ(test::widened(out16.host()),
              test::rounded_to_bf16(reference_product(qx, sx, qw, sw, false, &b_rounded, d.N, d.IC, d.OC)))
        << tag << ": bf16-stored out and bias";
  }
}

// The lm_head's forward product under int8 with Backend::set_int8_lm_head (decoding): wte (V, C) quantized per row,
// its output channels, and inp's bf16 values per row; without the switch it stays the bf16 product.
TEST(OpsMatmulInt8, LmHeadForwardIsTheSchemeBitwiseWhenAsked) {
  for (const Dims& d : kDims) {
    const int N = d.N, C = d.IC, V = d.OC;
    const std::string tag = std::to_string(N) + "x" + std::to_string(C) + "x" + std::to_string(V);
    Rng rng(uint32_t(N * 1000 + V + 11));
    const auto x = rng.normal(size_t(N) * C, 2.0f), wte = rng.normal(size_t(V) * C, 0.02f);
    const auto xb = test::rounded_to_bf16(x);
    std::vector<int8_t> qx(x.size()), qw(wte.size());
    std::vector<float> sx(N), sw(V);
    quantize_int8_rows(xb.data(), N, C, qx.data(), sx.data());
    quantize_int8_rows(wte.data(), V, C, qw.data(), sw.data());
    const auto want = reference_product(qx, sx, qw, sw, true, nullptr, N, C, V);

    auto be = make_cpu_backend();
    be->set_matmul_precision(MatmulPrecision::int8);
    Halves x16(*be, test::bf16_values(x));
    Floats d_w(*be, wte), out(*be, nans(size_t(N) * V));
    be->matmul_forward_transposed(out.get(), x16.get(), d_w.get(), N, C, V);  // the switch off: the bf16 product
    EXPECT_NE(out.host(), want) << tag << ": int8 without the switch";
    be->set_int8_lm_head(true);
    be->matmul_forward_transposed(out.get(), x16.get(), d_w.get(), N, C, V);
    EXPECT_EQ(out.host(), want) << tag << ": the int8 lm_head";
  }
}

TEST(OpsMatmulInt8, BackwardIsTheSchemeBitwise) {
  for (const Dims& d : kDims) {
    const std::string tag = std::to_string(d.N) + "x" + std::to_string(d.IC) + "x" + std::to_string(d.OC);
    Rng rng(uint32_t(d.N * 1000 + d.OC + 7));
    const auto x = rng.normal(size_t(d.N) * d.IC), w = rng.normal(size_t(d.IC) * d.OC, 0.02f),
               dy = rng.normal(size_t(d.N) * d.OC, 1e-3f), dw0 = rng.normal(w.size()), db0 = rng.normal(d.OC);
    const DitherKey key{5, 0, 1234, 17};
    const auto dyb = test::rounded_to_bf16(dy);
    std::vector<int8_t> qd(dy.size()), qw(w.size());
    std::vector<float> sd(d.N), sw(d.IC);
    quantize_int8_rows_dithered(dyb.data(), d.N, d.OC, key, qd.data(), sd.data());
    quantize_int8_rows(w.data(), d.IC, d.OC, qw.data(), sw.data());
    const auto want = reference_product(qd, sd, qw, sw, true, nullptr, d.N, d.OC, d.IC);

    auto be = make_cpu_backend(), be16 = make_cpu_backend();
    be->set_matmul_precision(MatmulPrecision::int8);
    be16->set_matmul_precision(MatmulPrecision::bf16);
    be->set_gradient_dither(key);
    Floats d_x(*be, x), d_w(*be, w), d_dy(*be, dy), dx(*be, nans(x.size())), dwt(*be, dw0), dbs(*be, db0);
    be->matmul_backward(dx.get(), dwt.get(), dbs.get(), d_dy.get(), d_x.get(), d_w.get(), d.N, d.IC, d.OC);
    EXPECT_EQ(dx.host(), want) << tag << ": dinp";
    // The weight and bias gradients are bf16's.
    Floats e_x(*be16, x), e_w(*be16, w), e_dy(*be16, dy), ex(*be16, x.size()), ewt(*be16, dw0), ebs(*be16, db0);
    be16->matmul_backward(ex.get(), ewt.get(), ebs.get(), e_dy.get(), e_x.get(), e_w.get(), d.N, d.IC, d.OC);
    EXPECT_EQ(dwt.host(), ewt.host()) << tag << ": dweight";
    EXPECT_EQ(dbs.host(), ebs.host()) << tag << ": dbias";
    // Another key draws other roundings; the same key the same ones.
    be->set_gradient_dither(DitherKey{5, 0, 1234, 18});
    be->matmul_backward(dx.get(), dwt.get(), nullptr, d_dy.get(), d_x.get(), d_w.get(), d.N, d.IC, d.OC);
    if (d.N * d.OC > 64) EXPECT_NE(dx.host(), want) << tag << ": another dither stream";
    be->set_gradient_dither(key);
    be->matmul_backward(dx.get(), dwt.get(), nullptr, d_dy.get(), d_x.get(), d_w.get(), d.N, d.IC, d.OC);
    EXPECT_EQ(dx.host(), want) << tag << ": the same key again";
  }
}

// The whole forward product against float64 on the unrounded inputs: each term x w carries the quantization errors of
// both operands, at most half a step of each (x's bf16 rounding adds 2^-9 relative), so |error| <= sum_i (|x_i| dw_o
// + |w_io| dx_n) / 2 + ..., which over random signs grows as sqrt(IC): stated here as an rms bound of 1/127 of the
// rms output per operand, twice for safety, and a maximum of 8 times that.
TEST(OpsMatmulInt8, ForwardErrorIsThatOfInt8Operands) {
  const int N = 64, IC = 768, OC = 256;
  Rng rng(99);
  const auto x = rng.normal(size_t(N) * IC), w = rng.normal(size_t(IC) * OC, 0.02f);
  auto be = make_cpu_backend();
  be->set_matmul_precision(MatmulPrecision::int8);
  Floats d_x(*be, x), d_w(*be, w), out(*be, size_t(N) * OC);
  be->matmul_forward(out.get(), d_x.get(), d_w.get(), nullptr, N, IC, OC);
  const Vec ref = ref_matmul(to_double(x), to_double(w), nullptr, N, IC, OC);
  const auto got = out.host();
  double err2 = 0, ref2 = 0, worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    err2 += (got[i] - ref[i]) * (got[i] - ref[i]);
    ref2 += ref[i] * ref[i];
    worst = std::max(worst, std::fabs(got[i] - ref[i]));
  }
  const double rms_err = std::sqrt(err2 / got.size()), rms_ref = std::sqrt(ref2 / got.size());
  // A uniform rounding error of a step s has rms s / sqrt(12); the steps are max|row| / 127, about 4.5 sigma / 127
  // for 768 normal values: so about 4.5 / 127 / sqrt(12) = 1.0% of each operand's rms per operand.
  EXPECT_LT(rms_err, 2 * 2 * 0.010 * rms_ref) << "rms error " << rms_err << " of rms " << rms_ref;
  EXPECT_GT(rms_err, 0.1 * 0.010 * rms_ref) << "no quantization error at all: int8 did not run";
  EXPECT_LT(worst, 8 * 2 * 2 * 0.010 * rms_ref);
}

// training.int8_weight_gradient: dW += the tiled int8 scheme (cpu_matmul_int8.h), bitwise: per tile of 256 tokens, x's
// bf16 values per input channel to nearest and dout's per output channel dithered (indices after the input-gradient
// product's) or to nearest, int64 sums, then (float(sum) * sx[i]) * sd[o] added, tile after tile. The input gradient
// and dbias stay what they are without the option; and the whole weight gradient errs against float64 by at most 3%
// of its rms (each operand's rounding is about 1% of its rms: a column's step is its largest magnitude over 127, near
// 3 sigma / 127 over 256 tokens; the sums average the rest).
TEST(OpsMatmulInt8, WeightGradientOptionIsTheTiledSchemeBitwise) {
  const int IC = 24, OC = 40, tile = kInt8WeightGradientTile;
  for (int N : {5, tile, tile + 44, 3 * tile - 1}) {
    for (bool stochastic : {true, false}) {
      const std::string tag = std::to_string(N) + (stochastic ? " dithered" : " nearest");
      Rng rng(uint32_t(N * 10 + stochastic));
      const auto x = rng.normal(size_t(N) * IC), w = rng.normal(size_t(IC) * OC, 0.02f),
                 dy = rng.normal(size_t(N) * OC, 1e-3f), dw0 = rng.normal(w.size(), 1e-3f), db0 = rng.normal(OC);
      const DitherKey key{3, 0, 99, 21};
      const auto xb = test::rounded_to_bf16(x), dyb = test::rounded_to_bf16(dy);
      std::vector<float> want = dw0;
      for (int t0 = 0; t0 < N; t0 += tile) {
        const int R = std::min(tile, N - t0);
        std::vector<int8_t> qx(size_t(R) * IC), qd(size_t(R) * OC);
        std::vector<float> sx(IC), sd(OC);
        quantize_int8_columns(xb.data() + size_t(t0) * IC, R, IC, qx.data(), sx.data());
        if (stochastic)
          quantize_int8_columns_dithered(dyb.data() + size_t(t0) * OC, R, OC, key, uint64_t(N) * OC + size_t(t0) * OC,
                                         qd.data(), sd.data());
        else
          quantize_int8_columns(dyb.data() + size_t(t0) * OC, R, OC, qd.data(), sd.data());
        for (int i = 0; i < IC; ++i)
          for (int o = 0; o < OC; ++o) {
            int64_t sum = 0;
            for (int r = 0; r < R; ++r) sum += int64_t(qx[size_t(r) * IC + i]) * qd[size_t(r) * OC + o];
            want[size_t(i) * OC + o] = want[size_t(i) * OC + o] + scaled(sum, sx[i], sd[o], nullptr);
          }
      }
      auto run = [&](bool option, std::vector<float>* dinp, std::vector<float>* dbias) {
        auto be = make_cpu_backend();
        be->set_matmul_precision(MatmulPrecision::int8);
        be->set_int8_stochastic_rounding(stochastic);
        be->set_int8_weight_gradient(option);
        be->set_gradient_dither(key);
        Floats d_x(*be, x), d_w(*be, w), d_dy(*be, dy), dx(*be, x.size()), dwt(*be, dw0), dbs(*be, db0);
        be->matmul_backward(dx.get(), dwt.get(), dbs.get(), d_dy.get(), d_x.get(), d_w.get(), N, IC, OC);
        *dinp = dx.host(), *dbias = dbs.host();
        return dwt.host();
      };
      std::vector<float> dx_on, db_on, dx_off, db_off;
      EXPECT_EQ(run(true, &dx_on, &db_on), want) << tag << ": dweight";
      const std::vector<float> bf16_dw = run(false, &dx_off, &db_off);
      EXPECT_EQ(dx_on, dx_off) << tag << ": dinp";
      EXPECT_EQ(db_on, db_off) << tag << ": dbias";
      EXPECT_NE(bf16_dw, want) << tag << ": the option changed nothing";
      if (N == 3 * tile - 1 && stochastic) {  // the error of the whole weight gradient
        Vec ref(w.size(), 0.0);
        for (int n = 0; n < N; ++n)
          for (int i = 0; i < IC; ++i)
            for (int o = 0; o < OC; ++o)
              ref[size_t(i) * OC + o] += double(x[size_t(n) * IC + i]) * dy[size_t(n) * OC + o];
        double err2 = 0;
        for (size_t k = 0; k < ref.size(); ++k) {
          const double e = (double(want[k]) - dw0[k]) - ref[k];
          err2 += e * e;
        }
        EXPECT_LT(std::sqrt(err2 / double(ref.size())), 0.03 * rms(ref));
      }
    }
  }
}

}  // namespace
}  // namespace ember
