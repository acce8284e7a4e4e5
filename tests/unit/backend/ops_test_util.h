// What the CPU op tests (test_ops_*.cpp) share: their seeded inputs, central finite differences of a scalar loss,
// the shapes they sweep and their fixtures. The float64 references and the tolerances live in tests/common.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "reference_ops.h"
#include "test_rng.h"
#include "test_support.h"
#include "tolerance.h"

namespace ember {

using test::expect_bitwise;
using test::expect_close;
using test::fp32_tol;
using test::ref_attention;
using test::ref_attention_backward;
using test::ref_crossentropy;
using test::ref_encoder;
using test::ref_gelu;
using test::ref_gelu_grad;
using test::ref_layernorm;
using test::ref_layernorm_backward;
using test::ref_matmul;
using test::ref_softmax;
using test::rms;
using test::Tol;
using test::Vec;

constexpr uint64_t kSeed = 20240611;
constexpr double kEps = test::kFp32Eps;

// Inputs and backend buffers.
struct Rng : test::Rng {
  explicit Rng(uint32_t stream) : test::Rng(kSeed, stream) {}
};

inline Vec to_double(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }
inline Vec plus(const std::vector<float>& a, const Vec& b) {
  Vec r(b.size());
  for (size_t i = 0; i < b.size(); ++i) r[i] = double(a[i]) + b[i];
  return r;
}

using Floats = test::BackendArray<float>;
using Ints = test::BackendArray<int32_t>;

// ---------------------------------------------------------------------------------------------------------------
// Central finite differences in double of a scalar loss at `count` coordinates of x drawn from rng:
// dL/dx_i ~ (L(x + h e_i) - L(x - h e_i)) / 2h. With h = 1e-4 the truncation error (h^2 |L'''| / 6) is ~1e-9 and
// the cancellation error (1e-16 |L| / h) ~1e-11, both far below fp32 noise, so they reuse the fp32 tolerances.
struct FdPoint {
  size_t index;
  double grad;
};
inline std::vector<FdPoint> finite_differences(Vec& x, const std::function<double()>& loss, Rng& rng, int count) {
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
inline double dot(const Vec& a, const Vec& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Checks the backend gradient (got = prefill + dL/dx) against finite differences at the sampled coordinates.
inline void expect_fd(const std::string& what, const std::vector<float>& got, const std::vector<float>& prefill,
                      const std::vector<FdPoint>& points, Tol tol) {
  std::vector<float> g;
  Vec want;
  for (const FdPoint& p : points) g.push_back(got[p.index]), want.push_back(double(prefill[p.index]) + p.grad);
  expect_close(what + " vs finite differences", g, want, tol);
}

// The same for a gradient the op writes (=) rather than adds to.
inline void expect_fd(const std::string& what, const std::vector<float>& got, const std::vector<FdPoint>& points,
                      Tol tol) {
  expect_fd(what, got, std::vector<float>(got.size(), 0.0f), points, tol);
}
// The q (0), k (1) or v (2) third of every (B, T) row of a (B, T, 3C) tensor.
template <class V>
V qkv_part(const V& v, int C, int which) {
  V r;
  for (size_t i = 0; i < v.size(); ++i)
    if (int(i / C) % 3 == which) r.push_back(v[i]);
  return r;
}

// The attention tests' check of a backward pass: dq, dk and dv of `got` against the reference `want`, each with its own
// RMS scale (fp32_tol(K, part)), and against central differences of `loss` (a function of x) at `count` coordinates
// drawn from rng, each part with its tolerance.
inline void expect_dqkv(const std::string& prefix, const std::vector<float>& got, const Vec& want, Vec& x,
                        const std::function<double()>& loss, Rng& rng, int C, double K, int count) {
  const char* names[3] = {"dq", "dk", "dv"};
  Tol tols[3];
  for (int w = 0; w < 3; ++w) {
    const Vec part = qkv_part(want, C, w);
    tols[w] = fp32_tol(K, part);
    expect_close(prefix + names[w], qkv_part(got, C, w), part, tols[w]);
  }
  const std::vector<FdPoint> points = finite_differences(x, loss, rng, count);
  for (int w = 0; w < 3; ++w) {
    std::vector<FdPoint> mine;
    for (const FdPoint& p : points)
      if (int(p.index / C) % 3 == w) mine.push_back(p);
    expect_fd(prefix + names[w], got, mine, tols[w]);
  }
}

// A prefill for an output the op must write whole: NaN, so that any element it reads or leaves shows in the result.
inline std::vector<float> nans(size_t n) { return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()); }

// Coordinates per gradient tensor: up to 40, fewer where one reference forward is expensive, so that each
// tensor's check costs about 1e8 multiply-adds (two forwards per coordinate).
inline int fd_points(double forward_cost) { return int(std::clamp(5e7 / forward_cost, 8.0, 40.0)); }

// ---------------------------------------------------------------------------------------------------------------
// Shapes: odd sizes (T not a multiple of 4 or 8, C not a multiple of 8) and bigger ones for the threaded paths.
struct Shape {
  int B, T, C, NH;
};
inline std::string shape_name(const testing::TestParamInfo<Shape>& info) {
  const Shape& s = info.param;
  return "B" + std::to_string(s.B) + "_T" + std::to_string(s.T) + "_C" + std::to_string(s.C) + "_NH" +
         std::to_string(s.NH);
}
// T = 150 spans three 64-query attention blocks, the last one partial.
inline const Shape kShapes[] = {{2, 7, 12, 3}, {1, 33, 20, 4}, {4, 64, 64, 4}, {2, 150, 48, 3}};

// The fixture of every test_ops_*.cpp: each names its own suite after itself (test_ops_matmul.cpp: OpsMatmul), derived
// from this, and instantiates it over kShapes where it has TEST_Ps; its TEST_Fs use the backend only.
class CpuOpsTest : public testing::TestWithParam<Shape> {
 protected:
  std::unique_ptr<Backend> be = make_cpu_backend();
  uint32_t stream(uint32_t op) const {  // a distinct Philox stream per (op, shape)
    const Shape& s = GetParam();
    return op * 1000003u + uint32_t(s.B * 7919 + s.T * 104729 + s.C * 31 + s.NH);
  }
};

}  // namespace ember
