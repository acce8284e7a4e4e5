// Float64 reference ops: the plain definitions of the ops of backend.h, no tricks, for the op tests.
// They are slow on purpose; the finite-difference checks keep their inner loops contiguous (ref_matmul).
#include "reference_ops.h"

#include <algorithm>
#include <cmath>

namespace ember::test {

Vec ref_encoder(const std::vector<int32_t>& inp, const Vec& wte, const Vec& wpe, int B, int T, int C) {
  Vec out(size_t(B) * T * C);
  for (int bt = 0; bt < B * T; ++bt)
    for (int c = 0; c < C; ++c) out[size_t(bt) * C + c] = wte[size_t(inp[bt]) * C + c] + wpe[size_t(bt % T) * C + c];
  return out;
}

Vec ref_layernorm(const Vec& x, const Vec& w, const Vec& b, int N, int C, Vec* mean, Vec* rstd) {
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
Vec ref_matmul(const Vec& inp, const Vec& w, const Vec* bias, int N, int IC, int OC, bool w_transposed) {
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
namespace {

// The rotation of one head's pairs (d, d + HS/2) at position t by t * theta^(-2d/HS), in double; `back` applies the
// transpose (a gradient's way back). Nothing when theta is 0.
void rotate(double* x, int t, int HS, double theta, bool back) {
  if (theta == 0.0) return;
  const int half = HS / 2;
  for (int d = 0; d < half; ++d) {
    const double angle = t * std::pow(theta, -2.0 * d / HS), c = std::cos(angle), s = (back ? -1 : 1) * std::sin(angle);
    const double a = x[d], b = x[d + half];
    x[d] = a * c - b * s, x[d + half] = b * c + a * s;
  }
}

// qkv with every head's q and k rotated by their positions (a copy; the same values without rotation).
Vec rotated_qkv(const Vec& qkv, int B, int T, int C, int NH, double theta) {
  Vec r = qkv;
  const int HS = C / NH;
  for (int bt = 0; bt < B * T; ++bt)
    for (int part = 0; part < 2; ++part)
      for (int h = 0; h < NH; ++h) rotate(&r[size_t(bt) * 3 * C + part * C + h * HS], bt % T, HS, theta, false);
  return r;
}

// The keys query i sees and the bias of key j's score.
int first_key(const AttentionLayer& layer, int i) { return layer.window > 0 ? std::max(0, i - layer.window) : 0; }
double alibi(const AttentionLayer& layer, int i, int j) { return -double(layer.alibi_slope) * (i - j); }

}  // namespace

Vec ref_attention(const Vec& qkv_in, int B, int T, int C, int NH, Vec* lse, const AttentionLayer& layer) {
  const int HS = C / NH;
  const double scale = 1.0 / std::sqrt(double(HS));
  const Vec qkv = rotated_qkv(qkv_in, B, T, C, NH, layer.rope_theta);
  Vec out(size_t(B) * T * C, 0.0), p(T);
  if (lse) lse->assign(size_t(B) * NH * T, 0.0);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int i = 0; i < T; ++i) {
        const double* q = &qkv[(size_t(b) * T + i) * 3 * C + h * HS];
        const int j0 = first_key(layer, i);
        double m = -INFINITY, sum = 0.0;
        for (int j = j0; j <= i; ++j) {
          const double* k = &qkv[(size_t(b) * T + j) * 3 * C + C + h * HS];
          double s = 0.0;
          for (int d = 0; d < HS; ++d) s += q[d] * k[d];
          p[j] = s * scale + alibi(layer, i, j), m = std::max(m, p[j]);
        }
        for (int j = j0; j <= i; ++j) p[j] = std::exp(p[j] - m), sum += p[j];
        for (int j = j0; j <= i; ++j) {
          const double* v = &qkv[(size_t(b) * T + j) * 3 * C + 2 * C + h * HS];
          for (int d = 0; d < HS; ++d) out[(size_t(b) * T + i) * C + h * HS + d] += p[j] / sum * v[d];
        }
        if (lse) (*lse)[(size_t(b) * NH + h) * T + i] = m + std::log(sum);
      }
  return out;
}

Vec ref_attention_backward(const Vec& dout, const Vec& qkv_in, int B, int T, int C, int NH,
                           const AttentionLayer& layer) {
  const int HS = C / NH;
  const double scale = 1.0 / std::sqrt(double(HS));
  const Vec qkv = rotated_qkv(qkv_in, B, T, C, NH, layer.rope_theta);
  Vec dqkv(qkv.size(), 0.0), P(size_t(T) * T), dS(size_t(T) * T);
  auto at = [&](const Vec& a, int b, int t, int part, int h) {
    return &a[(size_t(b) * T + t) * 3 * C + part * C + h * HS];
  };
  auto atm = [&](Vec& a, int b, int t, int part, int h) { return &a[(size_t(b) * T + t) * 3 * C + part * C + h * HS]; };
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      for (int i = 0; i < T; ++i) {  // probabilities
        double m = -INFINITY, sum = 0.0;
        for (int j = first_key(layer, i); j <= i; ++j) {
          double s = 0.0;
          for (int d = 0; d < HS; ++d) s += at(qkv, b, i, 0, h)[d] * at(qkv, b, j, 1, h)[d];
          P[size_t(i) * T + j] = s * scale + alibi(layer, i, j), m = std::max(m, P[size_t(i) * T + j]);
        }
        for (int j = first_key(layer, i); j <= i; ++j)
          sum += (P[size_t(i) * T + j] = std::exp(P[size_t(i) * T + j] - m));
        for (int j = first_key(layer, i); j <= i; ++j) P[size_t(i) * T + j] /= sum;
      }
      for (int i = 0; i < T; ++i) {  // dP, softmax backward, then dV
        const double* dO = &dout[(size_t(b) * T + i) * C + h * HS];
        double D = 0.0;
        for (int j = first_key(layer, i); j <= i; ++j) {
          double dp = 0.0;
          for (int d = 0; d < HS; ++d) dp += dO[d] * at(qkv, b, j, 2, h)[d];
          dS[size_t(i) * T + j] = dp, D += P[size_t(i) * T + j] * dp;
          for (int d = 0; d < HS; ++d) atm(dqkv, b, j, 2, h)[d] += P[size_t(i) * T + j] * dO[d];
        }
        for (int j = first_key(layer, i); j <= i; ++j)
          dS[size_t(i) * T + j] = P[size_t(i) * T + j] * (dS[size_t(i) * T + j] - D);
      }
      for (int i = 0; i < T; ++i)
        for (int j = first_key(layer, i); j <= i; ++j)
          for (int d = 0; d < HS; ++d) {
            atm(dqkv, b, i, 0, h)[d] += scale * dS[size_t(i) * T + j] * at(qkv, b, j, 1, h)[d];
            atm(dqkv, b, j, 1, h)[d] += scale * dS[size_t(i) * T + j] * at(qkv, b, i, 0, h)[d];
          }
      for (int t = 0; t < T; ++t)  // through the rotation: the gradients of the unrotated q and k
        for (int part = 0; part < 2; ++part) rotate(atm(dqkv, b, t, part, h), t, HS, layer.rope_theta, true);
    }
  return dqkv;
}

Vec ref_encoder_positions(const std::vector<int32_t>& inp, const std::vector<int32_t>& pos, const Vec& wte,
                          const Vec& wpe, int N, int C) {
  Vec out(size_t(N) * C);
  for (int i = 0; i < N; ++i)
    for (int c = 0; c < C; ++c) out[size_t(i) * C + c] = wte[size_t(inp[i]) * C + c] + wpe[size_t(pos[i]) * C + c];
  return out;
}

void ref_kv_cache_write(Vec& k_cache, Vec& v_cache, const Vec& qkv, const std::vector<int32_t>& slot,
                        const std::vector<int32_t>& pos, int N, int C, int max_T) {
  for (int i = 0; i < N; ++i) {
    const size_t row = (size_t(slot[i]) * max_T + pos[i]) * C;
    for (int c = 0; c < C; ++c) {
      k_cache[row + c] = qkv[size_t(i) * 3 * C + C + c];
      v_cache[row + c] = qkv[size_t(i) * 3 * C + 2 * C + c];
    }
  }
}

Vec ref_attention_kv(const Vec& qkv, const Vec& k_cache, const Vec& v_cache, const std::vector<int32_t>& slot,
                     const std::vector<int32_t>& pos, int N, int C, int NH, int max_T) {
  const int HS = C / NH;
  const double scale = 1.0 / std::sqrt(double(HS));
  Vec out(size_t(N) * C, 0.0), p(static_cast<size_t>(max_T));
  for (int i = 0; i < N; ++i)
    for (int h = 0; h < NH; ++h) {
      const double* q = &qkv[size_t(i) * 3 * C + h * HS];
      const size_t base = size_t(slot[i]) * max_T * C + h * HS;
      double m = -INFINITY, sum = 0.0;
      for (int j = 0; j <= pos[i]; ++j) {
        double s = 0.0;
        for (int d = 0; d < HS; ++d) s += q[d] * k_cache[base + size_t(j) * C + d];
        p[j] = s * scale, m = std::max(m, p[j]);
      }
      for (int j = 0; j <= pos[i]; ++j) p[j] = std::exp(p[j] - m), sum += p[j];
      for (int j = 0; j <= pos[i]; ++j)
        for (int d = 0; d < HS; ++d) out[size_t(i) * C + h * HS + d] += p[j] / sum * v_cache[base + size_t(j) * C + d];
    }
  return out;
}

namespace {
constexpr double kGeluK = 0.7978845608028654, kGeluC = 0.044715;  // sqrt(2/pi) and the cubic coefficient
}  // namespace

double ref_gelu(double x) { return 0.5 * x * (1.0 + std::tanh(kGeluK * (x + kGeluC * x * x * x))); }
double ref_gelu_grad(double x) {
  const double th = std::tanh(kGeluK * (x + kGeluC * x * x * x));
  return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * kGeluK * (1.0 + 3.0 * kGeluC * x * x);
}

// Per-row softmax of x / temperature.
Vec ref_softmax(const Vec& x, int N, int V, double temperature) {
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

}  // namespace ember::test
