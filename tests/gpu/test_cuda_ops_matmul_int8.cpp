// CUDA dense layers under matmul precision int8 (cuda_matmul_quant.cu) against the CPU backend. The int8 sums are
// exact on both and the scales and epilogues are rounded one operation at a time in the same order, so the forward
// output, the input gradient and the int8 weight gradient must be the CPU's bit for bit; only what is summed in
// floating point (dbias, and the weight gradient in bf16) may differ by the order of its sums.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cuda_ops_test_util.h"

namespace ember {
namespace {

class CudaOpsMatmulInt8 : public CudaOps, public ::testing::WithParamInterface<bool> {
 protected:
  void SetUp() override {
    CudaOps::SetUp();
    if (IsSkipped()) return;
    for (Backend* be : {cpu.get(), gpu.get()}) {
      be->set_matmul_precision(MatmulPrecision::int8);
      be->set_int8_weight_gradient(GetParam());
      be->set_gradient_dither(kKey);
    }
  }
  static constexpr DitherKey kKey{1234, 7, 3, 1};
};

// N = 300 tokens: two tiles of the int8 weight gradient, the second partial; IC and OC not multiples of the GEMM
// operands' padding. Inputs fp32 (read as bf16) and the outputs fp32; then inp, out and the bias stored in bf16.
TEST_P(CudaOpsMatmulInt8, ForwardAndBackwardAreTheCpusBitwise) {
  const bool int8_wgrad = GetParam();
  const int N = 300, IC = 45, OC = 67;
  Rng rng(41);
  Floats x = rng.normal(size_t(N) * IC), w = rng.normal(size_t(IC) * OC), bias = rng.normal(OC),
         dout = rng.normal(size_t(N) * OC);
  for (size_t i = 0; i < x.size(); i += 97) x[i] *= 40.0f;  // outliers: rows with scales far apart
  for (size_t i = 0; i < dout.size(); i += 89) dout[i] *= 1e-3f;
  const Floats dw0 = rng.normal(w.size()), db0 = rng.normal(OC);
  Floats out[2], dx[2], dw[2], db[2];
  Halves out16[2], dx16[2];
  Backend* be[2] = {cpu.get(), gpu.get()};
  for (int k = 0; k < 2; ++k) {
    FBuf xi(*be[k], x), wi(*be[k], w), bi(*be[k], bias), o(*be[k], Floats(size_t(N) * OC)), g(*be[k], dout),
        gx(*be[k], nans(x.size())), gw(*be[k], dw0), gb(*be[k], db0);
    be[k]->matmul_forward(o.get(), xi.get(), wi.get(), bi.get(), N, IC, OC);
    be[k]->matmul_backward(gx.get(), gw.get(), gb.get(), g.get(), xi.get(), wi.get(), N, IC, OC);
    out[k] = o.host(), dx[k] = gx.host(), dw[k] = gw.host(), db[k] = gb.host();
    // bf16 storage: inp and out (with its bias) in bf16 beside the fp32 weight, as the model stores them.
    HBuf x16(*be[k], test::bf16_values(x)), b16(*be[k], test::bf16_values(bias)), o16(*be[k], Halves(size_t(N) * OC)),
        gx16(*be[k], Halves(x.size()));
    be[k]->matmul_forward(o16.get(), x16.get(), wi.get(), b16.get(), N, IC, OC);
    be[k]->matmul_backward(gx16.get(), gw.get(), nullptr, g.get(), x16.get(), wi.get(), N, IC, OC);
    out16[k] = o16.host(), dx16[k] = gx16.host();
    be[k]->weights_changed();
  }
  expect_bitwise("int8 out", out[1], out[0]);
  expect_bitwise("int8 dinp", dx[1], dx[0]);
  expect_bitwise("int8 out in bf16", widened(out16[1]), widened(out16[0]));
  expect_bitwise("int8 dinp in bf16", widened(dx16[1]), widened(dx16[0]));
  if (int8_wgrad)
    expect_bitwise("int8 dweight", dw[1], dw[0]);
  else  // bf16 products summed in fp32, twice (+2: the pre-filled value)
    expect_close("bf16 dweight", dw[1], dw[0], fp32_tol(2 * N + 2, dw[0]));
  expect_close("dbias", db[1], db[0], fp32_tol(N + 1, db[0]));
}
INSTANTIATE_TEST_SUITE_P(WeightGradient, CudaOpsMatmulInt8, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "int8" : "bf16"; });

// The weight's int8 copies are made once and read until Backend::weights_changed: a weight changed in place without
// it still gives the old products on both backends (the same ones), and after it the new ones.
TEST_P(CudaOpsMatmulInt8, WeightCopiesLastUntilTheWeightsChange) {
  const int N = 20, IC = 32, OC = 48;
  Rng rng(42);
  const Floats x = rng.normal(size_t(N) * IC), w = rng.normal(size_t(IC) * OC), w2 = rng.normal(w.size());
  WeightCopyRuns r[2];
  Backend* be[2] = {cpu.get(), gpu.get()};
  for (int k = 0; k < 2; ++k) {
    r[k] = weight_copy_runs(*be[k], x, w, w2, N, IC, OC, false);
    EXPECT_GT(r[k].copy_bytes, size_t(IC) * OC) << be[k]->name();
  }
  expect_bitwise("before", r[1].before, r[0].before);
  expect_bitwise("stale copy", r[1].stale, r[1].before);
  expect_bitwise("after weights_changed", r[1].after, r[0].after);
  EXPECT_NE(r[1].after, r[1].before);
}

// The MLP's second layer: the gradient at the GELU's input formed in fp32 (a bf16-stored dout widened first), then the
// int8 backward pass. The GELU's derivative may differ in its last bit between the backends' tanh, which can move a
// value across an int8 rounding boundary: then that row's dinp moves by one quantization step of one element. Allowed:
// 1% of the elements differing at all, each within 2^-5 of dinp's RMS (one step of one of OC = 67 terms is about
// 1/127 of the row's largest term).
TEST_P(CudaOpsMatmulInt8, GeluBackwardTracksTheCpu) {
  const int N = 64, IC = 40, OC = 67;
  Rng rng(43);
  const Floats x = rng.normal(size_t(N) * IC), w = rng.normal(size_t(IC) * OC), pre = rng.normal(size_t(N) * OC),
               dout = rng.normal(size_t(N) * OC), b = rng.normal(OC);
  for (bool dout_bf16 : {false, true}) {
    Floats dx[2], dw[2], db[2];
    Backend* be[2] = {cpu.get(), gpu.get()};
    for (int k = 0; k < 2; ++k) {
      FBuf xi(*be[k], x), wi(*be[k], w), p(*be[k], pre), g(*be[k], dout), gx(*be[k], nans(x.size())),
          gw(*be[k], Floats(w.size())), gb(*be[k], Floats(size_t(OC)));
      HBuf g16(*be[k], test::bf16_values(dout));
      if (dout_bf16)
        be[k]->matmul_gelu_backward(gx.get(), gw.get(), gb.get(), g16.get(), p.get(), xi.get(), wi.get(), N, IC, OC);
      else
        be[k]->matmul_gelu_backward(gx.get(), gw.get(), gb.get(), g.get(), p.get(), xi.get(), wi.get(), N, IC, OC);
      dx[k] = gx.host(), dw[k] = gw.host(), db[k] = gb.host();
      be[k]->weights_changed();
    }
    const std::string tag = dout_bf16 ? "bf16 dout: " : "fp32 dout: ";
    size_t differ = 0;
    for (size_t i = 0; i < dx[0].size(); ++i) differ += dx[1][i] != dx[0][i];
    EXPECT_LE(differ, dx[0].size() / 100) << tag << differ << " of " << dx[0].size() << " dinp values differ";
    expect_close(tag + "dinp", dx[1], dx[0], {std::ldexp(rms(dx[0]), -5), 0.0});
    expect_close(tag + "dweight", dw[1], dw[0], {std::ldexp(rms(dw[0]), -5), 0.0});
    expect_close(tag + "dbias", db[1], db[0], fp32_tol(N, db[0]));
  }
}

}  // namespace
}  // namespace ember
