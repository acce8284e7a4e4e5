// CUDA dense layers under matmul precision fp8 (cuda_matmul_quant.cu) against the CPU backend. Both quantize the same
// values with the same scales into the same codes, and each product of two fp8 values is exact in fp32; the sums are
// where they may differ: the CPU's in fp32 in OpenBLAS's order, the kernel model's in fp32 in order of k, a GPU's
// inside the fp8 tensor cores, which carry fewer bits between their promotions to fp32 (about 14 in DeepSeek-V3's
// measurement on H800).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cuda_ops_test_util.h"

namespace ember {
namespace {

class CudaOpsMatmulFp8 : public CudaOps {
 protected:
  void SetUp() override {
    CudaOps::SetUp();
    if (IsSkipped()) return;
    for (Backend* be : {cpu.get(), gpu.get()}) be->set_matmul_precision(MatmulPrecision::fp8);
  }
  void TearDown() override {
    if (gpu) gpu->weights_changed();
  }
};

// The tolerance of an fp8 product's sums of K terms against the CPU's: fp32 summation (the kernel model) or the
// tensor cores' (a GPU): 2^-8 of the result's RMS, 2^-8 relative. A wrong scale, layout or format is off by O(1).
Tol fp8_tol(int K, const Floats& want) {
#ifdef EMBER_TEST_KERNEL_MODEL
  return fp32_tol(K, want);
#else
  (void)K;
  return {std::ldexp(rms(want), -8), std::ldexp(1.0, -8)};
#endif
}

// N = 300 tokens and IC, OC not multiples of 16: every GEMM dimension padded. Inputs fp32 (read as bf16) and outputs
// fp32, then inp, out and the bias stored in bf16; the weight gradient accumulates over both.
TEST_F(CudaOpsMatmulFp8, ForwardAndBackwardTrackTheCpu) {
  const int N = 300, IC = 45, OC = 67;
  Rng rng(51);
  Floats x = rng.normal(size_t(N) * IC), w = rng.normal(size_t(IC) * OC), bias = rng.normal(OC),
         dout = rng.normal(size_t(N) * OC);
  for (size_t i = 0; i < dout.size(); i += 89) dout[i] *= 30.0f;  // the tensor's scale set by a few large values
  const Floats dw0 = rng.normal(w.size()), db0 = rng.normal(OC);
  Floats out[2], dx[2], dw[2], db[2];
  Halves out16[2], dx16[2];
  Backend* be[2] = {cpu.get(), gpu.get()};
  for (int k = 0; k < 2; ++k) {
    FBuf xi(*be[k], x), wi(*be[k], w), bi(*be[k], bias), o(*be[k], Floats(size_t(N) * OC)), g(*be[k], dout),
        gx(*be[k], nans(x.size())), gw(*be[k], dw0), gb(*be[k], db0);
    be[k]->matmul_forward(o.get(), xi.get(), wi.get(), bi.get(), N, IC, OC);
    be[k]->matmul_backward(gx.get(), gw.get(), gb.get(), g.get(), xi.get(), wi.get(), N, IC, OC);
    out[k] = o.host(), dx[k] = gx.host(), db[k] = gb.host();
    HBuf x16(*be[k], test::bf16_values(x)), b16(*be[k], test::bf16_values(bias)), o16(*be[k], Halves(size_t(N) * OC)),
        gx16(*be[k], Halves(x.size()));
    be[k]->matmul_forward(o16.get(), x16.get(), wi.get(), b16.get(), N, IC, OC);
    be[k]->matmul_backward(gx16.get(), gw.get(), nullptr, g.get(), x16.get(), wi.get(), N, IC, OC);
    out16[k] = o16.host(), dx16[k] = gx16.host(), dw[k] = gw.host();
    be[k]->weights_changed();
  }
  expect_close("fp8 out", out[1], out[0], fp8_tol(IC + 1, out[0]));
  expect_close("fp8 dinp", dx[1], dx[0], fp8_tol(OC, dx[0]));
  expect_close_bf16("fp8 out in bf16", out16[1], out16[0], fp8_tol(IC + 1, widened(out16[0])));
  expect_close_bf16("fp8 dinp in bf16", dx16[1], dx16[0], fp8_tol(OC, widened(dx16[0])));
  expect_close("fp8 dweight", dw[1], dw[0], fp8_tol(2 * N + 1, dw[0]));
  expect_close("dbias", db[1], db[0], fp32_tol(N + 1, db[0]));
}

// The weight's fp8 copies are made once and read until Backend::weights_changed, as int8's; and unscaled fp8 (the
// test switch) casts the values as they are on both backends.
TEST_F(CudaOpsMatmulFp8, WeightCopiesAndUnscaledCasts) {
  const int N = 20, IC = 32, OC = 48;
  Rng rng(52);
  const Floats x = rng.normal(size_t(N) * IC), w = rng.normal(size_t(IC) * OC), w2 = rng.normal(w.size());
  WeightCopyRuns r[2];
  Backend* be[2] = {cpu.get(), gpu.get()};
  for (int k = 0; k < 2; ++k) {
    r[k] = weight_copy_runs(*be[k], x, w, w2, N, IC, OC, true);
    EXPECT_GE(r[k].copy_bytes, size_t(IC) * OC) << be[k]->name();
  }
  expect_close("before", r[1].before, r[0].before, fp8_tol(IC, r[0].before));
  expect_bitwise("stale copy", r[1].stale, r[1].before);
  expect_close("after weights_changed", r[1].after, r[0].after, fp8_tol(IC, r[0].after));
  EXPECT_GT(std::fabs(r[1].after[0] - r[1].before[0]), 1e-3);
  expect_close("unscaled", r[1].unscaled, r[0].unscaled, fp8_tol(IC, r[0].unscaled));
}

}  // namespace
}  // namespace ember
