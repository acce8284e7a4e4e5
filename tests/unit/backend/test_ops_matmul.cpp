// CPU dense layers and the tied lm_head (cpu_matmul.cpp, cpu_gemm.cpp) against the float64 references and finite
// differences, at matmul precisions fp32 and bf16, and the determinism of the threaded GEMM and attention splits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ops_test_util.h"

namespace ember {
namespace {

class OpsMatmul : public CpuOpsTest {};

INSTANTIATE_TEST_SUITE_P(Shapes, OpsMatmul, testing::ValuesIn(kShapes), shape_name);

// Dense layer shapes from the attention shape: qkv-like (C -> 3C + 1, odd) and, for the big shape, a product wide
// enough (OC > N) that the threaded GEMM splits columns rather than rows.
void check_matmul(Backend& be, Rng& rng, int N, int IC, int OC, bool with_bias) {
  const std::string tag = "matmul " + std::to_string(N) + "x" + std::to_string(IC) + "x" + std::to_string(OC) +
                          (with_bias ? " " : " nobias ");
  const auto x = rng.normal(size_t(N) * IC), w = rng.normal(size_t(IC) * OC), b = rng.normal(OC);
  const auto R = rng.normal(size_t(N) * OC);
  // dinp is written (NaN before: any element read or left shows), dweight and dbias added to.
  const auto dw0 = rng.normal(w.size()), db0 = rng.normal(OC);
  Floats d_x(be, x), d_w(be, w), d_b(be, b), d_R(be, R), d_out(be, size_t(N) * OC), d_dx(be, nans(x.size())),
      d_dw(be, dw0), d_db(be, db0);
  be.matmul_forward(d_out.get(), d_x.get(), d_w.get(), with_bias ? d_b.get() : nullptr, N, IC, OC);
  Vec xd = to_double(x), wd = to_double(w), bd = to_double(b);
  const Vec out = ref_matmul(xd, wd, with_bias ? &bd : nullptr, N, IC, OC);
  expect_close(tag + "out", d_out.host(), out, fp32_tol(IC, out));

  be.matmul_backward(d_dx.get(), d_dw.get(), with_bias ? d_db.get() : nullptr, d_R.get(), d_x.get(), d_w.get(), N, IC,
                     OC);
  const Vec Rd = to_double(R);
  Vec dx(x.size(), 0.0), dw(w.size(), 0.0), db(OC, 0.0);
  for (int n = 0; n < N; ++n) {
    const double* g = &Rd[size_t(n) * OC];
    for (int o = 0; o < OC; ++o) db[o] += g[o];
    for (int i = 0; i < IC; ++i)
      for (int o = 0; o < OC; ++o) {
        dx[size_t(n) * IC + i] += g[o] * wd[size_t(i) * OC + o];
        dw[size_t(i) * OC + o] += xd[size_t(n) * IC + i] * g[o];
      }
  }
  const Tol tx = fp32_tol(OC, dx), tw = fp32_tol(N, dw), tb = fp32_tol(N, db);
  expect_close(tag + "dinp", d_dx.host(), dx, tx);
  expect_close(tag + "dweight", d_dw.host(), plus(dw0, dw), tw);
  if (with_bias)
    expect_close(tag + "dbias", d_db.host(), plus(db0, db), tb);
  else
    EXPECT_EQ(d_db.host(), db0) << tag << "dbias was written although null was passed";
  auto loss = [&] { return dot(ref_matmul(xd, wd, with_bias ? &bd : nullptr, N, IC, OC), Rd); };
  const int fd = fd_points(double(N) * IC * OC);
  expect_fd(tag + "dinp", d_dx.host(), finite_differences(xd, loss, rng, fd), tx);
  expect_fd(tag + "dweight", d_dw.host(), dw0, finite_differences(wd, loss, rng, fd), tw);
  if (with_bias) expect_fd(tag + "dbias", d_db.host(), db0, finite_differences(bd, loss, rng, fd), tb);
}

TEST_P(OpsMatmul, Matmul) {
  const auto [B, T, C, NH] = GetParam();
  Rng rng(stream(3));
  check_matmul(*be, rng, B * T, C, 3 * C + 1, true);
  check_matmul(*be, rng, B * T, C, 2 * C, false);
  if (B * T >= 64) check_matmul(*be, rng, 17, 4 * C, 16 * C + 3, true);  // OC > N: column-split GEMMs
}

// The backward of out = gelu(x @ w + b) from the gradient R at the GELU's output, against float64: the layer's
// gradient is G = R * gelu'(pre) with pre the layer's output as stored, then dinp = G w^T (written), dweight += x^T G,
// dbias += the column sums of G. R is the op's scratch, so nothing is checked of it afterwards.
TEST_P(OpsMatmul, MatmulGeluBackward) {
  const auto [B, T, C, NH] = GetParam();
  const int N = B * T, IC = C, OC = 4 * C;
  Rng rng(stream(10));
  const auto x = rng.normal(size_t(N) * IC), w = rng.normal(size_t(IC) * OC), pre = rng.normal(size_t(N) * OC, 2.5f);
  const auto R = rng.normal(size_t(N) * OC), dw0 = rng.normal(w.size()), db0 = rng.normal(OC);
  Floats d_x(*be, x), d_w(*be, w), d_pre(*be, pre), d_R(*be, R), d_dx(*be, nans(x.size())), d_dw(*be, dw0),
      d_db(*be, db0);
  be->matmul_gelu_backward(d_dx.get(), d_dw.get(), d_db.get(), d_R.get(), d_pre.get(), d_x.get(), d_w.get(), N, IC, OC);
  Vec G(R.size()), dx(x.size(), 0.0), dw(w.size(), 0.0), db(OC, 0.0);
  for (size_t i = 0; i < G.size(); ++i) G[i] = double(R[i]) * ref_gelu_grad(double(pre[i]));
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      const double g = G[size_t(n) * OC + o];
      db[o] += g;
      for (int i = 0; i < IC; ++i) {
        dx[size_t(n) * IC + i] += g * double(w[size_t(i) * OC + o]);
        dw[size_t(i) * OC + o] += double(x[size_t(n) * IC + i]) * g;
      }
    }
  // G carries the elementwise error of gelu_backward (8 terms' worth) into sums of OC or N terms.
  expect_close("matmul_gelu dinp", d_dx.host(), dx, fp32_tol(OC + 8, dx));
  expect_close("matmul_gelu dweight", d_dw.host(), plus(dw0, dw), fp32_tol(N + 8, dw));
  expect_close("matmul_gelu dbias", d_db.host(), plus(db0, db), fp32_tol(N + 8, db));
}

TEST_P(OpsMatmul, MatmulTransposed) {
  const auto [B, T, C, NH] = GetParam();
  const int N = B * T, V = 16 * C + 5;  // V > N for the big shape: both split directions of the threaded GEMM
  Rng rng(stream(4));
  const auto x = rng.normal(size_t(N) * C), wte = rng.normal(size_t(V) * C), R = rng.normal(size_t(N) * V);
  const auto dwte0 = rng.normal(wte.size());
  Floats d_x(*be, x), d_wte(*be, wte), d_R(*be, R), d_out(*be, size_t(N) * V), d_dx(*be, nans(x.size())),
      d_dwte(*be, dwte0);
  be->matmul_forward_transposed(d_out.get(), d_x.get(), d_wte.get(), N, C, V);
  Vec xd = to_double(x), wd = to_double(wte);
  const Vec out = ref_matmul(xd, wd, nullptr, N, C, V, true);
  expect_close("lm_head out", d_out.host(), out, fp32_tol(C, out));

  be->matmul_backward_transposed(d_dx.get(), d_dwte.get(), d_R.get(), d_x.get(), d_wte.get(), N, C, V);
  const Vec Rd = to_double(R);
  Vec dx(x.size(), 0.0), dw(wte.size(), 0.0);
  for (int n = 0; n < N; ++n)
    for (int v = 0; v < V; ++v)
      for (int c = 0; c < C; ++c) {
        dx[size_t(n) * C + c] += Rd[size_t(n) * V + v] * wd[size_t(v) * C + c];
        dw[size_t(v) * C + c] += Rd[size_t(n) * V + v] * xd[size_t(n) * C + c];
      }
  const Tol tx = fp32_tol(V, dx), tw = fp32_tol(N, dw);
  expect_close("lm_head dinp", d_dx.host(), dx, tx);
  expect_close("lm_head dwte", d_dwte.host(), plus(dwte0, dw), tw);
  auto loss = [&] { return dot(ref_matmul(xd, wd, nullptr, N, C, V, true), Rd); };
  const int fd = fd_points(double(N) * C * V);
  expect_fd("lm_head dinp", d_dx.host(), finite_differences(xd, loss, rng, fd), tx);
  expect_fd("lm_head dwte", d_dwte.host(), dwte0, finite_differences(wd, loss, rng, fd), tw);
}

// Same inputs twice -> bitwise-equal outputs, for the ops with threaded reductions or GEMM splits.
TEST_P(OpsMatmul, DeterministicBackward) {
  const auto [B, T, C, NH] = GetParam();
  const int N = B * T, OC = 3 * C + 1;
  Rng rng(stream(9));
  const auto qkv = rng.normal(size_t(N) * 3 * C, 1.5f), dout = rng.normal(size_t(N) * C);
  const auto x = rng.normal(size_t(N) * C), w = rng.normal(size_t(C) * OC), g = rng.normal(size_t(N) * OC);
  std::vector<float> first[6];
  for (int run = 0; run < 2; ++run) {
    Floats d_qkv(*be, qkv), d_dout(*be, dout), d_out(*be, size_t(N) * C), d_lse(*be, size_t(N) * NH),
        d_dqkv(*be, qkv.size());
    be->attention_forward(d_out.get(), d_lse.get(), d_qkv.get(), B, T, C, NH);
    be->attention_backward(d_dqkv.get(), d_dout.get(), d_qkv.get(), d_out.get(), d_lse.get(), B, T, C, NH);
    Floats d_x(*be, x), d_w(*be, w), d_g(*be, g), d_dx(*be, x.size()), d_dw(*be, w.size()), d_db(*be, OC);
    be->matmul_backward(d_dx.get(), d_dw.get(), d_db.get(), d_g.get(), d_x.get(), d_w.get(), N, C, OC);
    std::vector<float> now[6] = {d_out.host(), d_lse.host(), d_dqkv.host(), d_dx.host(), d_dw.host(), d_db.host()};
    for (int i = 0; i < 6; ++i) {
      if (run == 0)
        first[i] = now[i];
      else
        EXPECT_EQ(0, std::memcmp(first[i].data(), now[i].data(), now[i].size() * sizeof(float))) << "output " << i;
    }
  }
}

// Matmul precision bf16: every GEMM input (activations, weights and output gradients, in all four matmul ops) is
// rounded to bf16 and the products accumulate in fp32. The results must match float64 products of the rounded inputs
// within the fp32 tolerance, and be far (> 20 fp32 tolerances) from the products of the unrounded inputs somewhere,
// which they would not be if an input were left unrounded.
TEST_F(OpsMatmul, MatmulBf16RoundsEveryGemmInput) {
  const int N = 37, IC = 29, OC = 43;
  Rng rng(201);
  const auto x = rng.normal(size_t(N) * IC), w = rng.normal(size_t(IC) * OC), g = rng.normal(size_t(N) * OC);
  auto rounded = [](std::vector<float> v) {
    for (float& a : v) a = round_to_bf16(a);
    return to_double(v);
  };
  const Vec xr = rounded(x), wr = rounded(w), gr = rounded(g), xd = to_double(x), wd = to_double(w), gd = to_double(g);
  // Dense layer: out = x @ w (w as (IC, OC)); dx = g @ w^T; dw = x^T @ g. With transposed = true the same arrays
  // serve as the lm_head's: w read as wte (OC, IC) -> out = x @ wte^T; dx = g @ wte; dwte = g^T @ x.
  for (bool transposed : {false, true}) {
    const std::string tag = transposed ? "lm_head bf16 " : "matmul bf16 ";
    auto refs = [&](const Vec& X, const Vec& W, const Vec& G, Vec& out, Vec& dx, Vec& dw) {
      out = ref_matmul(X, W, nullptr, N, IC, OC, transposed);
      dx.assign(X.size(), 0.0);
      dw.assign(W.size(), 0.0);
      for (int n = 0; n < N; ++n)
        for (int i = 0; i < IC; ++i)
          for (int o = 0; o < OC; ++o) {
            const size_t wi = transposed ? size_t(o) * IC + i : size_t(i) * OC + o;
            dx[size_t(n) * IC + i] += G[size_t(n) * OC + o] * W[wi];
            dw[wi] += X[size_t(n) * IC + i] * G[size_t(n) * OC + o];
          }
    };
    Floats d_x(*be, x), d_w(*be, w), d_g(*be, g), d_out(*be, size_t(N) * OC), d_dx(*be, x.size()), d_dw(*be, w.size());
    be->set_matmul_precision(MatmulPrecision::bf16);
    if (transposed) {
      be->matmul_forward_transposed(d_out.get(), d_x.get(), d_w.get(), N, IC, OC);
      be->matmul_backward_transposed(d_dx.get(), d_dw.get(), d_g.get(), d_x.get(), d_w.get(), N, IC, OC);
    } else {
      be->matmul_forward(d_out.get(), d_x.get(), d_w.get(), nullptr, N, IC, OC);
      be->matmul_backward(d_dx.get(), d_dw.get(), nullptr, d_g.get(), d_x.get(), d_w.get(), N, IC, OC);
    }
    be->set_matmul_precision(MatmulPrecision::fp32);
    Vec out, dx, dw, out_exact, dx_exact, dw_exact;
    refs(xr, wr, gr, out, dx, dw);
    refs(xd, wd, gd, out_exact, dx_exact, dw_exact);
    const Tol t_out = fp32_tol(IC, out), t_dx = fp32_tol(OC, dx), t_dw = fp32_tol(N, dw);
    expect_close(tag + "out", d_out.host(), out, t_out);
    expect_close(tag + "dinp", d_dx.host(), dx, t_dx);
    expect_close(tag + "dweight", d_dw.host(), dw, t_dw);
    auto max_err = [](const std::vector<float>& got, const Vec& want) {
      double m = 0.0;
      for (size_t i = 0; i < got.size(); ++i) m = std::max(m, std::fabs(double(got[i]) - want[i]));
      return m;
    };
    EXPECT_GT(max_err(d_out.host(), out_exact), 20 * t_out.atol) << tag << "out: inputs not rounded";
    EXPECT_GT(max_err(d_dx.host(), dx_exact), 20 * t_dx.atol) << tag << "dinp: inputs not rounded";
    EXPECT_GT(max_err(d_dw.host(), dw_exact), 20 * t_dw.atol) << tag << "dweight: inputs not rounded";
  }
}

// bf16-stored weights over a few rows, as KV-cache decoding runs the dense layers and the lm_head: up to
// kSkinnyRows rows the CPU backend streams the bf16 weights (cpu_skinny_bf16.cpp), beyond it takes the general path.
// Both must give float64 products of the bf16 values (plus the fp32 bias) within the fp32 tolerance.
TEST_F(OpsMatmul, MatmulBf16StoredWeightsOnFewRows) {
  const int IC = 70, OC = 300;  // OC beyond one 256-column block of the skinny kernel
  Rng rng(202);
  const auto w = rng.normal(size_t(IC) * OC), bias = rng.normal(size_t(OC));
  std::vector<BFloat16> w16(w.size());
  std::vector<float> wr(w.size());
  for (size_t i = 0; i < w.size(); ++i) wr[i] = from_bf16(w16[i] = to_bf16(w[i]));
  for (int N : {1, 3, 16, 17}) {
    const auto x = rng.normal(size_t(N) * IC);
    std::vector<BFloat16> x16(x.size());
    std::vector<float> xr(x.size());
    for (size_t i = 0; i < x.size(); ++i) xr[i] = from_bf16(x16[i] = to_bf16(x[i]));
    test::BackendArray<BFloat16> d_x(*be, x16), d_w(*be, w16);
    Floats d_bias(*be, bias), d_out(*be, size_t(N) * OC), d_logits(*be, size_t(N) * OC);
    be->set_matmul_precision(MatmulPrecision::bf16);
    be->matmul_forward(d_out.get(), d_x.get(), d_w.get(), d_bias.get(), N, IC, OC);
    // The same weights read as an lm_head's (V = IC rows of C = OC... transposed): out = x2 @ wte^T with wte (IC, OC).
    const auto x2 = rng.normal(size_t(N) * OC);
    std::vector<BFloat16> x216(x2.size());
    std::vector<float> x2r(x2.size());
    for (size_t i = 0; i < x2.size(); ++i) x2r[i] = from_bf16(x216[i] = to_bf16(x2[i]));
    test::BackendArray<BFloat16> d_x2(*be, x216);
    Floats d_head(*be, size_t(N) * IC);
    be->matmul_forward_transposed(d_head.get(), d_x2.get(), d_w.get(), N, OC, IC);
    be->set_matmul_precision(MatmulPrecision::fp32);
    const Vec b = to_double(bias);
    const Vec out = ref_matmul(to_double(xr), to_double(wr), &b, N, IC, OC);
    const Vec head = ref_matmul(to_double(x2r), to_double(wr), nullptr, N, OC, IC, /*w_transposed=*/true);
    expect_close("bf16 weights, " + std::to_string(N) + " rows: out", d_out.host(), out, fp32_tol(IC, out));
    expect_close("bf16 wte, " + std::to_string(N) + " rows: logits", d_head.host(), head, fp32_tol(OC, head));
  }
}

}  // namespace
}  // namespace ember
