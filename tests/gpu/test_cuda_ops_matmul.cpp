// CUDA dense layers and the tied lm_head (cuda_matmul.cu) against the CPU backend at matmul precisions fp32 and
// bf16, with parameters inside an arena.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_ops_test_util.h"

namespace ember {
namespace {

class CudaOpsMatmul : public CudaOps, public ::testing::WithParamInterface<bool> {};
TEST_P(CudaOpsMatmul, ForwardBackward) {
  const bool with_bias = GetParam();
  const int N = 37, IC = 45, OC = 67;
  Rng rng(5 + with_bias);
  const Floats x = rng.normal(size_t(N) * IC), w = rng.normal(size_t(IC) * OC), bias = rng.normal(OC),
               dout = rng.normal(size_t(N) * OC);
  const Floats dw0 = rng.normal(size_t(IC) * OC), db0 = rng.normal(OC);
  Floats out[2], dx[2], dw[2], db[2];
  Backend* be[2] = {cpu.get(), gpu.get()};
  for (int k = 0; k < 2; ++k) {
    FBuf xi(*be[k], x), wi(*be[k], w), bi(*be[k], bias), o(*be[k], Floats(size_t(N) * OC)), g(*be[k], dout),
        gx(*be[k], nans(size_t(N) * IC)), gw(*be[k], dw0), gb(*be[k], db0);
    be[k]->matmul_forward(o.get(), xi.get(), wi.get(), with_bias ? bi.get() : nullptr, N, IC, OC);
    be[k]->matmul_backward(gx.get(), gw.get(), with_bias ? gb.get() : nullptr, g.get(), xi.get(), wi.get(), N, IC, OC);
    out[k] = o.host(), dx[k] = gx.host(), dw[k] = gw.host(), db[k] = gb.host();
  }
  expect_close("matmul out", out[1], out[0], fp32_tol(IC + 1, out[0]));
  expect_close("matmul dinp", dx[1], dx[0], fp32_tol(OC, dx[0]));        // written over the NaNs
  expect_close("matmul dweight", dw[1], dw[0], fp32_tol(N + 1, dw[0]));  // +1: the pre-filled value
  if (with_bias)
    expect_close("matmul dbias", db[1], db[0], fp32_tol(N + 1, db[0]));
  else
    expect_bitwise("matmul dbias untouched when null", db[1], db0);
}
INSTANTIATE_TEST_SUITE_P(Bias, CudaOpsMatmul, ::testing::Bool());

// Dense layers as the model calls them: weight and bias at odd float offsets inside one arena (the alignment cuBLASLt's
// fused bias epilogues must be told of), at both matmul precisions. dbias is the sum of the fp32 dout at both (never
// of the rounded copy the bf16 GEMMs read), so it keeps the fp32 bound. N = 600 rows make three chunks of the
// two-stage column sum that dbias takes without cuBLASLt's epilogue, the last one partial.
TEST_F(CudaOpsMatmul, MatmulWithParametersInsideTheArena) {
  const int N = 600, IC = 48, OC = 144;
  Rng rng(9);
  const size_t w_at = 3, b_at = w_at + size_t(IC) * OC + 5;  // 12- and 4-byte aligned
  Floats arena = rng.normal(b_at + OC + 7);
  const Floats x = rng.normal(size_t(N) * IC), dout = rng.normal(size_t(N) * OC);
  for (MatmulPrecision prec : {MatmulPrecision::fp32, MatmulPrecision::bf16}) {
    Floats out[2], dx[2], dgrads[2];
    Backend* be[2] = {cpu.get(), gpu.get()};
    for (int k = 0; k < 2; ++k) {
      be[k]->set_matmul_precision(prec);
      FBuf params(*be[k], arena), grads(*be[k], Floats(arena.size())), xi(*be[k], x), g(*be[k], dout),
          o(*be[k], Floats(size_t(N) * OC)), gx(*be[k], Floats(x.size()));
      be[k]->matmul_forward(o.get(), xi.get(), params.get() + w_at, params.get() + b_at, N, IC, OC);
      for (int rep = 0; rep < 2; ++rep)  // twice: the parameter gradients add up, dinp is written again
        be[k]->matmul_backward(gx.get(), grads.get() + w_at, grads.get() + b_at, g.get(), xi.get(), params.get() + w_at,
                               N, IC, OC);
      out[k] = o.host(), dx[k] = gx.host(), dgrads[k] = grads.host();
      be[k]->set_matmul_precision(MatmulPrecision::fp32);
    }
    const std::string tag = prec == MatmulPrecision::bf16 ? "bf16 " : "fp32 ";
    const Floats dw0(dgrads[0].begin() + w_at, dgrads[0].begin() + w_at + size_t(IC) * OC),
        dw1(dgrads[1].begin() + w_at, dgrads[1].begin() + w_at + size_t(IC) * OC),
        db0(dgrads[0].begin() + b_at, dgrads[0].begin() + b_at + OC),
        db1(dgrads[1].begin() + b_at, dgrads[1].begin() + b_at + OC);
    expect_close(tag + "arena matmul out", out[1], out[0], fp32_tol(IC + 1, out[0]));
    expect_close(tag + "arena matmul dinp", dx[1], dx[0], fp32_tol(OC, dx[0]));
    expect_close(tag + "arena matmul dweight", dw1, dw0, fp32_tol(2 * N, dw0));
    expect_close(tag + "arena matmul dbias", db1, db0, fp32_tol(2 * N, db0));
    // Everything outside the two tensors stays zero.
    for (size_t i = 0; i < arena.size(); ++i) {
      const bool outside = i < w_at || (i >= w_at + size_t(IC) * OC && i < b_at) || i >= b_at + OC;
      if (outside) {
        ASSERT_EQ(dgrads[1][i], 0.0f) << tag << "gradient written outside its tensor at " << i;
      }
    }
  }
}

// The MLP's first layer as the model runs its backward pass: matmul_gelu_backward from the gradient at the GELU's
// output, with the layer's output (the GELU's input) stored as the forward pass stores it, fp32 or bf16. Against two
// references: the CPU backend's op (the fp32 tolerance of the sums, after one exp per element; at bf16 also one bf16
// ulp of G where the CPU's and the device's fp32 G fall either side of a rounding midpoint, as expect_close_bf16
// allows), and the backend's own gelu_backward followed by matmul_backward, bit for bit: the bf16 pass forms
// G = dout * gelu'(pre) with the same device function as gelu_backward, rounds it and sums dbias in the same order.
// N = 600 rows make three chunks of dbias's column sum, the last partial. Without a bias (and in fp32) the backend
// runs gelu_backward in place instead; that path is checked too.
TEST_F(CudaOpsMatmul, MatmulGeluBackward) {
  const int N = 600, IC = 40, OC = 160;
  Rng rng(10);
  const Floats x = rng.normal(size_t(N) * IC), w = rng.normal(size_t(IC) * OC), pre = rng.normal(size_t(N) * OC, 2.5f),
               dout = rng.normal(size_t(N) * OC), dw0 = rng.normal(w.size()), db0 = rng.normal(OC);
  for (MatmulPrecision prec : {MatmulPrecision::fp32, MatmulPrecision::bf16})
    for (bool with_bias : {true, false}) {
      const bool bf16 = prec == MatmulPrecision::bf16;
      const std::string tag = std::string(bf16 ? "bf16 " : "fp32 ") + (with_bias ? "" : "no bias ");
      Floats dx[3], dw[3], db[3];
      Backend* be[3] = {cpu.get(), gpu.get(), gpu.get()};
      for (int k = 0; k < 3; ++k) {  // the CPU's op, the device's op, the device's two ops
        Backend& e = *be[k];
        e.set_matmul_precision(prec);
        FBuf xf(e, x), wf(e, w), pf(e, pre), g(e, dout), gx(e, nans(x.size())), gw(e, dw0), gb(e, db0);
        HBuf xh(e, x.size()), wh(e, w.size()), ph(e, pre.size());
        TensorIn xi = xf.get(), wi = wf.get(), pi = pf.get();
        if (bf16) {  // stored as the model stores them at bf16
          e.cast_to_bf16(xh.get(), xf.get(), x.size()), xi = xh.get();
          e.cast_to_bf16(wh.get(), wf.get(), w.size()), wi = wh.get();
          e.cast_to_bf16(ph.get(), pf.get(), pre.size()), pi = ph.get();
        }
        float* dbias = with_bias ? gb.get() : nullptr;
        if (k < 2) {
          e.matmul_gelu_backward(gx.get(), gw.get(), dbias, g.get(), pi, xi, wi, N, IC, OC);
        } else {
          FBuf dg(e, nans(dout.size()));
          e.gelu_backward(dg.get(), pi, g.get(), dout.size());
          e.matmul_backward(gx.get(), gw.get(), dbias, dg.get(), xi, wi, N, IC, OC);
        }
        dx[k] = gx.host(), dw[k] = gw.host(), db[k] = gb.host();
        e.set_matmul_precision(MatmulPrecision::fp32);
      }
      expect_bitwise(tag + "matmul_gelu dinp, fused vs two ops", dx[1], dx[2]);
      expect_bitwise(tag + "matmul_gelu dweight, fused vs two ops", dw[1], dw[2]);
      expect_bitwise(tag + "matmul_gelu dbias, fused vs two ops", db[1], db[2]);
      // At bf16 an element of G that rounds the other way on the two backends moves one of the OC (or N) terms of a
      // sum by 2^-8 of its size, about 2^-8 / sqrt(OC) of the sum's RMS; 2^-9 of the RMS allows several in one sum.
      Tol tx = fp32_tol(OC + 1, dx[0]), tw = fp32_tol(N + 1, dw[0]), tb = fp32_tol(N + 1, db[0]);
      if (bf16) tx.atol += std::ldexp(rms(dx[0]), -9), tw.atol += std::ldexp(rms(dw[0]), -9);
      expect_close(tag + "matmul_gelu dinp vs cpu", dx[1], dx[0], tx);
      expect_close(tag + "matmul_gelu dweight vs cpu", dw[1], dw[0], tw);
      if (with_bias)
        expect_close(tag + "matmul_gelu dbias vs cpu", db[1], db[0], tb);  // the sum of fp32 G at both precisions
      else
        expect_bitwise(tag + "matmul_gelu dbias untouched when null", db[1], db0);
    }
}

// A dense layer's backward pass from dout stored in bf16 (attention's dqkv, where qkv is): the GEMMs read it as it
// is, in one block of all rows, and dbias sums its values. dinp is bit for bit what the same backend gives from an
// fp32 dout holding the same values (its GEMMs round those to themselves; its rows do not depend on how the rows are
// blocked, which the kernel model makes small); dweight and dbias, summed over the blocks in another order there,
// agree within the fp32 tolerance, as all three do with the CPU's. N = 600: three dbias chunks.
TEST_F(CudaOpsMatmul, MatmulBackwardFromABf16StoredDout) {
  const int N = 600, IC = 40, OC = 96;
  Rng rng(12);
  const Floats x = rng.normal(size_t(N) * IC), w = rng.normal(size_t(IC) * OC),
               dout = test::rounded_to_bf16(rng.normal(size_t(N) * OC)), dw0 = rng.normal(w.size()),
               db0 = rng.normal(OC);
  Floats dx[3], dw[3], db[3];
  Backend* be[3] = {cpu.get(), gpu.get(), gpu.get()};
  for (int k = 0; k < 3; ++k) {  // the CPU from bf16, the device from bf16, the device from fp32 (the same values)
    Backend& e = *be[k];
    e.set_matmul_precision(MatmulPrecision::bf16);
    FBuf xf(e, x), wf(e, w), g32(e, dout), gx(e, nans(x.size())), gw(e, dw0), gb(e, db0);
    HBuf g16(e, test::bf16_values(dout));
    e.matmul_backward(gx.get(), gw.get(), gb.get(), k < 2 ? TensorIn(g16.get()) : TensorIn(g32.get()), xf.get(),
                      wf.get(), N, IC, OC);
    dx[k] = gx.host(), dw[k] = gw.host(), db[k] = gb.host();
    e.set_matmul_precision(MatmulPrecision::fp32);
  }
  expect_bitwise("bf16 dout: dinp as from fp32", dx[1], dx[2]);
  expect_close("bf16 dout: dweight as from fp32", dw[1], dw[2], fp32_tol(N + 1, dw[2]));
  expect_close("bf16 dout: dbias as from fp32", db[1], db[2], fp32_tol(N + 1, db[2]));
  expect_close("bf16 dout: dinp vs cpu", dx[1], dx[0], fp32_tol(OC, dx[0]));
  expect_close("bf16 dout: dweight vs cpu", dw[1], dw[0], fp32_tol(N + 1, dw[0]));
  expect_close("bf16 dout: dbias vs cpu", db[1], db[0], fp32_tol(N + 1, db[0]));
}

// The model's bf16 backward scratch for the MLP: c_proj's dinp stored in bf16 (its fp32 value rounded, within one
// bf16 ulp of the CPU's where the two fp32 values straddle a midpoint), and c_fc's matmul_gelu_backward from that
// bf16-stored gradient (bit for bit what the device gives from an fp32 dout of the same values, and within the
// tolerances of MatmulGeluBackward of the CPU's).
TEST_F(CudaOpsMatmul, MlpBackwardThroughBf16StoredGradients) {
  const int N = 600, C = 40, H = 160;
  Rng rng(14);
  const Floats x = rng.normal(size_t(N) * C), wfc = rng.normal(size_t(C) * H), pre = rng.normal(size_t(N) * H, 2.5f),
               wproj = rng.normal(size_t(H) * C), dres = rng.normal(size_t(N) * C);
  Halves d16[2];
  Floats dx[3], dw[3], db[3];
  Backend* be[3] = {cpu.get(), gpu.get(), gpu.get()};
  for (int k = 0; k < 3; ++k) {  // the CPU from bf16, the device from bf16, the device from the same values in fp32
    Backend& e = *be[k];
    e.set_matmul_precision(MatmulPrecision::bf16);
    FBuf xf(e, x), wf(e, wfc), pf(e, pre), wp(e, wproj), r(e, dres), gwp(e, Floats(wproj.size())),
        gbp(e, Floats(size_t(C))), gx(e, nans(x.size())), gw(e, Floats(wfc.size())), gb(e, Floats(size_t(H)));
    HBuf g16(e, size_t(N) * H);
    // c_proj's backward pass: its input gradient (at GELU's output) into bf16 storage.
    e.matmul_backward(g16.get(), gwp.get(), gbp.get(), r.get(), pf.get(), wp.get(), N, H, C);
    if (k < 2) d16[k] = g16.host();
    FBuf g32(e, widened(d16[1 < k ? 1 : k]));
    e.matmul_gelu_backward(gx.get(), gw.get(), gb.get(), k < 2 ? TensorOut(g16.get()) : TensorOut(g32.get()), pf.get(),
                           xf.get(), wf.get(), N, C, H);
    dx[k] = gx.host(), dw[k] = gw.host(), db[k] = gb.host();
    e.set_matmul_precision(MatmulPrecision::fp32);
  }
  expect_close_bf16("bf16-stored c_proj dinp vs cpu", d16[1], d16[0], fp32_tol(C, widened(d16[0])));
  expect_bitwise("gelu from bf16: dinp as from fp32", dx[1], dx[2]);
  expect_bitwise("gelu from bf16: dweight as from fp32", dw[1], dw[2]);
  expect_bitwise("gelu from bf16: dbias as from fp32", db[1], db[2]);
  Tol tx = fp32_tol(H + 1, dx[0]), tw = fp32_tol(N + 1, dw[0]);
  tx.atol += std::ldexp(rms(dx[0]), -9), tw.atol += std::ldexp(rms(dw[0]), -9);  // as in MatmulGeluBackward
  // The CPU's G starts from its own bf16 dinp, which differs from the device's in rare elements (above): compare the
  // device with the CPU only where both started from the same values, i.e. within those tolerances plus that.
  expect_close("gelu from bf16: dinp vs cpu", dx[1], dx[0], tx);
  expect_close("gelu from bf16: dweight vs cpu", dw[1], dw[0], tw);
  expect_close("gelu from bf16: dbias vs cpu", db[1], db[0], fp32_tol(N + 1, db[0]));
}

TEST_F(CudaOpsMatmul, MatmulTransposed) {
  const int N = 37, C = 45, V = 101;
  Rng rng(7);
  const Floats x = rng.normal(size_t(N) * C), wte = rng.normal(size_t(V) * C), dout = rng.normal(size_t(N) * V);
  const Floats dwte0 = rng.normal(size_t(V) * C);
  Floats out[2], dx[2], dwte[2];
  Backend* be[2] = {cpu.get(), gpu.get()};
  for (int k = 0; k < 2; ++k) {
    FBuf xi(*be[k], x), w(*be[k], wte), o(*be[k], Floats(size_t(N) * V)), g(*be[k], dout),
        gx(*be[k], nans(size_t(N) * C)), gw(*be[k], dwte0);
    be[k]->matmul_forward_transposed(o.get(), xi.get(), w.get(), N, C, V);
    be[k]->matmul_backward_transposed(gx.get(), gw.get(), g.get(), xi.get(), w.get(), N, C, V);
    out[k] = o.host(), dx[k] = gx.host(), dwte[k] = gw.host();
  }
  expect_close("lm_head out", out[1], out[0], fp32_tol(C, out[0]));
  expect_close("lm_head dinp", dx[1], dx[0], fp32_tol(V, dx[0]));
  expect_close("lm_head dwte", dwte[1], dwte[0], fp32_tol(N + 1, dwte[0]));
}

// Matmul precision bf16 on fp32-stored inputs: the CUDA backend casts them to bf16 (to nearest even) and runs bf16
// GEMMs with fp32 accumulation, as the CPU backend rounds its copies and multiplies in fp32. Both must agree within the
// fp32 tolerance of the sums; an input rounded another way (or not at all, or to TF32) is off by up to a bf16 ulp, far
// outside it.
TEST_F(CudaOpsMatmul, MatmulBf16MatchesTheCpuEmulation) {
  const int N = 37, IC = 45, OC = 67;
  Rng rng(8);
  const Floats x = rng.normal(size_t(N) * IC), w = rng.normal(size_t(IC) * OC), bias = rng.normal(OC),
               dout = rng.normal(size_t(N) * OC);
  Floats out[2], dx[2], dw[2], tout[2], tdx[2], tdw[2];
  Backend* be[2] = {cpu.get(), gpu.get()};
  for (int k = 0; k < 2; ++k) {
    be[k]->set_matmul_precision(MatmulPrecision::bf16);
    FBuf xi(*be[k], x), wi(*be[k], w), bi(*be[k], bias), o(*be[k], Floats(size_t(N) * OC)), g(*be[k], dout),
        gx(*be[k], Floats(x.size())), gw(*be[k], Floats(w.size()));
    be[k]->matmul_forward(o.get(), xi.get(), wi.get(), bi.get(), N, IC, OC);
    be[k]->matmul_backward(gx.get(), gw.get(), nullptr, g.get(), xi.get(), wi.get(), N, IC, OC);
    out[k] = o.host(), dx[k] = gx.host(), dw[k] = gw.host();
    // The same arrays as the lm_head's: w read as wte (OC, IC).
    FBuf to(*be[k], Floats(size_t(N) * OC)), tgx(*be[k], Floats(x.size())), tgw(*be[k], Floats(w.size()));
    be[k]->matmul_forward_transposed(to.get(), xi.get(), wi.get(), N, IC, OC);
    be[k]->matmul_backward_transposed(tgx.get(), tgw.get(), g.get(), xi.get(), wi.get(), N, IC, OC);
    tout[k] = to.host(), tdx[k] = tgx.host(), tdw[k] = tgw.host();
    be[k]->set_matmul_precision(MatmulPrecision::fp32);
  }
  expect_close("bf16 matmul out", out[1], out[0], fp32_tol(IC + 1, out[0]));
  expect_close("bf16 matmul dinp", dx[1], dx[0], fp32_tol(OC, dx[0]));
  expect_close("bf16 matmul dweight", dw[1], dw[0], fp32_tol(N, dw[0]));
  expect_close("bf16 lm_head out", tout[1], tout[0], fp32_tol(IC, tout[0]));
  expect_close("bf16 lm_head dinp", tdx[1], tdx[0], fp32_tol(OC, tdx[0]));
  expect_close("bf16 lm_head dwte", tdw[1], tdw[0], fp32_tol(N, tdw[0]));
}

}  // namespace
}  // namespace ember
