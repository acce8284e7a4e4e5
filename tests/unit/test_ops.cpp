// CPU backend ops against float64 references written here as plain loops, and backward ops also against central
// finite differences of a scalar loss L = sum(out * R). Inputs come from a seeded Philox stream (RNG_PURPOSE_TEST).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "attention_bf16_bounds.h"
#include "backend/backend.h"
#include "backend/cpu/cpu_common.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/philox.h"
#include "test_support.h"

namespace ember {
namespace {

using Vec = std::vector<double>;
constexpr uint64_t kSeed = 20240611;
constexpr double kEps = 1.1920928955078125e-7;  // fp32 machine epsilon, 2^-23

// ---------------------------------------------------------------------------------------------------------------
// Tolerances. A result built from K-term fp32 sums is off by a random walk of K roundings: about sqrt(K) * eps times
// the size of the partial sums, which is the typical size (RMS) of the result itself. We allow 8x that, for the
// largest of many elements and for the few extra roundings of each op (scales, the ~4 ulp exp of the softmax ops):
//   |got - ref| <= atol + rtol * |ref|,  atol = 8 sqrt(K) eps rms(ref),  rtol = 8 sqrt(K) eps.
struct Tol {
  double atol, rtol;
};
double rms(const Vec& v) {
  double s = 0.0;
  for (double x : v) s += x * x;
  return v.empty() ? 0.0 : std::sqrt(s / double(v.size()));
}
Tol fp32_tol(double K, const Vec& ref) {
  const double r = 8.0 * std::sqrt(K) * kEps;
  return {r * rms(ref), r};
}

// Compares every element and reports the worst one; EMBER_TEST_VERBOSE=1 prints the worst error/tolerance ratio.
void expect_close(const std::string& what, const std::vector<float>& got, const Vec& want, Tol tol) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0, worst = 0;
  double worst_ratio = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double(got[i]) - want[i]), allowed = tol.atol + tol.rtol * std::fabs(want[i]);
    const double ratio = allowed > 0 ? err / allowed : (err > 0 ? INFINITY : 0.0);
    if (!(ratio <= 1.0)) ++bad;
    if (!(ratio <= worst_ratio)) worst_ratio = ratio, worst = i;
  }
  if (std::getenv("EMBER_TEST_VERBOSE")) std::printf("  %-40s worst err/tol = %.3g\n", what.c_str(), worst_ratio);
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements out of tolerance; worst at " << worst
                     << ": got " << got[worst] << ", want " << want[worst] << " (atol " << tol.atol << ", rtol "
                     << tol.rtol << ")";
}

// ---------------------------------------------------------------------------------------------------------------
// Inputs and backend buffers.
struct Rng {
  Philox philox;
  explicit Rng(uint32_t stream) : philox(kSeed, 0, stream, RNG_PURPOSE_TEST) {}
  std::vector<float> normal(size_t n, float scale = 1.0f, float shift = 0.0f) {
    std::vector<float> v(n);
    for (float& x : v) x = shift + scale * philox.normal();
    return v;
  }
  std::vector<int32_t> tokens(size_t n, int V) {
    std::vector<int32_t> v(n);
    for (int32_t& x : v) x = int32_t(philox.below(uint64_t(V)));
    return v;
  }
};

Vec to_double(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }
Vec plus(const std::vector<float>& a, const Vec& b) {
  Vec r(b.size());
  for (size_t i = 0; i < b.size(); ++i) r[i] = double(a[i]) + b[i];
  return r;
}

using Floats = test::BackendArray<float>;
using Ints = test::BackendArray<int32_t>;

// ---------------------------------------------------------------------------------------------------------------
// Float64 reference ops: the plain definitions, no tricks.
Vec ref_encoder(const std::vector<int32_t>& inp, const Vec& wte, const Vec& wpe, int B, int T, int C) {
  Vec out(size_t(B) * T * C);
  for (int bt = 0; bt < B * T; ++bt)
    for (int c = 0; c < C; ++c) out[size_t(bt) * C + c] = wte[size_t(inp[bt]) * C + c] + wpe[size_t(bt % T) * C + c];
  return out;
}

Vec ref_layernorm(const Vec& x, const Vec& w, const Vec& b, int N, int C, Vec* mean = nullptr, Vec* rstd = nullptr) {
  Vec out(x.size());
  if (mean) mean->assign(N, 0.0), rstd->assign(N, 0.0);
  for (int r = 0; r < N; ++r) {
    const double* xr = &x[size_t(r) * C];
    double m = 0.0, v = 0.0;
    for (int c = 0; c < C; ++c) m += xr[c];
    m /= C;
    for (int c = 0; c < C; ++c) v += (xr[c] - m) * (xr[c] - m);
    const double rs = 1.0 / std::sqrt(v / C + 1e-5);
    for (int c = 0; c < C; ++c) out[size_t(r) * C + c] = (xr[c] - m) * rs * w[c] + b[c];
    if (mean) (*mean)[r] = m, (*rstd)[r] = rs;
  }
  return out;
}

void ref_layernorm_backward(const Vec& dout, const Vec& x, const Vec& w, int N, int C, Vec& dx, Vec& dw, Vec& db) {
  Vec mean, rstd;
  ref_layernorm(x, w, Vec(C, 0.0), N, C, &mean, &rstd);
  dx.assign(x.size(), 0.0), dw.assign(C, 0.0), db.assign(C, 0.0);
  for (int r = 0; r < N; ++r) {
    const size_t o = size_t(r) * C;
    double a = 0.0, bsum = 0.0;
    for (int c = 0; c < C; ++c) {
      const double xhat = (x[o + c] - mean[r]) * rstd[r];
      a += dout[o + c] * w[c], bsum += dout[o + c] * w[c] * xhat;
      dw[c] += dout[o + c] * xhat, db[c] += dout[o + c];
    }
    for (int c = 0; c < C; ++c) {
      const double xhat = (x[o + c] - mean[r]) * rstd[r];
      dx[o + c] = rstd[r] * (dout[o + c] * w[c] - a / C - xhat * bsum / C);
    }
  }
}

// out = inp @ w (+ bias); w is (IC, OC), or (OC, IC) when w_transposed (the tied lm_head). Loops are ordered so
// the innermost one walks memory contiguously: the finite-difference checks call this hundreds of times.
Vec ref_matmul(const Vec& inp, const Vec& w, const Vec* bias, int N, int IC, int OC, bool w_transposed = false) {
  Vec out(size_t(N) * OC, 0.0);
  for (int n = 0; n < N; ++n) {
    double* o = &out[size_t(n) * OC];
    if (bias)
      for (int j = 0; j < OC; ++j) o[j] = (*bias)[j];
    for (int i = 0; i < IC; ++i) {
      const double x = inp[size_t(n) * IC + i];
      if (w_transposed) continue;
      for (int j = 0; j < OC; ++j) o[j] += x * w[size_t(i) * OC + j];
    }
    if (w_transposed)
      for (int j = 0; j < OC; ++j) {
        double s = 0.0;
        for (int i = 0; i < IC; ++i) s += inp[size_t(n) * IC + i] * w[size_t(j) * IC + i];
        o[j] += s;
      }
  }
  return out;
}

// Causal attention on (B, T, 3C) qkv; optionally returns lse (B, NH, T).
Vec ref_attention(const Vec& qkv, int B, int T, int C, int NH, Vec* lse = nullptr) {
  const int HS = C / NH;
  const double scale = 1.0 / std::sqrt(double(HS));
  Vec out(size_t(B) * T * C, 0.0), p(T);
  if (lse) lse->assign(size_t(B) * NH * T, 0.0);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int i = 0; i < T; ++i) {
        const double* q = &qkv[(size_t(b) * T + i) * 3 * C + h * HS];
        double m = -INFINITY, sum = 0.0;
        for (int j = 0; j <= i; ++j) {
          const double* k = &qkv[(size_t(b) * T + j) * 3 * C + C + h * HS];
          double s = 0.0;
          for (int d = 0; d < HS; ++d) s += q[d] * k[d];
          p[j] = s * scale, m = std::max(m, p[j]);
        }
        for (int j = 0; j <= i; ++j) p[j] = std::exp(p[j] - m), sum += p[j];
        for (int j = 0; j <= i; ++j) {
          const double* v = &qkv[(size_t(b) * T + j) * 3 * C + 2 * C + h * HS];
          for (int d = 0; d < HS; ++d) out[(size_t(b) * T + i) * C + h * HS + d] += p[j] / sum * v[d];
        }
        if (lse) (*lse)[(size_t(b) * NH + h) * T + i] = m + std::log(sum);
      }
  return out;
}

Vec ref_attention_backward(const Vec& dout, const Vec& qkv, int B, int T, int C, int NH) {
  const int HS = C / NH;
  const double scale = 1.0 / std::sqrt(double(HS));
  Vec dqkv(qkv.size(), 0.0), P(size_t(T) * T), dS(size_t(T) * T);
  auto at = [&](const Vec& a, int b, int t, int part, int h) {
    return &a[(size_t(b) * T + t) * 3 * C + part * C + h * HS];
  };
  auto atm = [&](Vec& a, int b, int t, int part, int h) { return &a[(size_t(b) * T + t) * 3 * C + part * C + h * HS]; };
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      for (int i = 0; i < T; ++i) {  // probabilities
        double m = -INFINITY, sum = 0.0;
        for (int j = 0; j <= i; ++j) {
          double s = 0.0;
          for (int d = 0; d < HS; ++d) s += at(qkv, b, i, 0, h)[d] * at(qkv, b, j, 1, h)[d];
          P[size_t(i) * T + j] = s * scale, m = std::max(m, s * scale);
        }
        for (int j = 0; j <= i; ++j) sum += (P[size_t(i) * T + j] = std::exp(P[size_t(i) * T + j] - m));
        for (int j = 0; j <= i; ++j) P[size_t(i) * T + j] /= sum;
      }
      for (int i = 0; i < T; ++i) {  // dP, softmax backward, then dV
        const double* dO = &dout[(size_t(b) * T + i) * C + h * HS];
        double D = 0.0;
        for (int j = 0; j <= i; ++j) {
          double dp = 0.0;
          for (int d = 0; d < HS; ++d) dp += dO[d] * at(qkv, b, j, 2, h)[d];
          dS[size_t(i) * T + j] = dp, D += P[size_t(i) * T + j] * dp;
          for (int d = 0; d < HS; ++d) atm(dqkv, b, j, 2, h)[d] += P[size_t(i) * T + j] * dO[d];
        }
        for (int j = 0; j <= i; ++j) dS[size_t(i) * T + j] = P[size_t(i) * T + j] * (dS[size_t(i) * T + j] - D);
      }
      for (int i = 0; i < T; ++i)
        for (int j = 0; j <= i; ++j)
          for (int d = 0; d < HS; ++d) {
            atm(dqkv, b, i, 0, h)[d] += scale * dS[size_t(i) * T + j] * at(qkv, b, j, 1, h)[d];
            atm(dqkv, b, j, 1, h)[d] += scale * dS[size_t(i) * T + j] * at(qkv, b, i, 0, h)[d];
          }
    }
  return dqkv;
}

constexpr double kGeluK = 0.7978845608028654, kGeluC = 0.044715;  // sqrt(2/pi) and the cubic coefficient
double ref_gelu(double x) { return 0.5 * x * (1.0 + std::tanh(kGeluK * (x + kGeluC * x * x * x))); }
double ref_gelu_grad(double x) {
  const double th = std::tanh(kGeluK * (x + kGeluC * x * x * x));
  return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * kGeluK * (1.0 + 3.0 * kGeluC * x * x);
}

// Per-row softmax of x / temperature.
Vec ref_softmax(const Vec& x, int N, int V, double temperature = 1.0) {
  Vec p(x.size());
  for (int r = 0; r < N; ++r) {
    double m = -INFINITY, sum = 0.0;
    for (int j = 0; j < V; ++j) m = std::max(m, x[size_t(r) * V + j] / temperature);
    for (int j = 0; j < V; ++j) sum += (p[size_t(r) * V + j] = std::exp(x[size_t(r) * V + j] / temperature - m));
    for (int j = 0; j < V; ++j) p[size_t(r) * V + j] /= sum;
  }
  return p;
}
Vec ref_crossentropy(const Vec& logits, const std::vector<int32_t>& targets, int N, int V) {
  Vec losses(N);
  for (int r = 0; r < N; ++r) {
    double m = -INFINITY, sum = 0.0;
    for (int j = 0; j < V; ++j) m = std::max(m, logits[size_t(r) * V + j]);
    for (int j = 0; j < V; ++j) sum += std::exp(logits[size_t(r) * V + j] - m);
    losses[r] = m + std::log(sum) - logits[size_t(r) * V + targets[r]];
  }
  return losses;
}

// ---------------------------------------------------------------------------------------------------------------
// Central finite differences in double of a scalar loss at `count` coordinates of x drawn from rng:
// dL/dx_i ~ (L(x + h e_i) - L(x - h e_i)) / 2h. With h = 1e-4 the truncation error (h^2 |L'''| / 6) is ~1e-9 and
// the cancellation error (1e-16 |L| / h) ~1e-11, both far below fp32 noise, so they reuse the fp32 tolerances.
struct FdPoint {
  size_t index;
  double grad;
};
std::vector<FdPoint> finite_differences(Vec& x, const std::function<double()>& loss, Rng& rng, int count) {
  constexpr double h = 1e-4;
  std::vector<FdPoint> points;
  for (int n = 0; n < count && n < int(x.size()); ++n) {
    const size_t i = count >= int(x.size()) ? size_t(n) : size_t(rng.philox.below(x.size()));
    const double x0 = x[i];
    x[i] = x0 + h;
    const double up = loss();
    x[i] = x0 - h;
    const double down = loss();
    x[i] = x0;
    points.push_back({i, (up - down) / (2.0 * h)});
  }
  return points;
}
double dot(const Vec& a, const Vec& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Checks the backend gradient (got = prefill + dL/dx) against finite differences at the sampled coordinates.
void expect_fd(const std::string& what, const std::vector<float>& got, const std::vector<float>& prefill,
               const std::vector<FdPoint>& points, Tol tol) {
  std::vector<float> g;
  Vec want;
  for (const FdPoint& p : points) g.push_back(got[p.index]), want.push_back(double(prefill[p.index]) + p.grad);
  expect_close(what + " vs finite differences", g, want, tol);
}

// Coordinates per gradient tensor: up to 40, fewer where one reference forward is expensive, so that each
// tensor's check costs about 1e8 multiply-adds (two forwards per coordinate).
int fd_points(double forward_cost) { return int(std::clamp(5e7 / forward_cost, 8.0, 40.0)); }

// ---------------------------------------------------------------------------------------------------------------
// Shapes: odd sizes (T not a multiple of 4 or 8, C not a multiple of 8) and bigger ones for the threaded paths.
struct Shape {
  int B, T, C, NH;
};
std::string shape_name(const testing::TestParamInfo<Shape>& info) {
  const Shape& s = info.param;
  return "B" + std::to_string(s.B) + "_T" + std::to_string(s.T) + "_C" + std::to_string(s.C) + "_NH" +
         std::to_string(s.NH);
}
// T = 150 spans three 64-query attention blocks, the last one partial.
const Shape kShapes[] = {{2, 7, 12, 3}, {1, 33, 20, 4}, {4, 64, 64, 4}, {2, 150, 48, 3}};

class CpuOps : public testing::TestWithParam<Shape> {
 protected:
  std::unique_ptr<Backend> be = make_cpu_backend();
  uint32_t stream(uint32_t op) const {  // a distinct Philox stream per (op, shape)
    const Shape& s = GetParam();
    return op * 1000003u + uint32_t(s.B * 7919 + s.T * 104729 + s.C * 31 + s.NH);
  }
};
INSTANTIATE_TEST_SUITE_P(Shapes, CpuOps, testing::ValuesIn(kShapes), shape_name);

class CpuOpsMisc : public testing::Test {
 protected:
  std::unique_ptr<Backend> be = make_cpu_backend();
};

// ---------------------------------------------------------------------------------------------------------------
TEST_P(CpuOps, Encoder) {
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

TEST_P(CpuOps, LayerNorm) {
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
TEST_P(CpuOps, ResidualLayerNorm) {
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

// Dense layer shapes from the attention shape: qkv-like (C -> 3C + 1, odd) and, for the big shape, a product wide
// enough (OC > N) that the threaded GEMM splits columns rather than rows.
void check_matmul(Backend& be, Rng& rng, int N, int IC, int OC, bool with_bias) {
  const std::string tag = "matmul " + std::to_string(N) + "x" + std::to_string(IC) + "x" + std::to_string(OC) +
                          (with_bias ? " " : " nobias ");
  const auto x = rng.normal(size_t(N) * IC), w = rng.normal(size_t(IC) * OC), b = rng.normal(OC);
  const auto R = rng.normal(size_t(N) * OC);
  const auto dx0 = rng.normal(x.size()), dw0 = rng.normal(w.size()), db0 = rng.normal(OC);
  Floats d_x(be, x), d_w(be, w), d_b(be, b), d_R(be, R), d_out(be, size_t(N) * OC), d_dx(be, dx0), d_dw(be, dw0),
      d_db(be, db0);
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
  expect_close(tag + "dinp", d_dx.host(), plus(dx0, dx), tx);
  expect_close(tag + "dweight", d_dw.host(), plus(dw0, dw), tw);
  if (with_bias)
    expect_close(tag + "dbias", d_db.host(), plus(db0, db), tb);
  else
    EXPECT_EQ(d_db.host(), db0) << tag << "dbias was written although null was passed";
  auto loss = [&] { return dot(ref_matmul(xd, wd, with_bias ? &bd : nullptr, N, IC, OC), Rd); };
  const int fd = fd_points(double(N) * IC * OC);
  expect_fd(tag + "dinp", d_dx.host(), dx0, finite_differences(xd, loss, rng, fd), tx);
  expect_fd(tag + "dweight", d_dw.host(), dw0, finite_differences(wd, loss, rng, fd), tw);
  if (with_bias) expect_fd(tag + "dbias", d_db.host(), db0, finite_differences(bd, loss, rng, fd), tb);
}

TEST_P(CpuOps, Matmul) {
  const auto [B, T, C, NH] = GetParam();
  Rng rng(stream(3));
  check_matmul(*be, rng, B * T, C, 3 * C + 1, true);
  check_matmul(*be, rng, B * T, C, 2 * C, false);
  if (B * T >= 64) check_matmul(*be, rng, 17, 4 * C, 16 * C + 3, true);  // OC > N: column-split GEMMs
}

TEST_P(CpuOps, MatmulTransposed) {
  const auto [B, T, C, NH] = GetParam();
  const int N = B * T, V = 16 * C + 5;  // V > N for the big shape: both split directions of the threaded GEMM
  Rng rng(stream(4));
  const auto x = rng.normal(size_t(N) * C), wte = rng.normal(size_t(V) * C), R = rng.normal(size_t(N) * V);
  const auto dx0 = rng.normal(x.size()), dwte0 = rng.normal(wte.size());
  Floats d_x(*be, x), d_wte(*be, wte), d_R(*be, R), d_out(*be, size_t(N) * V), d_dx(*be, dx0), d_dwte(*be, dwte0);
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
  expect_close("lm_head dinp", d_dx.host(), plus(dx0, dx), tx);
  expect_close("lm_head dwte", d_dwte.host(), plus(dwte0, dw), tw);
  auto loss = [&] { return dot(ref_matmul(xd, wd, nullptr, N, C, V, true), Rd); };
  const int fd = fd_points(double(N) * C * V);
  expect_fd("lm_head dinp", d_dx.host(), dx0, finite_differences(xd, loss, rng, fd), tx);
  expect_fd("lm_head dwte", d_dwte.host(), dwte0, finite_differences(wd, loss, rng, fd), tw);
}

TEST_P(CpuOps, Attention) {
  const auto [B, T, C, NH] = GetParam();
  Rng rng(stream(5));
  // Scores q.k / sqrt(HS) come out ~N(0, 1.5^2): peaked enough that the max shift and masking matter.
  const auto qkv = rng.normal(size_t(B) * T * 3 * C, 1.5f), R = rng.normal(size_t(B) * T * C);
  const auto dqkv0 = rng.normal(qkv.size());
  Floats d_qkv(*be, qkv), d_R(*be, R), d_out(*be, size_t(B) * T * C), d_lse(*be, size_t(B) * NH * T),
      d_dqkv(*be, dqkv0);
  be->attention_forward(d_out.get(), d_lse.get(), d_qkv.get(), B, T, C, NH);
  Vec qd = to_double(qkv), lse;
  const Vec out = ref_attention(qd, B, T, C, NH, &lse);
  // Each output sums T probability-weighted values after HS-term score dot products.
  expect_close("attention out", d_out.host(), out, fp32_tol(T + C / NH, out));
  expect_close("attention lse", d_lse.host(), lse, fp32_tol(T + C / NH, lse));

  be->attention_backward(d_dqkv.get(), d_R.get(), d_qkv.get(), d_out.get(), d_lse.get(), B, T, C, NH);
  const Vec Rd = to_double(R);
  const Vec dqkv = ref_attention_backward(Rd, qd, B, T, C, NH);
  // dq, dk and dv differ in size, so each is checked on its own with its own RMS scale.
  const int HS = C / NH;
  auto part = [&](const auto& v, int which) {  // the q (0), k (1) or v (2) third of every (B, T) row
    std::decay_t<decltype(v)> r;
    for (size_t i = 0; i < v.size(); ++i)
      if (int(i / C) % 3 == which) r.push_back(v[i]);
    return r;
  };
  const auto got = d_dqkv.host();
  const char* names[3] = {"attention dq", "attention dk", "attention dv"};
  Tol tols[3];
  for (int w = 0; w < 3; ++w) {
    const Vec want = part(dqkv, w);
    tols[w] = fp32_tol(T + HS, want);  // dS is a T-term softmax backward; dq, dk, dv sum T terms of HS-term products
    expect_close(names[w], part(got, w), plus(part(dqkv0, w), want), tols[w]);
  }
  auto loss = [&] { return dot(ref_attention(qd, B, T, C, NH), Rd); };
  const auto points = finite_differences(qd, loss, rng, 3 * fd_points(double(B) * T * T * C));
  for (int w = 0; w < 3; ++w) {
    std::vector<FdPoint> mine;
    for (const FdPoint& p : points)
      if (int(p.index / C) % 3 == w) mine.push_back(p);
    expect_fd(names[w], got, dqkv0, mine, tols[w]);
  }
}

TEST_P(CpuOps, Gelu) {
  const auto [B, T, C, NH] = GetParam();
  const size_t n = size_t(B) * T * 4 * C;
  Rng rng(stream(6));
  const auto x = rng.normal(n, 2.5f), R = rng.normal(n), dx0 = rng.normal(n);
  Floats d_x(*be, x), d_R(*be, R), d_out(*be, n), d_dx(*be, dx0);
  be->gelu_forward(d_out.get(), d_x.get(), n);
  Vec xd = to_double(x), out(n), dx(n);
  for (size_t i = 0; i < n; ++i) out[i] = ref_gelu(xd[i]), dx[i] = double(R[i]) * ref_gelu_grad(xd[i]);
  // Elementwise: a handful of roundings plus the ~4 ulp exp, as for an 8-term sum.
  expect_close("gelu out", d_out.host(), out, fp32_tol(8, out));
  be->gelu_backward(d_dx.get(), d_x.get(), d_R.get(), n);
  expect_close("gelu dinp", d_dx.host(), plus(dx0, dx), fp32_tol(8, dx));
  const Vec Rd = to_double(R);
  auto loss = [&] {
    double s = 0.0;
    for (size_t i = 0; i < n; ++i) s += ref_gelu(xd[i]) * Rd[i];
    return s;
  };
  expect_fd("gelu dinp", d_dx.host(), dx0, finite_differences(xd, loss, rng, fd_points(double(n))), fp32_tol(8, dx));
}

TEST_P(CpuOps, CrossEntropy) {
  const auto [B, T, C, NH] = GetParam();
  const int N = B * T, V = 8 * C + 3;
  const float dloss = 1.0f / float(N);
  Rng rng(stream(7));
  const auto logits = rng.normal(size_t(N) * V, 3.0f, 10.0f);  // a large offset: the max shift must cancel it
  const auto targets = rng.tokens(N, V);
  Floats d_logits(*be, logits), d_losses(*be, N), d_dlogits(*be, logits.size());
  Ints d_targets(*be, targets);
  be->crossentropy_forward(d_losses.get(), d_logits.get(), d_targets.get(), N, V);
  Vec ld = to_double(logits);
  const Vec losses = ref_crossentropy(ld, targets, N, V);
  expect_close("crossentropy loss", d_losses.host(), losses, fp32_tol(V, losses));

  // Into a separate buffer (whose old contents must be overwritten), then in place over the logits.
  be->copy_to_device(d_dlogits.get(), rng.normal(logits.size()).data(), logits.size() * sizeof(float));
  be->crossentropy_backward(d_dlogits.get(), d_logits.get(), d_targets.get(), dloss, N, V);
  Vec dl = ref_softmax(ld, N, V);
  for (int r = 0; r < N; ++r) {
    dl[size_t(r) * V + targets[r]] -= 1.0;
    for (int j = 0; j < V; ++j) dl[size_t(r) * V + j] *= dloss;
  }
  const Tol tol = fp32_tol(V, dl);  // the softmax normaliser is a V-term sum
  const auto got = d_dlogits.host();
  expect_close("crossentropy dlogits", got, dl, tol);
  be->crossentropy_backward(d_logits.get(), d_logits.get(), d_targets.get(), dloss, N, V);
  const auto got_inplace = d_logits.host();
  EXPECT_EQ(0, std::memcmp(got.data(), got_inplace.data(), got.size() * sizeof(float)))
      << "in-place crossentropy_backward differs from the out-of-place result";
  auto loss = [&] {
    const Vec l = ref_crossentropy(ld, targets, N, V);
    double s = 0.0;
    for (double x : l) s += double(dloss) * x;
    return s;
  };
  expect_fd("crossentropy dlogits", got, std::vector<float>(got.size(), 0.0f),
            finite_differences(ld, loss, rng, fd_points(double(N) * V)), tol);
}

TEST_P(CpuOps, Softmax) {
  const auto [B, T, C, NH] = GetParam();
  const int N = B * T, V = 8 * C + 3;
  Rng rng(stream(8));
  const auto logits = rng.normal(size_t(N) * V, 3.0f);
  Floats d_logits(*be, logits), d_probs(*be, logits.size());
  for (float temperature : {1.0f, 0.7f, 2.0f}) {
    be->softmax_forward(d_probs.get(), d_logits.get(), temperature, N, V);
    const Vec p = ref_softmax(to_double(logits), N, V, temperature);
    expect_close("softmax t=" + std::to_string(temperature), d_probs.host(), p, fp32_tol(V, p));
  }
}

// Same inputs twice -> bitwise-equal outputs, for the ops with threaded reductions or GEMM splits.
TEST_P(CpuOps, DeterministicBackward) {
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

// ---------------------------------------------------------------------------------------------------------------
TEST_F(CpuOpsMisc, AllocIsAlignedZeroedAndCopies) {
  EXPECT_EQ(be->name(), "cpu");
  for (size_t bytes : {size_t(0), size_t(1), size_t(3), size_t(100), size_t(1) << 20}) {
    auto* p = static_cast<unsigned char*>(be->alloc(bytes));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << bytes;
    for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(p[i], 0) << "byte " << i << " of " << bytes;
    be->free(p);
  }
  Rng rng(100);
  const auto host = rng.normal(1001);
  Floats a(*be, host), b(*be, host.size());
  be->copy(b.get(), a.get(), host.size() * sizeof(float));
  EXPECT_EQ(b.host(), host);
  be->zero(b.get(), host.size() * sizeof(float));
  be->synchronize();
  EXPECT_EQ(b.host(), std::vector<float>(host.size(), 0.0f));
}

// Memory accounting: bytes held now and the high-water mark, each allocation counted at its 64-byte rounded size.
TEST_F(CpuOpsMisc, AllocationsAreCountedWithTheirPeak) {
  const size_t base = be->allocated_bytes();
  void* a = be->alloc(100);   // 128 bytes held
  void* b = be->alloc(1000);  // 1024
  EXPECT_EQ(be->allocated_bytes() - base, 1152u);
  EXPECT_EQ(be->peak_allocated_bytes() - base, 1152u);
  be->free(a);
  EXPECT_EQ(be->allocated_bytes() - base, 1024u);
  void* c = be->alloc(0);  // 64: a zero-byte request still holds a block
  EXPECT_EQ(be->allocated_bytes() - base, 1088u);
  EXPECT_EQ(be->peak_allocated_bytes() - base, 1152u) << "the peak fell or grew without a new high";
  be->free(b);
  be->free(c);
  be->free(nullptr);
  EXPECT_EQ(be->allocated_bytes(), base);
  EXPECT_EQ(be->peak_allocated_bytes() - base, 1152u);
  size_t used = 0, total = 0;
  EXPECT_FALSE(be->device_memory(&used, &total)) << "the CPU backend has no device to report";
}

TEST_F(CpuOpsMisc, Elementwise) {
  // The sum or product of two floats is exact in double, so the fp32 op must match the rounded double exactly.
  for (size_t n : {size_t(1), size_t(13), size_t(100003)}) {
    Rng rng(101 + uint32_t(n));
    const auto a = rng.normal(n), b = rng.normal(n);
    Floats d_a(*be, a), d_b(*be, b), d_out(*be, n);
    be->add(d_out.get(), d_a.get(), d_b.get(), n);
    be->accumulate(d_a.get(), d_b.get(), n);
    be->scale(d_b.get(), 0.375f, n);
    std::vector<float> sum(n), scaled(n);
    for (size_t i = 0; i < n; ++i) sum[i] = float(double(a[i]) + double(b[i])), scaled[i] = float(double(b[i]) * 0.375);
    EXPECT_EQ(d_out.host(), sum) << n;
    EXPECT_EQ(d_a.host(), sum) << n;
    EXPECT_EQ(d_b.host(), scaled) << n;
    be->add(d_out.get(), d_out.get(), d_out.get(), n);  // in place
    for (float& x : sum) x *= 2.0f;
    EXPECT_EQ(d_out.host(), sum) << n;
  }
}

TEST_F(CpuOpsMisc, SumSquares) {
  for (size_t n : {size_t(0), size_t(1), size_t(999), size_t(1000003)}) {
    Rng rng(200 + uint32_t(n));
    const auto x = rng.normal(n, 3.0f);
    Floats d_x(*be, x);
    double want = 0.0;
    for (float v : x) want += double(v) * double(v);
    // fp64 accumulation of n terms: error ~ sqrt(n) * 1.1e-16 relative; 1e-12 leaves room for n = 1e6.
    EXPECT_NEAR(be->sum_squares(d_x.get(), n), want, 1e-12 * want) << n;
  }
}

TEST_F(CpuOpsMisc, AdamW) {
  const float lr = 1e-2f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  for (float wd : {0.0f, 0.1f}) {
    for (size_t n : {size_t(37), size_t(100003)}) {
      Rng rng(300 + uint32_t(n) + (wd > 0 ? 1 : 0));
      auto p = rng.normal(n);
      Floats d_p(*be, p), d_m(*be, n), d_v(*be, n);
      Vec pd = to_double(p), md(n, 0.0), vd(n, 0.0);
      for (int t = 1; t <= 5; ++t) {
        const auto g = rng.normal(n, 0.1f);
        Floats d_g(*be, g);
        be->adamw_update(d_p.get(), d_g.get(), d_m.get(), d_v.get(), n, lr, beta1, beta2, eps, wd, t);
        const double b1 = beta1, b2 = beta2;  // the fp32 hyper-parameters, exactly
        for (size_t i = 0; i < n; ++i) {
          md[i] = b1 * md[i] + (1 - b1) * g[i];
          vd[i] = b2 * vd[i] + (1 - b2) * double(g[i]) * g[i];
          const double mhat = md[i] / (1 - std::pow(b1, t)), vhat = vd[i] / (1 - std::pow(b2, t));
          pd[i] -= double(lr) * (mhat / (std::sqrt(vhat) + double(eps)) + double(wd) * pd[i]);
        }
      }
      // Each step rounds p, m and v once (0.5 ulp) and the update lr * mhat / sqrt(vhat) ~ lr to a few ulp;
      // over 5 steps that is < 20 ulp of |p| ~ 1, and the update's error < 20 eps * lr.
      const std::string tag = "adamw wd=" + std::to_string(wd) + " n=" + std::to_string(n);
      expect_close(tag + " params", d_p.host(), pd, {20 * kEps * rms(pd), 20 * kEps});
      expect_close(tag + " m", d_m.host(), md, {20 * kEps * rms(md), 20 * kEps});
      expect_close(tag + " v", d_v.host(), vd, {20 * kEps * rms(vd), 20 * kEps});
    }
  }
}

// AdamW over segments in one call: each segment equals adamw_update on its slice with its own decay, bitwise, and
// the elements between segments (the arena's alignment padding) are not touched.
TEST_F(CpuOpsMisc, AdamWSegmentsEqualOneUpdatePerSegmentAndSkipGaps) {
  const size_t n = 1000;
  const std::vector<AdamWSegment> segs = {{3, 200, 0.1f}, {200, 517, 0.0f}, {530, 531, 0.1f}, {544, 990, 0.0f}};
  Rng rng(310);
  const auto p0 = rng.normal(n), g = rng.normal(n, 0.1f);
  Floats p(*be, p0), m(*be, n), v(*be, n), gb(*be, g);
  Floats q(*be, p0), qm(*be, n), qv(*be, n);
  for (int t = 1; t <= 3; ++t) {
    be->adamw_update_segments(p.get(), gb.get(), m.get(), v.get(), segs.data(), segs.size(), 1e-2f, 0.9f, 0.95f, 1e-8f,
                              t);
    for (const AdamWSegment& s : segs)
      be->adamw_update(q.get() + s.begin, gb.get() + s.begin, qm.get() + s.begin, qv.get() + s.begin, s.end - s.begin,
                       1e-2f, 0.9f, 0.95f, 1e-8f, s.weight_decay, t);
  }
  EXPECT_EQ(p.host(), q.host());
  EXPECT_EQ(m.host(), qm.host());
  EXPECT_EQ(v.host(), qv.host());
  const auto ph = p.host(), mh = m.host();
  for (size_t i : {size_t(0), size_t(2), size_t(517), size_t(529), size_t(531), size_t(543), size_t(990), n - 1}) {
    EXPECT_EQ(ph[i], p0[i]) << "gap element " << i << " was updated";
    EXPECT_EQ(mh[i], 0.0f) << "gap element " << i;
  }
  EXPECT_NE(ph[100], p0[100]);
  EXPECT_NE(ph[530], p0[530]);
}

TEST(CpuKernels, ExpApprox) {
  // The vectorised exp behind softmax, attention and GELU: within 3e-7 relative of exp over [-87, 88] (glibc's
  // expf is within 1 ulp; 3e-7 is 2.5 ulp), finite above, and e^-87 (not a denormal) below.
  double worst = 0.0;
  for (double x = -87.0; x <= 88.0; x += 1.0 / 1024 + 1e-7) {
    const float xf = float(x);
    worst = std::max(worst, std::fabs(double(cpu::exp_approx(xf)) / std::exp(double(xf)) - 1.0));
  }
  EXPECT_LT(worst, 3e-7);
  EXPECT_EQ(cpu::exp_approx(0.0f), 1.0f);
  EXPECT_TRUE(std::isfinite(cpu::exp_approx(1e30f)));
  EXPECT_NEAR(cpu::exp_approx(-INFINITY), std::exp(-87.0), 1e-40);
  EXPECT_NEAR(cpu::exp_approx(-1e30f), std::exp(-87.0), 1e-40);
}

TEST_F(CpuOpsMisc, CrossEntropyExtremeLogits) {
  // Logits 2000 apart: without the max shift exp overflows; with it the loss is exactly the gap.
  const int N = 2, V = 37;
  std::vector<float> logits(size_t(N) * V, 0.0f);
  logits[0] = 1000.0f, logits[1] = -1000.0f, logits[V + 5] = 50.0f;
  const std::vector<int32_t> targets = {1, 5};
  Floats d_logits(*be, logits), d_losses(*be, N);
  Ints d_targets(*be, targets);
  be->crossentropy_forward(d_losses.get(), d_logits.get(), d_targets.get(), N, V);
  const auto losses = d_losses.host();
  EXPECT_NEAR(losses[0], 2000.0, 2000.0 * 4 * kEps);
  EXPECT_NEAR(losses[1], 0.0, 1e-6);  // log(1 + 36 e^-50) ~ 7e-21
  be->crossentropy_backward(d_logits.get(), d_logits.get(), d_targets.get(), 1.0f, N, V);
  const auto g = d_logits.host();
  for (float x : g) ASSERT_TRUE(std::isfinite(x));
  EXPECT_NEAR(g[0], 1.0, 1e-6);
  EXPECT_NEAR(g[1], -1.0, 1e-6);
  EXPECT_NEAR(g[V + 5], 0.0, 1e-6);
}

TEST_F(CpuOpsMisc, RejectsBadArguments) {
  Floats qkv(*be, 2 * 4 * 30), out(*be, 2 * 4 * 10), lse(*be, 2 * 3 * 4), logits(*be, 2 * 5);
  EXPECT_THROW(be->attention_forward(out.get(), lse.get(), qkv.get(), 2, 4, 10, 3), Error);  // C % NH != 0
  Ints targets(*be, std::vector<int32_t>{1, 5});                                             // 5 is not < V
  Floats losses(*be, 2);
  EXPECT_THROW(be->crossentropy_forward(losses.get(), logits.get(), targets.get(), 2, 5), Error);
}

// ---------------------------------------------------------------------------------------------------------------
// bf16: rounding to nearest, ties to even, checked on bit patterns whose answers are known.
uint32_t bits_of(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof(b));
  return b;
}
float float_of(uint32_t b) {
  float x;
  std::memcpy(&x, &b, sizeof(x));
  return x;
}

TEST(Bf16, RoundsToNearestTiesToEven) {
  EXPECT_EQ(bits_of(round_to_bf16(1.0f)), 0x3f800000u);
  EXPECT_EQ(bits_of(round_to_bf16(float_of(0x3f808000u))), 0x3f800000u);  // 1 + 2^-8, a tie: to the even 1
  EXPECT_EQ(bits_of(round_to_bf16(float_of(0x3f818000u))), 0x3f820000u);  // 1 + 3 * 2^-8, a tie: to the even side
  EXPECT_EQ(bits_of(round_to_bf16(float_of(0x3f808001u))), 0x3f810000u);  // just above a tie: up
  EXPECT_EQ(bits_of(round_to_bf16(float_of(0x3f807fffu))), 0x3f800000u);  // just below: down
  EXPECT_EQ(bits_of(round_to_bf16(float_of(0xbf80ffffu))), 0xbf810000u);  // negative: by magnitude
  EXPECT_EQ(round_to_bf16(float_of(0x7f7fffffu)), INFINITY);              // FLT_MAX is past the largest bf16
  EXPECT_EQ(round_to_bf16(-INFINITY), -INFINITY);
  EXPECT_TRUE(std::isnan(round_to_bf16(float_of(0x7f800001u))));  // a NaN whose payload lies in the dropped bits
  // Any value: low 16 bits clear, within half a bf16 ulp (at most 2^-8 of the value) of the input.
  Rng rng(200);
  for (float x : rng.normal(10000, 100.0f)) {
    const float r = round_to_bf16(x);
    ASSERT_EQ(bits_of(r) & 0xffffu, 0u) << x;
    ASSERT_LE(std::fabs(double(r) - x), std::ldexp(std::fabs(double(x)), -8)) << x;
  }
}

// Matmul precision bf16: every GEMM input (activations, weights and output gradients, in all four matmul ops) is
// rounded to bf16 and the products accumulate in fp32. The results must match float64 products of the rounded inputs
// within the fp32 tolerance, and be far (> 20 fp32 tolerances) from the products of the unrounded inputs somewhere,
// which they would not be if an input were left unrounded.
TEST_F(CpuOpsMisc, MatmulBf16RoundsEveryGemmInput) {
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

// Attention under matmul precision bf16 (head sizes 16, 32, 64): the products' inputs are rounded to bf16 as the CUDA
// backend's tensor-core kernels take them. On inputs that are already bf16 values the results must match the float64
// reference within the fp32 tolerance plus twice the first-order bound for rounding P and dS (attention_bf16_bounds.h),
// and be far (> 20 fp32 tolerances) from the fp32 results somewhere, which they would not be if P and dS were left
// unrounded; unrounded q, k and v must give the same forward bits. The backward pass reads the fp32 forward's out
// and lse. A head size of 8 keeps fp32 attention: bitwise.
TEST_F(CpuOpsMisc, AttentionBf16RoundsPAndDS) {
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

// bf16 storage (TensorIn/TensorOut, core/dtype.h): a layernorm, fused residual layernorm, GELU, attention or dense
// layer output stored in bf16 holds the fp32 output rounded to nearest even, bit for bit, with the same row
// statistics (the dense layer's with its bias stored in bf16, and so the fp32 one from that bias widened); GELU from a
// bf16-stored input gives the bits it gives from those values in fp32; under matmul precision bf16 the four matmul
// ops give the same bits from bf16-stored inputs as from the fp32-stored ones they round as they read, and so does
// bf16 attention from bf16-stored qkv and out; cast_to_bf16 rounds as round_to_bf16. Storage against those rules is
// refused.
TEST_F(CpuOpsMisc, Bf16StorageChangesNoValue) {
  using Halves = test::BackendArray<BFloat16>;
  auto widened = [](const std::vector<BFloat16>& v) {
    std::vector<float> f(v.size());
    for (size_t i = 0; i < v.size(); ++i) f[i] = from_bf16(v[i]);
    return f;
  };
  const int N = 37, C = 45, OC = 67, V = 101;
  Rng rng(230);
  const auto x = rng.normal(size_t(N) * C, 2.0f), y = rng.normal(size_t(N) * C), w = rng.normal(C), b = rng.normal(C),
             h = rng.normal(size_t(N) * OC, 3.0f);
  Floats d_x(*be, x), d_y(*be, y), d_w(*be, w), d_b(*be, b), d_h(*be, h);
  {
    Floats out32(*be, x.size()), m32(*be, N), r32(*be, N), m16(*be, N), r16(*be, N), res32(*be, x.size()),
        res16(*be, x.size()), gelu32(*be, h.size());
    Halves out16(*be, x.size()), gelu16(*be, h.size());
    be->layernorm_forward(out32.get(), m32.get(), r32.get(), d_x.get(), d_w.get(), d_b.get(), N, C);
    be->layernorm_forward(out16.get(), m16.get(), r16.get(), d_x.get(), d_w.get(), d_b.get(), N, C);
    EXPECT_EQ(widened(out16.host()), test::rounded_to_bf16(out32.host())) << "layernorm out";
    EXPECT_EQ(m16.host(), m32.host()) << "layernorm mean";
    EXPECT_EQ(r16.host(), r32.host()) << "layernorm rstd";
    be->residual_layernorm_forward(res32.get(), out32.get(), m32.get(), r32.get(), d_x.get(), d_y.get(), d_w.get(),
                                   d_b.get(), N, C);
    be->residual_layernorm_forward(res16.get(), out16.get(), m16.get(), r16.get(), d_x.get(), d_y.get(), d_w.get(),
                                   d_b.get(), N, C);
    EXPECT_EQ(widened(out16.host()), test::rounded_to_bf16(out32.host())) << "residual layernorm out";
    EXPECT_EQ(res16.host(), res32.host()) << "residual layernorm residual";
    EXPECT_EQ(r16.host(), r32.host()) << "residual layernorm rstd";
    be->gelu_forward(gelu32.get(), d_h.get(), h.size());
    be->gelu_forward(gelu16.get(), d_h.get(), h.size());
    EXPECT_EQ(widened(gelu16.host()), test::rounded_to_bf16(gelu32.host())) << "gelu out";
    // GELU from a bf16-stored input, forward into either storage and backward, against the same values in fp32.
    const auto dh = rng.normal(h.size()), dx0 = rng.normal(h.size());
    Floats d_hr(*be, test::rounded_to_bf16(h)), d_dh(*be, dh), gin32(*be, dx0), gin16(*be, dx0);
    Halves h16(*be, h.size());
    be->cast_to_bf16(h16.get(), d_h.get(), h.size());
    be->gelu_forward(gelu32.get(), d_hr.get(), h.size());
    const std::vector<float> from32 = gelu32.host();
    be->gelu_forward(gelu32.get(), h16.get(), h.size());
    EXPECT_EQ(gelu32.host(), from32) << "gelu out from a bf16-stored input";
    be->gelu_forward(gelu16.get(), h16.get(), h.size());
    EXPECT_EQ(widened(gelu16.host()), test::rounded_to_bf16(from32)) << "gelu bf16 out from a bf16-stored input";
    be->gelu_backward(gin32.get(), d_hr.get(), d_dh.get(), h.size());
    be->gelu_backward(gin16.get(), h16.get(), d_dh.get(), h.size());
    EXPECT_EQ(gin16.host(), gin32.host()) << "gelu dinp from a bf16-stored input";
  }
  {  // ties either way, past the largest bf16, infinity, signed zero and a denormal, then random values
    std::vector<float> v = {1.00390625f, 1.01171875f, 3.4028235e38f, -INFINITY, -0.0f, 1e-40f};
    for (float r : x) v.push_back(r);
    Floats d_v(*be, v);
    Halves cast(*be, v.size());
    be->cast_to_bf16(cast.get(), d_v.get(), v.size());
    const std::vector<BFloat16> got = cast.host();
    for (size_t i = 0; i < v.size(); ++i) {
      ASSERT_EQ(got[i].bits, uint16_t(bits_of(round_to_bf16(v[i])) >> 16)) << "cast_to_bf16 of " << v[i];
      ASSERT_EQ(to_bf16(v[i]).bits, got[i].bits) << "to_bf16 of " << v[i];
    }
  }
  {  // attention with bf16 attention (HS 16): from bf16-stored qkv the stored output is the fp32 one rounded, with the
     // same lse, and the backward pass gives the same bits from either storage (q, k, v rounded as read, D reading O
     // rounded both ways); qkv and out stored unlike, or bf16 with fp32 attention (HS 8), are refused.
    const int B = 2, T = 21, AC = 32, NH = 2;
    const auto qkv = rng.normal(size_t(B) * T * 3 * AC), dout = rng.normal(size_t(B) * T * AC);
    Floats d_qkv(*be, qkv), d_dout(*be, dout), o32(*be, dout.size()), lse32(*be, size_t(B) * NH * T),
        lse16(*be, size_t(B) * NH * T), g32(*be, qkv.size()), g16(*be, qkv.size());
    Halves o16(*be, dout.size()), qkv16(*be, qkv.size());
    be->cast_to_bf16(qkv16.get(), d_qkv.get(), qkv.size());
    be->set_matmul_precision(MatmulPrecision::bf16);
    be->attention_forward(o32.get(), lse32.get(), d_qkv.get(), B, T, AC, NH);
    be->attention_forward(o16.get(), lse16.get(), qkv16.get(), B, T, AC, NH);
    EXPECT_EQ(widened(o16.host()), test::rounded_to_bf16(o32.host())) << "attention out";
    EXPECT_EQ(lse16.host(), lse32.host()) << "attention lse";
    be->attention_backward(g32.get(), d_dout.get(), d_qkv.get(), o32.get(), lse32.get(), B, T, AC, NH);
    be->attention_backward(g16.get(), d_dout.get(), qkv16.get(), o16.get(), lse32.get(), B, T, AC, NH);
    EXPECT_EQ(g16.host(), g32.host()) << "attention dqkv from bf16-stored qkv and out";
    EXPECT_THROW(be->attention_forward(o16.get(), lse16.get(), d_qkv.get(), B, T, AC, NH), Error);  // unlike
    EXPECT_THROW(be->attention_backward(g16.get(), d_dout.get(), qkv16.get(), o32.get(), lse32.get(), B, T, AC, NH),
                 Error);
    EXPECT_THROW(be->attention_forward(o16.get(), lse16.get(), qkv16.get(), B, T, AC, 4), Error);
    be->set_matmul_precision(MatmulPrecision::fp32);
  }
  // The matmuls at matmul precision bf16, with a bias and pre-filled gradients, once on fp32-stored inputs and once
  // on their bf16 copies (cast on the backend); the lm_head's reads x as its input and wte (V, C).
  const auto wm = rng.normal(size_t(C) * OC), bias = rng.normal(OC), wte = rng.normal(size_t(V) * C),
             g = rng.normal(size_t(N) * OC), gl = rng.normal(size_t(N) * V), dx0 = rng.normal(x.size()),
             dw0 = rng.normal(wm.size()), db0 = rng.normal(OC), dwte0 = rng.normal(wte.size());
  Floats d_wm(*be, wm), d_bias(*be, bias), d_wte(*be, wte), d_g(*be, g), d_gl(*be, gl);
  Halves x16(*be, x.size()), wm16(*be, wm.size()), wte16(*be, wte.size());
  be->cast_to_bf16(x16.get(), d_x.get(), x.size());
  be->cast_to_bf16(wm16.get(), d_wm.get(), wm.size());
  be->cast_to_bf16(wte16.get(), d_wte.get(), wte.size());
  be->set_matmul_precision(MatmulPrecision::bf16);
  std::vector<float> res[2][7];
  for (int k = 0; k < 2; ++k) {
    const TensorIn xi = k ? TensorIn(x16.get()) : TensorIn(d_x.get()), wi = k ? TensorIn(wm16.get()) : d_wm.get(),
                   ti = k ? TensorIn(wte16.get()) : d_wte.get();
    Floats out(*be, size_t(N) * OC), dx(*be, dx0), dw(*be, dw0), db(*be, db0), lout(*be, size_t(N) * V), ldx(*be, dx0),
        ldwte(*be, dwte0);
    be->matmul_forward(out.get(), xi, wi, d_bias.get(), N, C, OC);
    be->matmul_backward(dx.get(), dw.get(), db.get(), d_g.get(), xi, wi, N, C, OC);
    be->matmul_forward_transposed(lout.get(), xi, ti, N, C, V);
    be->matmul_backward_transposed(ldx.get(), ldwte.get(), d_gl.get(), xi, ti, N, C, V);
    res[k][0] = out.host(), res[k][1] = dx.host(), res[k][2] = dw.host(), res[k][3] = db.host();
    res[k][4] = lout.host(), res[k][5] = ldx.host(), res[k][6] = ldwte.host();
  }
  const char* names[7] = {"out", "dinp", "dweight", "dbias", "lm_head out", "lm_head dinp", "lm_head dwte"};
  for (int i = 0; i < 7; ++i) EXPECT_EQ(res[1][i], res[0][i]) << "matmul " << names[i] << ": bf16 storage changed it";
  // A bf16-stored output with its bias in bf16, from either storage of the inputs, and without a bias: the fp32 output
  // (from the bias widened) rounded.
  Floats out(*be, size_t(N) * OC), d_biasr(*be, test::rounded_to_bf16(bias));
  Halves out16(*be, size_t(N) * OC), bias16(*be, size_t(OC));
  be->cast_to_bf16(bias16.get(), d_bias.get(), size_t(OC));
  for (bool with_bias : {true, false}) {
    be->matmul_forward(out.get(), d_x.get(), d_wm.get(), with_bias ? TensorIn(d_biasr.get()) : nullptr, N, C, OC);
    const std::vector<float> want = test::rounded_to_bf16(out.host());
    for (int k = 0; k < 2; ++k) {
      be->matmul_forward(out16.get(), k ? TensorIn(x16.get()) : TensorIn(d_x.get()),
                         k ? TensorIn(wm16.get()) : TensorIn(d_wm.get()), with_bias ? TensorIn(bias16.get()) : nullptr,
                         N, C, OC);
      EXPECT_EQ(widened(out16.host()), want) << "matmul bf16 out, " << (k ? "bf16" : "fp32") << " inputs, "
                                             << (with_bias ? "with" : "without") << " a bias";
    }
  }
  // The lm_head's output stored in bf16 is its fp32 output rounded; its backward pass gives the same bits from dout
  // stored in bf16 as from the fp32 dout it rounds as it reads.
  {
    Floats lout(*be, size_t(N) * V), ldx(*be, dx0), ldwte(*be, dwte0);
    Halves lout16(*be, size_t(N) * V), gl16(*be, gl.size());
    be->matmul_forward_transposed(lout16.get(), x16.get(), wte16.get(), N, C, V);
    EXPECT_EQ(widened(lout16.host()), test::rounded_to_bf16(res[0][4])) << "lm_head bf16 out";
    be->cast_to_bf16(gl16.get(), d_gl.get(), gl.size());
    be->matmul_backward_transposed(ldx.get(), ldwte.get(), gl16.get(), x16.get(), wte16.get(), N, C, V);
    EXPECT_EQ(ldx.host(), res[0][5]) << "lm_head dinp from a bf16-stored dout";
    EXPECT_EQ(ldwte.host(), res[0][6]) << "lm_head dwte from a bf16-stored dout";
  }
  EXPECT_THROW(be->matmul_forward(out.get(), x16.get(), d_wm.get(), nullptr, N, C, OC), Error);         // stored unlike
  EXPECT_THROW(be->matmul_forward(out16.get(), x16.get(), wm16.get(), d_bias.get(), N, C, OC), Error);  // bias unlike
  EXPECT_THROW(be->matmul_forward(out.get(), x16.get(), wm16.get(), bias16.get(), N, C, OC), Error);
  be->set_matmul_precision(MatmulPrecision::fp32);
  EXPECT_THROW(be->matmul_forward(out.get(), x16.get(), wm16.get(), nullptr, N, C, OC), Error);  // bf16 under fp32
  EXPECT_THROW(be->matmul_forward(out16.get(), d_x.get(), d_wm.get(), bias16.get(), N, C, OC), Error);
  {
    Halves lout16(*be, size_t(N) * V), gl16(*be, gl.size());
    Floats ldx(*be, dx0), ldwte(*be, dwte0);
    EXPECT_THROW(be->matmul_forward_transposed(lout16.get(), d_x.get(), d_wte.get(), N, C, V), Error);
    EXPECT_THROW(be->matmul_backward_transposed(ldx.get(), ldwte.get(), gl16.get(), d_x.get(), d_wte.get(), N, C, V),
                 Error);
  }
  // The cross-entropy on logits stored in bf16: the losses are those of the same values in fp32, and dlogits (into
  // either storage, in place over the bf16 logits too) is the fp32 one rounded, bit for bit.
  {
    const int R = 13, K = 211;
    const auto logits = test::rounded_to_bf16(rng.normal(size_t(R) * K, 4.0f));
    std::vector<int32_t> tg(R);
    for (int r = 0; r < R; ++r) tg[size_t(r)] = int32_t((r * 37) % K);
    test::BackendArray<int32_t> d_tg(*be, tg);
    Floats d_lg(*be, logits), loss32(*be, R), loss16(*be, R), dl32(*be, logits.size()), dl32b(*be, logits.size());
    Halves lg16(*be, logits.size()), dl16(*be, logits.size());
    be->cast_to_bf16(lg16.get(), d_lg.get(), logits.size());
    be->crossentropy_forward(loss32.get(), d_lg.get(), d_tg.get(), R, K);
    be->crossentropy_forward(loss16.get(), lg16.get(), d_tg.get(), R, K);
    EXPECT_EQ(loss16.host(), loss32.host()) << "cross-entropy from bf16-stored logits";
    be->crossentropy_backward(dl32.get(), d_lg.get(), d_tg.get(), 0.25f, R, K);
    be->crossentropy_backward(dl32b.get(), lg16.get(), d_tg.get(), 0.25f, R, K);
    EXPECT_EQ(dl32b.host(), dl32.host()) << "dlogits from bf16-stored logits";
    be->crossentropy_backward(dl16.get(), d_lg.get(), d_tg.get(), 0.25f, R, K);
    const std::vector<float> want = test::rounded_to_bf16(dl32.host());
    EXPECT_EQ(widened(dl16.host()), want) << "dlogits stored in bf16";
    be->crossentropy_backward(lg16.get(), lg16.get(), d_tg.get(), 0.25f, R, K);
    EXPECT_EQ(widened(lg16.host()), want) << "dlogits stored in bf16 over the logits";
  }
}

}  // namespace
}  // namespace ember
