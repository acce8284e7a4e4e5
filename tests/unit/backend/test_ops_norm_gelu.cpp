// CPU encoder, layernorm (plain and fused with the residual add) and GELU (cpu_encoder.cpp, cpu_layernorm.cpp,
// cpu_gelu.cpp) against the float64 references, and their backward passes also against finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ops_test_util.h"

namespace ember {
namespace {

class OpsNormGelu : public CpuOpsTest {};

INSTANTIATE_TEST_SUITE_P(Shapes, OpsNormGelu, testing::ValuesIn(kShapes), shape_name);

TEST_P(OpsNormGelu, Encoder) {
  const auto [B, T, C, NH] = GetParam();
  const int V = 5, maxT = T + 3;  // few token ids, so dwte rows collect many tokens each
  Rng rng(stream(1));
  const auto inp = rng.tokens(size_t(B) * T, V);
  const auto wte = rng.normal(size_t(V) * C), wpe = rng.normal(size_t(maxT) * C), R = rng.normal(size_t(B) * T * C);
  const auto dwte0 = rng.normal(wte.size()), dwpe0 = rng.normal(wpe.size());  // prefill: backward must add
  Ints d_inp(*be, inp);
  Floats d_wte(*be, wte), d_wpe(*be, wpe), d_out(*be, size_t(B) * T * C), d_R(*be, R), d_dwte(*be, dwte0),
      d_dwpe(*be, dwpe0);
  be->encoder_forward(d_out.get(), d_inp.get(), d_wte.get(), d_wpe.get(), B, T, C);
  Vec wte_d = to_double(wte), wpe_d = to_double(wpe);
  const Vec out = ref_encoder(inp, wte_d, wpe_d, B, T, C);
  expect_close("encoder out", d_out.host(), out, fp32_tol(1, out));

  be->encoder_backward(d_dwte.get(), d_dwpe.get(), d_R.get(), d_inp.get(), B, T, C);
  Vec dwte(wte.size(), 0.0), dwpe(wpe.size(), 0.0);
  for (int bt = 0; bt < B * T; ++bt)
    for (int c = 0; c < C; ++c) {
      dwte[size_t(inp[bt]) * C + c] += R[size_t(bt) * C + c];
      dwpe[size_t(bt % T) * C + c] += R[size_t(bt) * C + c];
    }
  const Tol tw = fp32_tol(B * T, dwte), tp = fp32_tol(B, dwpe);  // sums over all tokens / over the batch
  expect_close("encoder dwte", d_dwte.host(), plus(dwte0, dwte), tw);
  expect_close("encoder dwpe", d_dwpe.host(), plus(dwpe0, dwpe), tp);
  const Vec Rd = to_double(R);
  auto loss = [&] { return dot(ref_encoder(inp, wte_d, wpe_d, B, T, C), Rd); };
  const int fd = fd_points(double(B) * T * C);
  expect_fd("encoder dwte", d_dwte.host(), dwte0, finite_differences(wte_d, loss, rng, fd), tw);
  expect_fd("encoder dwpe", d_dwpe.host(), dwpe0, finite_differences(wpe_d, loss, rng, fd), tp);
}

TEST_P(OpsNormGelu, LayerNorm) {
  const auto [B, T, C, NH] = GetParam();
  const int N = B * T;
  Rng rng(stream(2));
  // A non-zero mean and non-unit spread so that mean subtraction and rstd both matter.
  const auto x = rng.normal(size_t(N) * C, 2.0f, 0.5f), w = rng.normal(C, 0.5f, 1.0f), b = rng.normal(C, 0.5f);
  const auto R = rng.normal(size_t(N) * C);
  const auto dx0 = rng.normal(x.size()), dw0 = rng.normal(C), db0 = rng.normal(C);
  Floats d_x(*be, x), d_w(*be, w), d_b(*be, b), d_R(*be, R), d_out(*be, x.size()), d_mean(*be, N), d_rstd(*be, N),
      d_dx(*be, dx0), d_dw(*be, dw0), d_db(*be, db0);
  be->layernorm_forward(d_out.get(), d_mean.get(), d_rstd.get(), d_x.get(), d_w.get(), d_b.get(), N, C);
  Vec xd = to_double(x), wd = to_double(w), bd = to_double(b), mean, rstd;
  const Vec out = ref_layernorm(xd, wd, bd, N, C, &mean, &rstd);
  expect_close("layernorm out", d_out.host(), out, fp32_tol(C, out));  // mean and variance are C-term sums
  expect_close("layernorm mean", d_mean.host(), mean, fp32_tol(C, mean));
  expect_close("layernorm rstd", d_rstd.host(), rstd, fp32_tol(C, rstd));

  be->layernorm_backward(d_dx.get(), d_dw.get(), d_db.get(), d_R.get(), d_x.get(), d_w.get(), d_mean.get(),
                         d_rstd.get(), N, C);
  const Vec Rd = to_double(R);
  Vec dx, dw, db;
  ref_layernorm_backward(Rd, xd, wd, N, C, dx, dw, db);
  const Tol tx = fp32_tol(C, dx), tw = fp32_tol(N, dw), tb = fp32_tol(N, db);  // dx sums over C; dw, db over rows
  expect_close("layernorm dinp", d_dx.host(), plus(dx0, dx), tx);
  expect_close("layernorm dweight", d_dw.host(), plus(dw0, dw), tw);
  expect_close("layernorm dbias", d_db.host(), plus(db0, db), tb);
  auto loss = [&] { return dot(ref_layernorm(xd, wd, bd, N, C), Rd); };
  const int fd = fd_points(double(N) * C);
  expect_fd("layernorm dinp", d_dx.host(), dx0, finite_differences(xd, loss, rng, fd), tx);
  expect_fd("layernorm dweight", d_dw.host(), dw0, finite_differences(wd, loss, rng, fd), tw);
  expect_fd("layernorm dbias", d_db.host(), db0, finite_differences(bd, loss, rng, fd), tb);
}

// The fused residual add + layernorm against the two ops it replaces (bitwise, the contract of backend.h) and the
// float64 reference, also with the residual written over its first input.
TEST_P(OpsNormGelu, ResidualLayerNorm) {
  const auto [B, T, C, NH] = GetParam();
  const int N = B * T;
  Rng rng(stream(9));
  const auto a = rng.normal(size_t(N) * C, 2.0f, 0.5f), b = rng.normal(size_t(N) * C), w = rng.normal(C, 0.5f, 1.0f),
             bias = rng.normal(C, 0.5f);
  Floats d_a(*be, a), d_b(*be, b), d_w(*be, w), d_bias(*be, bias);
  Floats r1(*be, a.size()), o1(*be, a.size()), m1(*be, N), s1(*be, N);
  be->add(r1.get(), d_a.get(), d_b.get(), a.size());
  be->layernorm_forward(o1.get(), m1.get(), s1.get(), r1.get(), d_w.get(), d_bias.get(), N, C);
  Floats r2(*be, a.size()), o2(*be, a.size()), m2(*be, N), s2(*be, N);
  be->residual_layernorm_forward(r2.get(), o2.get(), m2.get(), s2.get(), d_a.get(), d_b.get(), d_w.get(), d_bias.get(),
                                 N, C);
  EXPECT_EQ(r2.host(), r1.host()) << "residual";
  EXPECT_EQ(o2.host(), o1.host()) << "out";
  EXPECT_EQ(m2.host(), m1.host()) << "mean";
  EXPECT_EQ(s2.host(), s1.host()) << "rstd";
  Floats o3(*be, a.size()), m3(*be, N), s3(*be, N);
  be->residual_layernorm_forward(d_a.get(), o3.get(), m3.get(), s3.get(), d_a.get(), d_b.get(), d_w.get(), d_bias.get(),
                                 N, C);  // residual over a
  EXPECT_EQ(d_a.host(), r1.host()) << "residual written over a";
  EXPECT_EQ(o3.host(), o1.host()) << "out with the residual written over a";
  Vec sum(a.size());
  for (size_t i = 0; i < a.size(); ++i) sum[i] = double(a[i]) + double(b[i]);
  const Vec out = ref_layernorm(sum, to_double(w), to_double(bias), N, C);
  expect_close("residual layernorm out", o2.host(), out, fp32_tol(C, out));  // one extra rounding: the add
}

TEST_P(OpsNormGelu, Gelu) {
  const auto [B, T, C, NH] = GetParam();
  const size_t n = size_t(B) * T * 4 * C;
  Rng rng(stream(6));
  const auto x = rng.normal(n, 2.5f), R = rng.normal(n);
  Floats d_x(*be, x), d_R(*be, R), d_out(*be, n), d_dx(*be, nans(n));  // dinp is written: NaN shows a read
  be->gelu_forward(d_out.get(), d_x.get(), n);
  Vec xd = to_double(x), out(n), dx(n);
  for (size_t i = 0; i < n; ++i) out[i] = ref_gelu(xd[i]), dx[i] = double(R[i]) * ref_gelu_grad(xd[i]);
  // Elementwise: a handful of roundings plus the ~4 ulp exp, as for an 8-term sum.
  expect_close("gelu out", d_out.host(), out, fp32_tol(8, out));
  be->gelu_backward(d_dx.get(), d_x.get(), d_R.get(), n);
  expect_close("gelu dinp", d_dx.host(), dx, fp32_tol(8, dx));
  be->gelu_backward(d_R.get(), d_x.get(), d_R.get(), n);  // in place, as matmul_gelu_backward runs it
  EXPECT_EQ(d_R.host(), d_dx.host()) << "gelu_backward with dinp aliasing dout";
  const Vec Rd = to_double(R);
  auto loss = [&] {
    double s = 0.0;
    for (size_t i = 0; i < n; ++i) s += ref_gelu(xd[i]) * Rd[i];
    return s;
  };
  expect_fd("gelu dinp", d_dx.host(), finite_differences(xd, loss, rng, fd_points(double(n))), fp32_tol(8, dx));
}

}  // namespace
}  // namespace ember
