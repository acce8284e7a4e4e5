// What the CUDA op tests (test_cuda_ops_*.cpp) share: seeded inputs, the fixture holding the CPU backend (the
// reference) and the backend under test, bf16 helpers and the attention shapes. The tolerances live in tests/common.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#ifdef EMBER_TEST_KERNEL_MODEL
#include "kernel_model_backend.h"
#endif
#include "backend/backend.h"
#include "backend/device.h"
#include "bf16_vectors.h"
#include "core/dtype.h"
#include "test_rng.h"
#include "test_support.h"
#include "tolerance.h"

namespace ember {

using test::expect_bitwise;
using test::expect_close;
using test::fp32_tol;
using test::rms;
using test::Tol;

using Floats = std::vector<float>;
using Ints = std::vector<int32_t>;
constexpr uint64_t kSeed = 20240612;
constexpr double kEps = test::kFp32Eps;

struct Rng : test::Rng {
  explicit Rng(uint32_t stream) : test::Rng(kSeed, stream) {}
};

using FBuf = test::BackendArray<float>;
using IBuf = test::BackendArray<int32_t>;

// A prefill for an output the op must write whole (the activation gradients, backend.h): NaN, so that an element it
// reads or leaves shows in the comparison.
inline Floats nans(size_t n) { return Floats(n, std::nanf("")); }

// Built as test_cuda_ops_model (EMBER_TEST_KERNEL_MODEL), `gpu` is the kernel-model backend instead: the CUDA
// backend's kernels and launchers run on the CPU under kernel_model.h, the GEMMs on a model of cuBLAS without
// cuBLASLt. The tests of what only a device has (its name and memory) are left out of that build.
class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
#ifdef EMBER_TEST_KERNEL_MODEL
    gpu = make_kernel_model_backend();
#else
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    gpu = make_cuda_backend(0);
#endif
    cpu = make_cpu_backend();
  }
  std::unique_ptr<Backend> cpu, gpu;
};

// bf16 storage: values stored in bf16, compared widened. Two backends whose fp32 results agree within a tolerance
// store values that agree within it plus one bf16 ulp (2^-7 of the value) where the two fall either side of a
// rounding midpoint, which is rare: at most 1% of the stored values may differ at all.
using Halves = std::vector<BFloat16>;
using HBuf = test::BackendArray<BFloat16>;
using test::widened;
inline void expect_close_bf16(const std::string& what, const Halves& got, const Halves& want, Tol tol) {
  tol.rtol += std::ldexp(1.0, -7);
  expect_close(what, widened(got), widened(want), tol);
  size_t differ = 0;
  for (size_t i = 0; i < got.size(); ++i) differ += got[i].bits != want[i].bits;
  EXPECT_LE(differ, got.size() / 100) << what << ": " << differ << " of " << got.size() << " stored values differ";
}

// A dense weight's quantized copies (int8 or fp8) on one backend: the forward output with weight w; after w is
// overwritten in place by w2 without Backend::weights_changed (the stale copy's output); after it; and, with
// `unscaled`, after fp8's scaling is turned off (and on again). The copy bytes are read while the copies exist.
struct WeightCopyRuns {
  Floats before, stale, after, unscaled;
  size_t copy_bytes = 0;
};
inline WeightCopyRuns weight_copy_runs(Backend& be, const Floats& x, const Floats& w, const Floats& w2, int N, int IC,
                                       int OC, bool unscaled) {
  WeightCopyRuns r;
  FBuf xi(be, x), wi(be, w), o(be, Floats(size_t(N) * OC));
  auto forward = [&] {
    be.matmul_forward(o.get(), xi.get(), wi.get(), nullptr, N, IC, OC);
    return o.host();
  };
  r.before = forward();
  be.copy_to_device(wi.get(), w2.data(), w2.size() * sizeof(float));
  r.stale = forward();
  r.copy_bytes = be.quantized_weight_copy_bytes();
  be.weights_changed();
  r.after = forward();
  if (unscaled) {
    be.set_fp8_scaling(false);
    be.weights_changed();
    r.unscaled = forward();
    be.set_fp8_scaling(true);
  }
  be.weights_changed();
  return r;
}

// Attention shapes (B, T, C, NH), named B<B>_T<T>_C<C>_NH<NH>.
struct AttnShape {
  int B, T, C, NH;
};
inline std::string attn_shape_name(const ::testing::TestParamInfo<AttnShape>& info) {
  const AttnShape& s = info.param;
  return "B" + std::to_string(s.B) + "_T" + std::to_string(s.T) + "_C" + std::to_string(s.C) + "_NH" +
         std::to_string(s.NH);
}

}  // namespace ember
