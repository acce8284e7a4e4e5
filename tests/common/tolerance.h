// Tolerances for comparing fp32 results with a reference (float64 loops, or the CPU backend): the fp32 rule
// atol + rtol |ref| with its justification, the element-wise check that applies it, and the bitwise check.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace ember::test {

constexpr double kFp32Eps = 1.1920928955078125e-7;  // fp32 machine epsilon, 2^-23

// |got - ref| <= atol + rtol |ref|, element by element.
struct Tol {
  double atol, rtol;
};

// Root mean square, in double whatever the element type.
template <typename T>
double rms(const std::vector<T>& v) {
  double s = 0.0;
  for (const T& x : v) s += double(x) * double(x);
  return v.empty() ? 0.0 : std::sqrt(s / double(v.size()));
}

// A result built from K-term fp32 sums is off by a random walk of K roundings: about sqrt(K) eps times the size of
// the partial sums, which is the typical size (RMS) of the result itself. Two fp32 implementations with different
// summation orders (cuBLAS tiles and warp trees against OpenBLAS and OpenMP splits) differ by up to ~2 sqrt(K) eps
// rms. We allow 8 sqrt(K) eps, for the largest of many elements and for the few extra roundings of each op (scales,
// the ~4 ulp exp of the CPU's softmax ops):
//   atol = 8 sqrt(K) eps rms(ref),  rtol = 8 sqrt(K) eps.
template <typename T>
Tol fp32_tol(double K, const std::vector<T>& ref) {
  const double r = 8.0 * std::sqrt(K) * kFp32Eps;
  return {r * rms(ref), r};
}

// Compares every element and reports the worst one; EMBER_TEST_VERBOSE=1 prints the worst error/tolerance ratio.
// `extra`, where given, adds an allowance of its own to each element's.
template <typename Got, typename Want>
void expect_close(const std::string& what, const std::vector<Got>& got, const std::vector<Want>& want, Tol tol,
                  const std::vector<float>* extra = nullptr) {
  ASSERT_EQ(got.size(), want.size()) << what;
  if (extra) {
    ASSERT_EQ(extra->size(), want.size()) << what;
  }
  size_t bad = 0, worst = 0;
  double worst_ratio = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double(got[i]) - double(want[i])),
                 allowed = tol.atol + tol.rtol * std::fabs(double(want[i])) + (extra ? double((*extra)[i]) : 0.0);
    const double ratio = allowed > 0 ? err / allowed : (err > 0 ? INFINITY : 0.0);
    if (!(ratio <= 1.0)) ++bad;
    if (!(ratio <= worst_ratio)) worst_ratio = ratio, worst = i;
  }
  if (std::getenv("EMBER_TEST_VERBOSE")) std::printf("  %-44s worst err/tol = %.3g\n", what.c_str(), worst_ratio);
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements out of tolerance; worst at " << worst
                     << ": got " << got[worst] << ", want " << want[worst] << " (atol " << tol.atol << ", rtol "
                     << tol.rtol << ")";
}

// Bit-for-bit equality of two runs (or of two backends that must agree exactly).
template <typename T>
void expect_bitwise(const std::string& what, const std::vector<T>& a, const std::vector<T>& b) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(T)), 0) << what << ": two runs differ";
}

}  // namespace ember::test
