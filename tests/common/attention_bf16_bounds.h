// Error bounds for attention whose products take bf16 inputs (the CUDA backend's tensor-core kernels), against fp32
// attention on the same bf16-rounded q, k, v and dout. The kernels round P (before P V and P^T dO) and dS (before
// dS K and dS^T Q) to bf16, a relative error of at most 2^-8 per term (the unit roundoff of an 8-bit significand),
// so to first order each element may differ by at most
//   out_i:  2^-8 sum_j P_ij |v_j|              dV_j: 2^-8 sum_i P_ij |dO_i|
//   dQ_i:   2^-8 scale sum_j |dS_ij| |k_j|     dK_j: 2^-8 scale sum_i |dS_ij| |q_i|
// (componentwise in the head dim), computed here in double from the inputs. D_i = dO_i . O_i reads O rounded to bf16
// (so that O may be stored so), off by at most dD_i = 2^-8 sum_d |dO_id O_id|, which moves dS_ij by P_ij dD_i:
//   dQ_i += scale dD_i sum_j P_ij |k_j|      dK_j += scale sum_i P_ij dD_i |q_i|
// A wrong fragment, mask or tile boundary moves elements by O(|v|), far beyond these.
// With a layer's schedule (backend/attention_layer.h) the sums run over each query's window, the scores carry the
// ALiBi bias, q and k are the rotated ones under rope, and the bounds of dQ and dK, which hold for the gradients of
// the rotated rows, are carried back through the rotation: |c| b_d + |s| b_(d + HS/2) and the like.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "backend/attention_layer.h"
#include "bf16_vectors.h"  // rounded_to_bf16
#include "core/dtype.h"
#include "core/rope.h"

namespace ember::test {

struct AttnBounds {
  std::vector<float> out, dqkv;  // (B, T, C) and (B, T, 3C)
};

inline AttnBounds attention_bf16_bounds(const std::vector<float>& qkv,   // (B, T, 3C), bf16 values
                                        const std::vector<float>& dout,  // (B, T, C), bf16 values
                                        int B, int T, int C, int NH, const AttentionLayer& layer = {}) {
  const int HS = C / NH, C3 = 3 * C, half = HS / 2;
  const double scale = 1.0 / std::sqrt(double(HS)), u = std::ldexp(1.0, -8);
  AttnBounds bd{std::vector<float>(size_t(B) * T * C), std::vector<float>(size_t(B) * T * C3)};
  std::vector<double> P(size_t(T) * T), dS(size_t(T) * T), o(HS), dD(T), qr(size_t(T) * HS), kr(size_t(T) * HS);
  std::vector<float> cos(size_t(T) * half), sin(size_t(T) * half);
  if (layer.rope_theta != 0.0f) rope_table(layer.rope_theta, half, 0, T, cos.data(), sin.data());
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      auto v = [&](int t, int d) { return double(qkv[(size_t(b) * T + t) * C3 + 2 * C + h * HS + d]); };
      auto dO = [&](int t, int d) { return double(dout[(size_t(b) * T + t) * C + h * HS + d]); };
      for (int t = 0; t < T; ++t)  // q and k as the products read them
        for (int d = 0; d < HS; ++d) {
          const size_t at = (size_t(b) * T + t) * C3 + h * HS;
          double* r[2] = {&qr[size_t(t) * HS], &kr[size_t(t) * HS]};
          for (int w = 0; w < 2; ++w) {
            const float* x = &qkv[at + size_t(w) * C];
            if (layer.rope_theta == 0.0f) {
              r[w][d] = x[d];
            } else {
              const int e = d % half;
              const double c = cos[size_t(t) * half + e], sn = sin[size_t(t) * half + e];
              r[w][d] = d < half ? x[d] * c - x[d + half] * sn : x[d] * c + x[e] * sn;
            }
          }
        }
      auto q = [&](int t, int d) { return qr[size_t(t) * HS + d]; };
      auto k = [&](int t, int d) { return kr[size_t(t) * HS + d]; };
      auto seen = [&](int i, int j) { return j <= i && j >= layer.first_key(i); };
      for (int i = 0; i < T; ++i) {
        double mx = -INFINITY, sum = 0.0;
        for (int j = 0; j <= i; ++j) {
          double s = 0.0;
          for (int d = 0; d < HS; ++d) s += q(i, d) * k(j, d);
          P[size_t(i) * T + j] = seen(i, j) ? s * scale - double(layer.alibi_slope) * (i - j) : -INFINITY;
          mx = std::max(mx, P[size_t(i) * T + j]);
        }
        for (int j = 0; j <= i; ++j) sum += (P[size_t(i) * T + j] = std::exp(P[size_t(i) * T + j] - mx));
        for (int j = 0; j <= i; ++j) P[size_t(i) * T + j] /= sum;
        double D = 0.0;
        dD[i] = 0.0;
        for (int d = 0; d < HS; ++d) {
          o[d] = 0.0;
          double ob = 0.0;
          for (int j = 0; j <= i; ++j) {
            o[d] += P[size_t(i) * T + j] * v(j, d);
            ob += P[size_t(i) * T + j] * std::fabs(v(j, d));
          }
          D += dO(i, d) * o[d];
          dD[i] += u * std::fabs(dO(i, d) * o[d]);
          bd.out[(size_t(b) * T + i) * C + h * HS + d] = float(u * ob);
        }
        for (int j = 0; j <= i; ++j) {
          double dp = 0.0;
          for (int d = 0; d < HS; ++d) dp += dO(i, d) * v(j, d);
          dS[size_t(i) * T + j] = P[size_t(i) * T + j] * (dp - D);
        }
      }
      for (int t = 0; t < T; ++t)
        for (int d = 0; d < HS; ++d) {
          double bq = 0.0, bk = 0.0, bv = 0.0;
          for (int j = 0; j <= t; ++j)
            bq += (std::fabs(dS[size_t(t) * T + j]) + P[size_t(t) * T + j] * dD[t] / u) * std::fabs(k(j, d));
          for (int i = t; i < T; ++i) {
            bk += (std::fabs(dS[size_t(i) * T + t]) + P[size_t(i) * T + t] * dD[i] / u) * std::fabs(q(i, d));
            bv += P[size_t(i) * T + t] * std::fabs(dO(i, d));
          }
          float* row = bd.dqkv.data() + (size_t(b) * T + t) * C3 + h * HS + d;
          row[0] = float(u * scale * bq), row[C] = float(u * scale * bk), row[2 * C] = float(u * bv);
        }
      if (layer.rope_theta != 0.0f)  // dQ and dK carried back through the rotation
        for (int t = 0; t < T; ++t)
          for (int w = 0; w < 2; ++w) {
            float* row = bd.dqkv.data() + (size_t(b) * T + t) * C3 + h * HS + size_t(w) * C;
            for (int d = 0; d < half; ++d) {
              const float c = std::fabs(cos[size_t(t) * half + d]), sn = std::fabs(sin[size_t(t) * half + d]);
              const float lo = row[d], hi = row[d + half];
              row[d] = c * lo + sn * hi, row[d + half] = c * hi + sn * lo;
            }
          }
    }
  return bd;
}

}  // namespace ember::test
