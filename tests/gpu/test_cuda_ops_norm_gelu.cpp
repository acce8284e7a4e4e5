// CUDA backend memory, encoder, layernorm (plain and fused with the residual add), GELU, the elementwise ops and bf16
// storage against the CPU backend (cuda_encoder.cu, cuda_layernorm.cu, cuda_gelu.cu, cuda_elementwise.cu).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_ops_test_util.h"

namespace ember {
namespace {

class CudaOpsNormGelu : public CudaOps, public ::testing::WithParamInterface<int> {};  // param: the layernorm tests' C

#ifndef EMBER_TEST_KERNEL_MODEL
TEST_F(CudaOpsNormGelu, BackendName) { EXPECT_EQ(gpu->name().rfind("cuda:0 (", 0), 0u) << gpu->name(); }

TEST_F(CudaOpsNormGelu, MemoryAllocIsZeroAndCopiesRoundTrip) {
  const size_t n = 1001;
  float* p = static_cast<float*>(gpu->alloc(n * sizeof(float)));
  Floats h(n, 1.0f);
  gpu->copy_to_host(h.data(), p, n * sizeof(float));
  for (float x : h) ASSERT_EQ(x, 0.0f);
  Floats src = Rng(1).normal(n);
  gpu->copy_to_device(p, src.data(), n * sizeof(float));
  gpu->copy(p + 1, p, (n - 1) * sizeof(float));  // overlapping: memmove semantics
  gpu->copy_to_host(h.data(), p, n * sizeof(float));
  EXPECT_EQ(h[0], src[0]);
  for (size_t i = 1; i < n; ++i) ASSERT_EQ(h[i], src[i - 1]) << i;
  gpu->zero(p, n * sizeof(float));
  gpu->copy_to_host(h.data(), p, n * sizeof(float));
  for (float x : h) ASSERT_EQ(x, 0.0f);
  gpu->free(p);
}
#endif  // EMBER_TEST_KERNEL_MODEL

// The backward pass sorts the positions by token id and sums each token's in order: ids drawn uniformly (short runs),
// then skewed as text is (one id at two positions in three, a run of 74 that is not a whole number of the kernel's
// 8-position steps, with the first and last ids of the vocabulary also present).
TEST_F(CudaOpsNormGelu, Encoder) {
  const int B = 3, T = 37, C = 45, V = 50, maxT = 40;  // odd sizes; V small so rows get many tokens
  Rng rng(2);
  const Ints uniform = rng.tokens(size_t(B) * T, V);
  const Ints skewed = [&] {
    Ints s = uniform;
    for (size_t p = 0; p < s.size(); ++p)
      if (p % 3 != 0) s[p] = 7;
    s[0] = V - 1, s[3] = 0;
    return s;
  }();
  const Floats wte = rng.normal(size_t(V) * C), wpe = rng.normal(size_t(maxT) * C),
               dout = rng.normal(size_t(B) * T * C);
  const Floats dwte0 = rng.normal(size_t(V) * C), dwpe0 = rng.normal(size_t(maxT) * C);  // pre-filled: +=
  for (const Ints* inp : {&uniform, &skewed}) {
    const std::string tag = inp == &uniform ? "uniform ids " : "skewed ids ";
    Floats out[2], dwte[2], dwpe[2];
    Backend* be[2] = {cpu.get(), gpu.get()};
    for (int k = 0; k < 2; ++k) {
      IBuf i(*be[k], *inp);
      FBuf a(*be[k], wte), p(*be[k], wpe), o(*be[k], Floats(size_t(B) * T * C)), g(*be[k], dout), dw(*be[k], dwte0),
          dp(*be[k], dwpe0);
      be[k]->encoder_forward(o.get(), i.get(), a.get(), p.get(), B, T, C);
      be[k]->encoder_backward(dw.get(), dp.get(), g.get(), i.get(), B, T, C);
      out[k] = o.host(), dwte[k] = dw.host(), dwpe[k] = dp.host();
    }
    // One add per output element; the backward sums run in the same token order as the CPU's, from the same start.
    expect_bitwise(tag + "encoder_forward", out[1], out[0]);
    expect_bitwise(tag + "encoder_backward dwte", dwte[1], dwte[0]);
    expect_bitwise(tag + "encoder_backward dwpe", dwpe[1], dwpe[0]);
  }
}

TEST_P(CudaOpsNormGelu, ForwardBackward) {
  const int N = 600, C = GetParam();  // ten chunks of the parameter gradients' column sums, the last partial
  Rng rng(3 + uint32_t(C));
  const Floats x = rng.normal(size_t(N) * C, 2.0f), w = rng.normal(C), bias = rng.normal(C),
               dout = rng.normal(size_t(N) * C);
  const Floats dx0 = rng.normal(size_t(N) * C), dw0 = rng.normal(C), db0 = rng.normal(C);
  Floats out[2], mean[2], rstd[2], dx[2], dw[2], db[2];
  Backend* be[2] = {cpu.get(), gpu.get()};
  for (int k = 0; k < 2; ++k) {
    FBuf xi(*be[k], x), wi(*be[k], w), bi(*be[k], bias), o(*be[k], Floats(x.size())), m(*be[k], Floats(N)),
        r(*be[k], Floats(N)), g(*be[k], dout), gx(*be[k], dx0), gw(*be[k], dw0), gb(*be[k], db0);
    be[k]->layernorm_forward(o.get(), m.get(), r.get(), xi.get(), wi.get(), bi.get(), N, C);
    be[k]->layernorm_backward(gx.get(), gw.get(), gb.get(), g.get(), xi.get(), wi.get(), m.get(), r.get(), N, C);
    out[k] = o.host(), mean[k] = m.host(), rstd[k] = r.host(), dx[k] = gx.host(), dw[k] = gw.host(), db[k] = gb.host();
  }
  // Row statistics are C-term sums; dweight and dbias are N-term column sums.
  expect_close("layernorm out", out[1], out[0], fp32_tol(C, out[0]));
  expect_close("layernorm mean", mean[1], mean[0], fp32_tol(C, mean[0]));
  expect_close("layernorm rstd", rstd[1], rstd[0], fp32_tol(C, rstd[0]));
  expect_close("layernorm dinp", dx[1], dx[0], fp32_tol(C, dx[0]));
  expect_close("layernorm dweight", dw[1], dw[0], fp32_tol(N, dw[0]));
  expect_close("layernorm dbias", db[1], db[0], fp32_tol(N, db[0]));
}
// C = 45 in one column of threads, 768 in three, 1600 in seven (the last partial).
INSTANTIATE_TEST_SUITE_P(Shapes, CudaOpsNormGelu, ::testing::Values(45, 768, 1600));

// The fused residual add + layernorm: bitwise equal to the CUDA add and layernorm it replaces (backend.h's contract,
// which recompute relies on), and within the layernorm's tolerance of the CPU.
TEST_P(CudaOpsNormGelu, ResidualFusedEqualsAddThenLayerNorm) {
  const int N = 74, C = GetParam();
  Rng rng(4 + uint32_t(C));
  const Floats a = rng.normal(size_t(N) * C, 2.0f), b = rng.normal(size_t(N) * C), w = rng.normal(C),
               bias = rng.normal(C);
  FBuf ga(*gpu, a), gb(*gpu, b), gw(*gpu, w), gbias(*gpu, bias);
  FBuf r1(*gpu, Floats(a.size())), o1(*gpu, Floats(a.size())), m1(*gpu, Floats(N)), s1(*gpu, Floats(N));
  gpu->add(r1.get(), ga.get(), gb.get(), a.size());
  gpu->layernorm_forward(o1.get(), m1.get(), s1.get(), r1.get(), gw.get(), gbias.get(), N, C);
  FBuf r2(*gpu, Floats(a.size())), o2(*gpu, Floats(a.size())), m2(*gpu, Floats(N)), s2(*gpu, Floats(N));
  gpu->residual_layernorm_forward(r2.get(), o2.get(), m2.get(), s2.get(), ga.get(), gb.get(), gw.get(), gbias.get(), N,
                                  C);
  expect_bitwise("fused residual", r2.host(), r1.host());
  expect_bitwise("fused out", o2.host(), o1.host());
  expect_bitwise("fused mean", m2.host(), m1.host());
  expect_bitwise("fused rstd", s2.host(), s1.host());
  FBuf ca(*cpu, a), cb(*cpu, b), cw(*cpu, w), cbias(*cpu, bias);
  FBuf r3(*cpu, Floats(a.size())), o3(*cpu, Floats(a.size())), m3(*cpu, Floats(N)), s3(*cpu, Floats(N));
  cpu->residual_layernorm_forward(r3.get(), o3.get(), m3.get(), s3.get(), ca.get(), cb.get(), cw.get(), cbias.get(), N,
                                  C);
  expect_bitwise("fused residual vs cpu (one fp32 add)", r2.host(), r3.host());
  const Floats want = o3.host();
  expect_close("fused out vs cpu", o2.host(), want, fp32_tol(C, want));
}

TEST_F(CudaOpsNormGelu, GeluAndElementwise) {
  const size_t n = 100003;
  Rng rng(13);
  const Floats x = rng.normal(n, 3.0f), y = rng.normal(n), d0 = rng.normal(n);
  Floats gf[2], gb[2], sum[2], acc[2], sc[2];
  Backend* be[2] = {cpu.get(), gpu.get()};
  for (int k = 0; k < 2; ++k) {
    FBuf xi(*be[k], x), yi(*be[k], y), o(*be[k], Floats(n)), d(*be[k], d0), a(*be[k], d0);
    be[k]->gelu_forward(o.get(), xi.get(), n);
    be[k]->gelu_backward(d.get(), xi.get(), yi.get(), n);
    gf[k] = o.host(), gb[k] = d.host();
    be[k]->add(o.get(), xi.get(), yi.get(), n);
    sum[k] = o.host();
    be[k]->accumulate(a.get(), xi.get(), n);
    acc[k] = a.host();
    be[k]->scale(a.get(), 0.37f, n);
    sc[k] = a.host();
  }
  // GELU: one exp (expf vs the CPU's ~4 ulp polynomial) and a few roundings per element, so K = 1.
  expect_close("gelu_forward", gf[1], gf[0], fp32_tol(1, gf[0]));
  expect_close("gelu_backward", gb[1], gb[0], fp32_tol(1, gb[0]));
  expect_bitwise("add", sum[1], sum[0]);  // one rounded operation per element: identical
  expect_bitwise("accumulate", acc[1], acc[0]);
  expect_bitwise("scale", sc[1], sc[0]);
}

// bf16 storage (TensorIn/TensorOut, core/dtype.h), as the model uses it under matmul precision bf16. Layernorm, the
// fused residual layernorm, GELU, the dense layer (its bias in bf16) and the lm_head writing bf16: their fp32 results
// agree with the CPU's within the fp32 tolerance, so the stored values agree within that plus one bf16 ulp (at most
// 2^-7 of the value) where the two fp32 results fall either side of a rounding midpoint, which is rare (at most 1% of
// elements may differ at all). GELU from a bf16-stored input, forward and backward, within the fp32 tolerance. The
// cast rounds as the CPU, bit for bit. The four matmul ops on the same bf16-stored inputs (the lm_head's backward
// pass also from a bf16-stored dout), at odd sizes, with a bias and pre-filled gradients: within the fp32 tolerances
// of MatmulBf16MatchesTheCpuEmulation (K + 1 for the pre-filled value); dbias is the sum of the fp32 dout, as in
// MatmulWithParametersInsideTheArena.

TEST_F(CudaOpsNormGelu, Bf16StorageMatchesTheCpu) {
  const int N = 37, C = 45, OC = 67, V = 101;
  Rng rng(15);
  const Floats a = rng.normal(size_t(N) * C, 2.0f), b = rng.normal(size_t(N) * C), lw = rng.normal(C),
               lb = rng.normal(C), h = rng.normal(size_t(N) * OC, 3.0f);
  const Floats x = rng.normal(size_t(N) * C), w = rng.normal(size_t(C) * OC), bias = rng.normal(OC),
               wte = rng.normal(size_t(V) * C), g = rng.normal(size_t(N) * OC), gl = rng.normal(size_t(N) * V),
               dx0 = rng.normal(x.size()), dw0 = rng.normal(w.size()), db0 = rng.normal(OC),
               dwte0 = rng.normal(wte.size());
  Halves ln[2], res_ln[2], gelu[2], xb[2], wb[2], tb[2], gelu16[2], out16[2], lout16[2];
  Floats out[2], dx[2], dw[2], db[2], lout[2], ldx[2], ldwte[2], gelu32[2], dgelu[2], ldx16[2], ldwte16[2];
  Backend* be[2] = {cpu.get(), gpu.get()};
  for (int k = 0; k < 2; ++k) {
    Backend& e = *be[k];
    e.set_matmul_precision(MatmulPrecision::bf16);
    FBuf ai(e, a), bi(e, b), lwi(e, lw), lbi(e, lb), hi(e, h), res(e, a.size()), m(e, N), r(e, N);
    HBuf o1(e, a.size()), o2(e, a.size()), o3(e, h.size());
    e.layernorm_forward(o1.get(), m.get(), r.get(), ai.get(), lwi.get(), lbi.get(), N, C);
    e.residual_layernorm_forward(res.get(), o2.get(), m.get(), r.get(), ai.get(), bi.get(), lwi.get(), lbi.get(), N, C);
    e.gelu_forward(o3.get(), hi.get(), h.size());
    ln[k] = o1.host(), res_ln[k] = o2.host(), gelu[k] = o3.host();
    // GELU from its bf16-stored input (the cast is checked below), into either storage, and backward.
    HBuf hb(e, h.size()), o4(e, h.size());
    FBuf o5(e, h.size()), gh(e, g), dh(e, h.size());
    e.cast_to_bf16(hb.get(), hi.get(), h.size());
    e.gelu_forward(o4.get(), hb.get(), h.size());
    e.gelu_forward(o5.get(), hb.get(), h.size());
    e.gelu_backward(dh.get(), hb.get(), gh.get(), h.size());
    gelu16[k] = o4.host(), gelu32[k] = o5.host(), dgelu[k] = dh.host();
    // The matmuls read the CPU's casts on both backends, so that their inputs are the same values.
    FBuf xf(e, x), wf(e, w), tf(e, wte);
    HBuf xh(e, x.size()), wh(e, w.size()), th(e, wte.size());
    e.cast_to_bf16(xh.get(), xf.get(), x.size());
    e.cast_to_bf16(wh.get(), wf.get(), w.size());
    e.cast_to_bf16(th.get(), tf.get(), wte.size());
    xb[k] = xh.host(), wb[k] = wh.host(), tb[k] = th.host();
    HBuf xs(e, xb[0]), ws(e, wb[0]), ts(e, tb[0]);
    FBuf bi2(e, bias), gi(e, g), gli(e, gl), o(e, size_t(N) * OC), gx(e, dx0), gw(e, dw0), gb(e, db0),
        lo(e, size_t(N) * V), lgx(e, dx0), lgw(e, dwte0);
    e.matmul_forward(o.get(), xs.get(), ws.get(), bi2.get(), N, C, OC);
    e.matmul_backward(gx.get(), gw.get(), gb.get(), gi.get(), xs.get(), ws.get(), N, C, OC);
    e.matmul_forward_transposed(lo.get(), xs.get(), ts.get(), N, C, V);
    e.matmul_backward_transposed(lgx.get(), lgw.get(), gli.get(), xs.get(), ts.get(), N, C, V);
    out[k] = o.host(), dx[k] = gx.host(), dw[k] = gw.host(), db[k] = gb.host();
    lout[k] = lo.host(), ldx[k] = lgx.host(), ldwte[k] = lgw.host();
    // The dense layer's output stored in bf16, its bias in bf16.
    FBuf bf(e, bias);
    HBuf bh(e, bias.size()), ob(e, size_t(N) * OC);
    e.cast_to_bf16(bh.get(), bf.get(), bias.size());
    e.matmul_forward(ob.get(), xs.get(), ws.get(), bh.get(), N, C, OC);
    out16[k] = ob.host();
    // The lm_head's output stored in bf16, and its backward pass from dout stored in bf16 (the CPU's cast of gl).
    HBuf lob(e, size_t(N) * V), glh(e, gl.size());
    FBuf lgx16(e, dx0), lgw16(e, dwte0);
    e.matmul_forward_transposed(lob.get(), xs.get(), ts.get(), N, C, V);
    e.cast_to_bf16(glh.get(), gli.get(), gl.size());
    e.matmul_backward_transposed(lgx16.get(), lgw16.get(), glh.get(), xs.get(), ts.get(), N, C, V);
    lout16[k] = lob.host(), ldx16[k] = lgx16.host(), ldwte16[k] = lgw16.host();
    e.set_matmul_precision(MatmulPrecision::fp32);
  }
  // Layernorm's row statistics are C-term sums; GELU is one exp and a few roundings per element (GeluAndElementwise).
  expect_close_bf16("bf16-stored layernorm out", ln[1], ln[0], fp32_tol(C, widened(ln[0])));
  expect_close_bf16("bf16-stored residual layernorm out", res_ln[1], res_ln[0], fp32_tol(C, widened(res_ln[0])));
  expect_close_bf16("bf16-stored gelu out", gelu[1], gelu[0], fp32_tol(1, widened(gelu[0])));
  expect_close_bf16("bf16-stored gelu out from bf16", gelu16[1], gelu16[0], fp32_tol(1, widened(gelu16[0])));
  expect_close("gelu out from bf16", gelu32[1], gelu32[0], fp32_tol(1, gelu32[0]));
  expect_close("gelu dinp from bf16", dgelu[1], dgelu[0], fp32_tol(1, dgelu[0]));
  expect_close_bf16("bf16-stored matmul out", out16[1], out16[0], fp32_tol(C + 1, widened(out16[0])));
  for (const Halves* v : {xb, wb, tb})
    EXPECT_EQ(std::memcmp(v[1].data(), v[0].data(), v[0].size() * sizeof(BFloat16)), 0) << "cast_to_bf16";
  expect_close("bf16-stored matmul out", out[1], out[0], fp32_tol(C + 1, out[0]));
  expect_close("bf16-stored matmul dinp", dx[1], dx[0], fp32_tol(OC + 1, dx[0]));
  expect_close("bf16-stored matmul dweight", dw[1], dw[0], fp32_tol(N + 1, dw[0]));
  expect_close("bf16-stored matmul dbias", db[1], db[0], fp32_tol(N + 1, db[0]));
  expect_close("bf16-stored lm_head out", lout[1], lout[0], fp32_tol(C, lout[0]));
  expect_close("bf16-stored lm_head dinp", ldx[1], ldx[0], fp32_tol(V + 1, ldx[0]));
  expect_close("bf16-stored lm_head dwte", ldwte[1], ldwte[0], fp32_tol(N + 1, ldwte[0]));
  expect_close_bf16("bf16-stored lm_head out", lout16[1], lout16[0], fp32_tol(C, widened(lout16[0])));
  expect_close("lm_head dinp from a bf16-stored dout", ldx16[1], ldx16[0], fp32_tol(V + 1, ldx16[0]));
  expect_close("lm_head dwte from a bf16-stored dout", ldwte16[1], ldwte16[0], fp32_tol(N + 1, ldwte16[0]));
}

// The gradient between a dense layer's backward pass and a layernorm's (the model's dC, stored in bf16 where
// attention is): the lm_head's and c_fc's dinp stored in bf16 (their fp32 dinp rounded, within the CPU's tolerance
// plus a bf16 ulp), and layernorm_backward from a bf16-stored dout: bit for bit what the device gives from the same
// values in fp32, and within the CPU's tolerances of LayerNorm.
TEST_F(CudaOpsNormGelu, Bf16StoredInputGradients) {
  const int N = 200, C = 96, V = 130, H = 4 * C;
  Rng rng(47);
  const Floats x = rng.normal(size_t(N) * C, 2.0f), wte = rng.normal(size_t(V) * C), gl = rng.normal(size_t(N) * V),
               w = rng.normal(C), b = rng.normal(C), wfc = rng.normal(size_t(C) * H),
               pre = rng.normal(size_t(N) * H, 2.5f), dg = rng.normal(size_t(N) * H), dx0 = rng.normal(x.size()),
               dw0 = rng.normal(C);
  Halves lm16[2], fc16[2];
  Floats ln[3][3];
  Backend* be[3] = {cpu.get(), gpu.get(), gpu.get()};
  for (int k = 0; k < 3; ++k) {  // the CPU and the device from bf16 dout, the device from the same values in fp32
    Backend& e = *be[k];
    e.set_matmul_precision(MatmulPrecision::bf16);
    FBuf xf(e, x), tf(e, wte), glf(e, gl), gw(e, Floats(wte.size())), wf(e, wfc), pf(e, pre), g(e, dg),
        fw(e, Floats(wfc.size())), fb(e, Floats(size_t(H)));
    HBuf lx16(e, x.size()), fx16(e, x.size());
    e.matmul_backward_transposed(lx16.get(), gw.get(), glf.get(), xf.get(), tf.get(), N, C, V);
    e.matmul_gelu_backward(fx16.get(), fw.get(), fb.get(), g.get(), pf.get(), xf.get(), wf.get(), N, C, H);
    if (k < 2) lm16[k] = lx16.host(), fc16[k] = fx16.host();
    // layernorm_backward from the lm_head's bf16 dinp (the CPU's, so that all three start from the same values)
    FBuf wi(e, w), bi(e, b), o(e, Floats(x.size())), m(e, Floats(N)), r(e, Floats(N)), dx(e, dx0), dw(e, dw0),
        db(e, dw0), d32(e, widened(lm16[0]));
    HBuf d16(e, lm16[0]);
    e.layernorm_forward(o.get(), m.get(), r.get(), xf.get(), wi.get(), bi.get(), N, C);
    e.layernorm_backward(dx.get(), dw.get(), db.get(), k < 2 ? TensorIn(d16.get()) : TensorIn(d32.get()), xf.get(),
                         wi.get(), m.get(), r.get(), N, C);
    ln[k][0] = dx.host(), ln[k][1] = dw.host(), ln[k][2] = db.host();
    e.set_matmul_precision(MatmulPrecision::fp32);
  }
  expect_close_bf16("lm_head dinp stored in bf16 vs cpu", lm16[1], lm16[0], fp32_tol(V, widened(lm16[0])));
  Tol tx = fp32_tol(H + 1, widened(fc16[0]));
  tx.atol += std::ldexp(rms(widened(fc16[0])), -9);  // as in MatmulGeluBackward
  expect_close_bf16("c_fc dinp stored in bf16 vs cpu", fc16[1], fc16[0], tx);
  const char* names[3] = {"dinp", "dweight", "dbias"};
  for (int i = 0; i < 3; ++i) {
    expect_bitwise(std::string("layernorm ") + names[i] + " from a bf16 dout as from fp32", ln[1][i], ln[2][i]);
    expect_close(std::string("layernorm ") + names[i] + " from a bf16 dout vs cpu", ln[1][i], ln[0][i],
                 fp32_tol(i == 0 ? C : N, ln[0][i]));
  }
}

// A branch's output stored in bf16: the fused residual layernorm from it gives the device's bits from the same values
// in fp32, and the CPU's within LayerNorm's tolerances (the residual, one add per element, bitwise).
TEST_F(CudaOpsNormGelu, ResidualLayerNormFromABf16Branch) {
  const int N = 300, C = 96;
  Rng rng(48);
  const Floats a = rng.normal(size_t(N) * C), w = rng.normal(C), bias = rng.normal(C),
               b = test::rounded_to_bf16(rng.normal(size_t(N) * C, 2.0f));
  Floats res[3][4];
  Backend* be[3] = {cpu.get(), gpu.get(), gpu.get()};
  for (int k = 0; k < 3; ++k) {  // the CPU and the device from bf16 b, the device from b in fp32
    Backend& e = *be[k];
    FBuf ai(e, a), wi(e, w), bi(e, bias), b32(e, b), r(e, nans(a.size())), o(e, nans(a.size())), m(e, nans(N)),
        s(e, nans(N));
    HBuf b16(e, test::bf16_values(b));
    e.residual_layernorm_forward(r.get(), o.get(), m.get(), s.get(), ai.get(), k < 2 ? TensorIn(b16.get()) : b32.get(),
                                 wi.get(), bi.get(), N, C);
    res[k][0] = r.host(), res[k][1] = o.host(), res[k][2] = m.host(), res[k][3] = s.host();
  }
  const char* names[4] = {"residual", "out", "mean", "rstd"};
  for (int i = 0; i < 4; ++i)
    expect_bitwise(std::string("residual layernorm ") + names[i] + " from a bf16 b as from fp32", res[1][i], res[2][i]);
  expect_bitwise("residual from a bf16 b vs cpu", res[1][0], res[0][0]);
  for (int i = 1; i < 4; ++i)
    expect_close(std::string("residual layernorm ") + names[i] + " from a bf16 b vs cpu", res[1][i], res[0][i],
                 fp32_tol(C, res[0][i]));
}

}  // namespace
}  // namespace ember
