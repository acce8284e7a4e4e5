// CUDA backend ops against the CPU backend (the reference) on random inputs from a seeded Philox stream, with odd
// shapes, accumulation into pre-filled gradients, determinism, and one whole-model loss and gradient check.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "test_support.h"
#ifdef EMBER_TEST_KERNEL_MODEL
#include "kernel_model_backend.h"
#endif
#include "attention_bf16_bounds.h"
#include "backend/backend.h"
#include "backend/device.h"
#include "core/dtype.h"
#include "core/philox.h"
#include "model/gpt.h"
#include "train/adamw.h"
#include "train_steps.h"

namespace ember {
namespace {

using Floats = std::vector<float>;
using Ints = std::vector<int32_t>;
constexpr uint64_t kSeed = 20240612;
constexpr double kEps = 1.1920928955078125e-7;  // fp32 machine epsilon, 2^-23

// ---------------------------------------------------------------------------------------------------------------
// Tolerances. Both backends compute in fp32 with different summation orders (cuBLAS tiles, warp trees vs OpenBLAS
// and OpenMP splits) and different exp implementations (expf vs the CPU's ~4 ulp polynomial). A K-term fp32 sum is
// off by a random walk of about sqrt(K) eps times the RMS of the result on each side, so their difference is up
// to ~2 sqrt(K) eps rms; as in tests/unit/test_ops.cpp we allow 8x that (largest of many elements, a few extra
// roundings per op):  |cuda - cpu| <= atol + rtol |cpu|,  atol = 8 sqrt(K) eps rms(cpu),  rtol = 8 sqrt(K) eps.
struct Tol {
  double atol, rtol;
};
double rms(const Floats& v) {
  double s = 0.0;
  for (float x : v) s += double(x) * x;
  return v.empty() ? 0.0 : std::sqrt(s / double(v.size()));
}
Tol fp32_tol(double K, const Floats& ref) {
  const double r = 8.0 * std::sqrt(K) * kEps;
  return {r * rms(ref), r};
}

// `extra`, where given, adds an allowance of its own to each element's.
void expect_close(const std::string& what, const Floats& got, const Floats& want, Tol tol,
                  const Floats* extra = nullptr) {
  ASSERT_EQ(got.size(), want.size()) << what;
  if (extra) {
    ASSERT_EQ(extra->size(), want.size()) << what;
  }
  size_t bad = 0, worst = 0;
  double worst_ratio = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double(got[i]) - double(want[i])),
                 allowed = tol.atol + tol.rtol * std::fabs(want[i]) + (extra ? double((*extra)[i]) : 0.0);
    const double ratio = allowed > 0 ? err / allowed : (err > 0 ? INFINITY : 0.0);
    if (!(ratio <= 1.0)) ++bad;
    if (!(ratio <= worst_ratio)) worst_ratio = ratio, worst = i;
  }
  if (std::getenv("EMBER_TEST_VERBOSE")) std::printf("  %-44s worst err/tol = %.3g\n", what.c_str(), worst_ratio);
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements out of tolerance; worst at " << worst
                     << ": cuda " << got[worst] << ", cpu " << want[worst] << " (atol " << tol.atol << ", rtol "
                     << tol.rtol << ")";
}

void expect_bitwise(const std::string& what, const Floats& a, const Floats& b) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << what << ": two runs differ";
}

struct Rng {
  Philox philox;
  explicit Rng(uint32_t stream) : philox(kSeed, 0, stream, RNG_PURPOSE_TEST) {}
  Floats normal(size_t n, float scale = 1.0f) {
    Floats v(n);
    for (float& x : v) x = scale * philox.normal();
    return v;
  }
  Ints tokens(size_t n, int V) {
    Ints v(n);
    for (int32_t& x : v) x = int32_t(philox.below(uint64_t(V)));
    return v;
  }
};

using FBuf = test::BackendArray<float>;
using IBuf = test::BackendArray<int32_t>;

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

// ---------------------------------------------------------------------------------------------------------------
#ifndef EMBER_TEST_KERNEL_MODEL
TEST_F(CudaOps, BackendName) { EXPECT_EQ(gpu->name().rfind("cuda:0 (", 0), 0u) << gpu->name(); }

TEST_F(CudaOps, MemoryAllocIsZeroAndCopiesRoundTrip) {
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

TEST_F(CudaOps, Encoder) {
  const int B = 3, T = 37, C = 45, V = 50, maxT = 40;  // odd sizes; V small so rows get many tokens
  Rng rng(2);
  const Ints inp = rng.tokens(size_t(B) * T, V);
  const Floats wte = rng.normal(size_t(V) * C), wpe = rng.normal(size_t(maxT) * C),
               dout = rng.normal(size_t(B) * T * C);
  const Floats dwte0 = rng.normal(size_t(V) * C), dwpe0 = rng.normal(size_t(maxT) * C);  // pre-filled: +=
  Floats out[2], dwte[2], dwpe[2];
  Backend* be[2] = {cpu.get(), gpu.get()};
  for (int k = 0; k < 2; ++k) {
    IBuf i(*be[k], inp);
    FBuf a(*be[k], wte), p(*be[k], wpe), o(*be[k], Floats(size_t(B) * T * C)), g(*be[k], dout), dw(*be[k], dwte0),
        dp(*be[k], dwpe0);
    be[k]->encoder_forward(o.get(), i.get(), a.get(), p.get(), B, T, C);
    be[k]->encoder_backward(dw.get(), dp.get(), g.get(), i.get(), B, T, C);
    out[k] = o.host(), dwte[k] = dw.host(), dwpe[k] = dp.host();
  }
  // One add per output element; the backward sums run in the same token order as the CPU's, from the same start.
  expect_bitwise("encoder_forward", out[1], out[0]);
  expect_bitwise("encoder_backward dwte", dwte[1], dwte[0]);
  expect_bitwise("encoder_backward dwpe", dwpe[1], dwpe[0]);
}

class CudaLayerNorm : public CudaOps, public ::testing::WithParamInterface<int> {};
TEST_P(CudaLayerNorm, ForwardBackward) {
  const int N = 74, C = GetParam();
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
INSTANTIATE_TEST_SUITE_P(Shapes, CudaLayerNorm, ::testing::Values(45, 768));

// The fused residual add + layernorm: bitwise equal to the CUDA add and layernorm it replaces (backend.h's contract,
// which recompute relies on), and within the layernorm's tolerance of the CPU.
TEST_P(CudaLayerNorm, ResidualFusedEqualsAddThenLayerNorm) {
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

class CudaMatmul : public CudaOps, public ::testing::WithParamInterface<bool> {};
TEST_P(CudaMatmul, ForwardBackward) {
  const bool with_bias = GetParam();
  const int N = 37, IC = 45, OC = 67;
  Rng rng(5 + with_bias);
  const Floats x = rng.normal(size_t(N) * IC), w = rng.normal(size_t(IC) * OC), bias = rng.normal(OC),
               dout = rng.normal(size_t(N) * OC);
  const Floats dx0 = rng.normal(size_t(N) * IC), dw0 = rng.normal(size_t(IC) * OC), db0 = rng.normal(OC);
  Floats out[2], dx[2], dw[2], db[2];
  Backend* be[2] = {cpu.get(), gpu.get()};
  for (int k = 0; k < 2; ++k) {
    FBuf xi(*be[k], x), wi(*be[k], w), bi(*be[k], bias), o(*be[k], Floats(size_t(N) * OC)), g(*be[k], dout),
        gx(*be[k], dx0), gw(*be[k], dw0), gb(*be[k], db0);
    be[k]->matmul_forward(o.get(), xi.get(), wi.get(), with_bias ? bi.get() : nullptr, N, IC, OC);
    be[k]->matmul_backward(gx.get(), gw.get(), with_bias ? gb.get() : nullptr, g.get(), xi.get(), wi.get(), N, IC, OC);
    out[k] = o.host(), dx[k] = gx.host(), dw[k] = gw.host(), db[k] = gb.host();
  }
  expect_close("matmul out", out[1], out[0], fp32_tol(IC + 1, out[0]));
  expect_close("matmul dinp", dx[1], dx[0], fp32_tol(OC + 1, dx[0]));  // +1: the pre-filled value
  expect_close("matmul dweight", dw[1], dw[0], fp32_tol(N + 1, dw[0]));
  if (with_bias)
    expect_close("matmul dbias", db[1], db[0], fp32_tol(N + 1, db[0]));
  else
    expect_bitwise("matmul dbias untouched when null", db[1], db0);
}
INSTANTIATE_TEST_SUITE_P(Bias, CudaMatmul, ::testing::Bool());

// Dense layers as the model calls them: weight and bias at odd float offsets inside one arena (the alignment cuBLASLt's
// fused bias epilogues must be told of), at both matmul precisions. dbias is the sum of the fp32 dout at both (never
// of the rounded copy the bf16 GEMMs read), so it keeps the fp32 bound. N = 600 rows make three chunks of the
// two-stage column sum that dbias takes without cuBLASLt's epilogue, the last one partial.
TEST_F(CudaOps, MatmulWithParametersInsideTheArena) {
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
      for (int rep = 0; rep < 2; ++rep)  // twice: the second call accumulates onto the first
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
    expect_close(tag + "arena matmul dinp", dx[1], dx[0], fp32_tol(2 * OC, dx[0]));
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

TEST_F(CudaOps, MatmulTransposed) {
  const int N = 37, C = 45, V = 101;
  Rng rng(7);
  const Floats x = rng.normal(size_t(N) * C), wte = rng.normal(size_t(V) * C), dout = rng.normal(size_t(N) * V);
  const Floats dx0 = rng.normal(size_t(N) * C), dwte0 = rng.normal(size_t(V) * C);
  Floats out[2], dx[2], dwte[2];
  Backend* be[2] = {cpu.get(), gpu.get()};
  for (int k = 0; k < 2; ++k) {
    FBuf xi(*be[k], x), w(*be[k], wte), o(*be[k], Floats(size_t(N) * V)), g(*be[k], dout), gx(*be[k], dx0),
        gw(*be[k], dwte0);
    be[k]->matmul_forward_transposed(o.get(), xi.get(), w.get(), N, C, V);
    be[k]->matmul_backward_transposed(gx.get(), gw.get(), g.get(), xi.get(), w.get(), N, C, V);
    out[k] = o.host(), dx[k] = gx.host(), dwte[k] = gw.host();
  }
  expect_close("lm_head out", out[1], out[0], fp32_tol(C, out[0]));
  expect_close("lm_head dinp", dx[1], dx[0], fp32_tol(V + 1, dx[0]));
  expect_close("lm_head dwte", dwte[1], dwte[0], fp32_tol(N + 1, dwte[0]));
}

// Matmul precision bf16 on fp32-stored inputs: the CUDA backend casts them to bf16 (to nearest even) and runs bf16
// GEMMs with fp32 accumulation, as the CPU backend rounds its copies and multiplies in fp32. Both must agree within the
// fp32 tolerance of the sums; an input rounded another way (or not at all, or to TF32) is off by up to a bf16 ulp, far
// outside it.
TEST_F(CudaOps, MatmulBf16MatchesTheCpuEmulation) {
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

// (B, T, C, NH): HS = 16 with T = 150 > the 32-key tile and not a multiple of the 16/8-row blocks; HS = 64
// (GPT-2's); HS = 128 (the kernel's maximum); HS = 5 (odd, below a warp); T = 1.
// bf16 storage (TensorIn/TensorOut, core/dtype.h), as the model uses it under matmul precision bf16. Layernorm, the
// fused residual layernorm, GELU, the dense layer (its bias in bf16) and the lm_head writing bf16: their fp32 results
// agree with the CPU's within the fp32 tolerance, so the stored values agree within that plus one bf16 ulp (at most
// 2^-7 of the value) where the two fp32 results fall either side of a rounding midpoint, which is rare (at most 1% of
// elements may differ at all). GELU from a bf16-stored input, forward and backward, within the fp32 tolerance. The
// cast rounds as the CPU, bit for bit. The four matmul ops on the same bf16-stored inputs (the lm_head's backward
// pass also from a bf16-stored dout), at odd sizes, with a bias and pre-filled gradients: within the fp32 tolerances
// of MatmulBf16MatchesTheCpuEmulation (K + 1 for the pre-filled value); dbias is the sum of the fp32 dout, as in
// MatmulWithParametersInsideTheArena.
using Halves = std::vector<BFloat16>;
using HBuf = test::BackendArray<BFloat16>;
Floats widened(const Halves& v) {
  Floats f(v.size());
  for (size_t i = 0; i < v.size(); ++i) f[i] = from_bf16(v[i]);
  return f;
}
void expect_close_bf16(const std::string& what, const Halves& got, const Halves& want, Tol tol) {
  tol.rtol += std::ldexp(1.0, -7);
  expect_close(what, widened(got), widened(want), tol);
  size_t differ = 0;
  for (size_t i = 0; i < got.size(); ++i) differ += got[i].bits != want[i].bits;
  EXPECT_LE(differ, got.size() / 100) << what << ": " << differ << " of " << got.size() << " stored values differ";
}

TEST_F(CudaOps, Bf16StorageMatchesTheCpu) {
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

struct AttnShape {
  int B, T, C, NH;
};
std::string attn_shape_name(const ::testing::TestParamInfo<AttnShape>& info) {
  const AttnShape& s = info.param;
  return "B" + std::to_string(s.B) + "_T" + std::to_string(s.T) + "_C" + std::to_string(s.C) + "_NH" +
         std::to_string(s.NH);
}
class CudaAttention : public CudaOps, public ::testing::WithParamInterface<AttnShape> {};
TEST_P(CudaAttention, ForwardBackward) {
  const auto [B, T, C, NH] = GetParam();
  const int HS = C / NH;
  Rng rng(11 + uint32_t(T));
  const Floats qkv = rng.normal(size_t(B) * T * 3 * C), dout = rng.normal(size_t(B) * T * C);
  const Floats dqkv0 = rng.normal(qkv.size());
  Floats out[2], lse[2], dqkv[2];
  Backend* be[2] = {cpu.get(), gpu.get()};
  for (int k = 0; k < 2; ++k) {
    FBuf x(*be[k], qkv), o(*be[k], Floats(size_t(B) * T * C)), l(*be[k], Floats(size_t(B) * NH * T)), g(*be[k], dout),
        gx(*be[k], dqkv0);
    be[k]->attention_forward(o.get(), l.get(), x.get(), B, T, C, NH);
    be[k]->attention_backward(gx.get(), g.get(), x.get(), o.get(), l.get(), B, T, C, NH);
    out[k] = o.host(), lse[k] = l.host(), dqkv[k] = gx.host();
  }
  // Scores are HS-term dots and outputs T-term weighted sums (K = T HS covers both); the backward chains two such
  // products (dP = dO V^T, then dS K or dS^T Q), so K = 2 T HS.
  expect_close("attention out", out[1], out[0], fp32_tol(double(T) * HS, out[0]));
  expect_close("attention lse", lse[1], lse[0], fp32_tol(double(T) * HS, lse[0]));
  expect_close("attention dqkv", dqkv[1], dqkv[0], fp32_tol(2.0 * T * HS, dqkv[0]));
}
INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttention,
                         ::testing::Values(AttnShape{2, 150, 48, 3}, AttnShape{1, 70, 192, 3}, AttnShape{2, 41, 256, 2},
                                           AttnShape{3, 33, 15, 3}, AttnShape{2, 1, 48, 3}),
                         attn_shape_name);

// ---------------------------------------------------------------------------------------------------------------
// Matmul precision bf16 takes the tensor-core attention kernels (head sizes 16, 32, 64): every product has bf16
// inputs and fp32 accumulation. The reference is the CPU's fp32 attention on inputs already rounded to bf16, and the
// kernels may differ from it by the rounding of P and dS, within the per-element bounds of attention_bf16_bounds.h
// (allowed twice over, on top of the fp32 tolerance of the plain test). The backward pass gets the CPU's out and lse
// on both backends, so it is checked on its own. tests/gpu/test_attention_tc_model.cpp runs the same kernels on the
// CPU against a software model of the warp.
class CudaAttentionBf16 : public CudaOps, public ::testing::WithParamInterface<AttnShape> {};
TEST_P(CudaAttentionBf16, TensorCoresMatchTheCpuWithinTheRoundingOfPAndDS) {
  const auto [B, T, C, NH] = GetParam();
  const int HS = C / NH;
  Rng rng(41 + uint32_t(T));
  const Floats raw = rng.normal(size_t(B) * T * 3 * C), qkv = test::rounded_to_bf16(raw),
               dout = test::rounded_to_bf16(rng.normal(size_t(B) * T * C));
  const Floats dqkv0 = rng.normal(qkv.size());
  // The CPU reference in fp32 (whose D reads fp32 O: the bounds allow for the GPU's rounded O).
  FBuf cx(*cpu, qkv), co(*cpu, Floats(size_t(B) * T * C)), cl(*cpu, Floats(size_t(B) * NH * T)), cg(*cpu, dout),
      cgx(*cpu, dqkv0);
  cpu->attention_forward(co.get(), cl.get(), cx.get(), B, T, C, NH);
  cpu->attention_backward(cgx.get(), cg.get(), cx.get(), co.get(), cl.get(), B, T, C, NH);
  const Floats out_ref = co.host(), lse_ref = cl.host(), dqkv_ref = cgx.host();
  // The GPU with matmul precision bf16; its backward reads the CPU's out and lse.
  gpu->set_matmul_precision(MatmulPrecision::bf16);
  FBuf x(*gpu, qkv), o(*gpu, Floats(out_ref.size())), l(*gpu, Floats(lse_ref.size())), g(*gpu, dout),
      o_ref(*gpu, out_ref), l_ref(*gpu, lse_ref), gx(*gpu, dqkv0);
  gpu->attention_forward(o.get(), l.get(), x.get(), B, T, C, NH);
  gpu->attention_backward(gx.get(), g.get(), x.get(), o_ref.get(), l_ref.get(), B, T, C, NH);
  const Floats out = o.host(), lse = l.host(), dqkv = gx.host();
  // q, k and v are rounded as they are staged, so unrounded inputs give the forward pass's bits unchanged.
  FBuf xr(*gpu, raw);
  gpu->attention_forward(o.get(), l.get(), xr.get(), B, T, C, NH);
  expect_bitwise("tc attention out from unrounded qkv", o.host(), out);
  // bf16 storage of qkv and out: from qkv stored in bf16 (the same values) the forward pass stores its fp32 result
  // rounded, with the same lse, and the backward pass gives the same bits from qkv and the rounded out stored in bf16
  // as from fp32 (D reads O rounded either way).
  Halves out_ref_bf16(out_ref.size()), qkv_bf16(qkv.size());
  for (size_t i = 0; i < out_ref.size(); ++i) out_ref_bf16[i] = to_bf16(out_ref[i]);
  for (size_t i = 0; i < qkv.size(); ++i) qkv_bf16[i] = to_bf16(qkv[i]);
  HBuf ob(*gpu, out.size()), ob_ref(*gpu, out_ref_bf16), xb(*gpu, qkv_bf16);
  FBuf gx2(*gpu, dqkv0);
  gpu->attention_forward(ob.get(), l.get(), xb.get(), B, T, C, NH);
  expect_bitwise("tc attention lse from qkv stored in bf16", l.host(), lse);
  gpu->attention_backward(gx2.get(), g.get(), xb.get(), ob_ref.get(), l_ref.get(), B, T, C, NH);
  expect_bitwise("tc attention out stored in bf16", widened(ob.host()), test::rounded_to_bf16(out));
  expect_bitwise("tc attention dqkv from qkv and out stored in bf16", gx2.host(), dqkv);
  gpu->set_matmul_precision(MatmulPrecision::fp32);

  test::AttnBounds bd = test::attention_bf16_bounds(qkv, dout, B, T, C, NH);
  for (float& e : bd.out) e *= 2.0f;
  for (float& e : bd.dqkv) e *= 2.0f;
  expect_close("tc attention out", out, out_ref, fp32_tol(double(T) * HS, out_ref), &bd.out);
  expect_close("tc attention lse", lse, lse_ref, fp32_tol(double(T) * HS, lse_ref));  // scores: exact bf16 products
  expect_close("tc attention dqkv", dqkv, dqkv_ref, fp32_tol(2.0 * T * HS, dqkv_ref), &bd.dqkv);
}
// HS = 16 with T = 150 (three key tiles, the last partial); HS = 32 with T = 41 (one partial tile); HS = 64 with
// T = 70 and T = 257 (two and five tiles, rows past T in the last block); T = 1.
INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttentionBf16,
                         ::testing::Values(AttnShape{2, 150, 48, 3}, AttnShape{2, 41, 64, 2}, AttnShape{1, 70, 192, 3},
                                           AttnShape{1, 257, 256, 4}, AttnShape{2, 1, 48, 3}),
                         attn_shape_name);

// Head sizes without a tensor-core kernel (128, and 5) keep the fp32 kernels under matmul precision bf16: the
// results are bitwise those of precision fp32.
TEST_F(CudaOps, AttentionWithoutATensorCoreKernelStaysFp32) {
  for (const AttnShape s : {AttnShape{2, 41, 256, 2}, AttnShape{3, 33, 15, 3}}) {
    Rng rng(43);
    const Floats qkv = rng.normal(size_t(s.B) * s.T * 3 * s.C), dout = rng.normal(size_t(s.B) * s.T * s.C);
    Floats out[2], dqkv[2];
    for (int k = 0; k < 2; ++k) {
      gpu->set_matmul_precision(k ? MatmulPrecision::bf16 : MatmulPrecision::fp32);
      FBuf x(*gpu, qkv), o(*gpu, Floats(dout.size())), l(*gpu, Floats(size_t(s.B) * s.NH * s.T)), g(*gpu, dout),
          gx(*gpu, Floats(qkv.size()));
      gpu->attention_forward(o.get(), l.get(), x.get(), s.B, s.T, s.C, s.NH);
      gpu->attention_backward(gx.get(), g.get(), x.get(), o.get(), l.get(), s.B, s.T, s.C, s.NH);
      out[k] = o.host(), dqkv[k] = gx.host();
    }
    gpu->set_matmul_precision(MatmulPrecision::fp32);
    expect_bitwise("HS " + std::to_string(s.C / s.NH) + " out", out[1], out[0]);
    expect_bitwise("HS " + std::to_string(s.C / s.NH) + " dqkv", dqkv[1], dqkv[0]);
  }
}

TEST_F(CudaOps, GeluAndElementwise) {
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

struct LossShape {
  int N, V;
};
class CudaLoss : public CudaOps, public ::testing::WithParamInterface<LossShape> {};
TEST_P(CudaLoss, CrossEntropyAndSoftmax) {
  const auto [N, V] = GetParam();
  Rng rng(17 + uint32_t(V));
  const Floats logits = rng.normal(size_t(N) * V, 3.0f);
  const Ints targets = rng.tokens(N, V);
  const float dloss = 1.0f / float(N);
  Floats loss[2], dl[2], dl_inplace[2], probs[2];
  Backend* be[2] = {cpu.get(), gpu.get()};
  for (int k = 0; k < 2; ++k) {
    FBuf x(*be[k], logits), l(*be[k], Floats(N)), d(*be[k], Floats(logits.size(), 5.0f)),
        p(*be[k], Floats(logits.size()));
    IBuf t(*be[k], targets);
    be[k]->crossentropy_forward(l.get(), x.get(), t.get(), N, V);
    be[k]->crossentropy_backward(d.get(), x.get(), t.get(), dloss, N, V);  // overwrites the 5.0 fill
    be[k]->softmax_forward(p.get(), x.get(), 0.7f, N, V);
    loss[k] = l.host(), dl[k] = d.host(), probs[k] = p.host();
    be[k]->crossentropy_backward(x.get(), x.get(), t.get(), dloss, N, V);  // in place: dlogits aliases logits
    dl_inplace[k] = x.host();
  }
  // Each row is a V-term sum of exps (max-shifted), so K = V.
  expect_close("crossentropy_forward", loss[1], loss[0], fp32_tol(V, loss[0]));
  expect_close("crossentropy_backward", dl[1], dl[0], fp32_tol(V, dl[0]));
  expect_close("crossentropy_backward in place", dl_inplace[1], dl[0], fp32_tol(V, dl[0]));
  expect_close("softmax_forward T=0.7", probs[1], probs[0], fp32_tol(V, probs[0]));
}

// The cross-entropy on logits stored in bf16, as the model keeps them under matmul precision bf16 (the values rounded
// on the host, the same on both backends): the losses and an fp32 dlogits within the tolerances of
// CrossEntropyAndSoftmax; dlogits stored in bf16, in place over the logits, within those plus a bf16 ulp
// (expect_close_bf16).
TEST_P(CudaLoss, CrossEntropyFromBf16Logits) {
  const auto [N, V] = GetParam();
  Rng rng(19 + uint32_t(V));
  const Floats raw = rng.normal(size_t(N) * V, 3.0f);
  std::vector<BFloat16> logits(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) logits[i] = to_bf16(raw[i]);
  const Ints targets = rng.tokens(N, V);
  const float dloss = 1.0f / float(N);
  Floats loss[2], dl[2];
  std::vector<BFloat16> dl_inplace[2];
  Backend* be[2] = {cpu.get(), gpu.get()};
  for (int k = 0; k < 2; ++k) {
    test::BackendArray<BFloat16> x(*be[k], logits);
    FBuf l(*be[k], Floats(N)), d(*be[k], Floats(logits.size(), 5.0f));
    IBuf t(*be[k], targets);
    be[k]->crossentropy_forward(l.get(), x.get(), t.get(), N, V);
    be[k]->crossentropy_backward(d.get(), x.get(), t.get(), dloss, N, V);
    loss[k] = l.host(), dl[k] = d.host();
    be[k]->crossentropy_backward(x.get(), x.get(), t.get(), dloss, N, V);
    dl_inplace[k] = x.host();
  }
  std::vector<BFloat16> dl16(dl[0].size());
  for (size_t i = 0; i < dl16.size(); ++i) dl16[i] = to_bf16(dl[0][i]);
  expect_close("crossentropy_forward from bf16", loss[1], loss[0], fp32_tol(V, loss[0]));
  expect_close("crossentropy_backward from bf16", dl[1], dl[0], fp32_tol(V, dl[0]));
  EXPECT_EQ(std::memcmp(dl_inplace[0].data(), dl16.data(), dl16.size() * sizeof(BFloat16)), 0)
      << "the CPU's bf16 dlogits are its fp32 ones rounded";
  expect_close_bf16("crossentropy_backward bf16 in place", dl_inplace[1], dl_inplace[0], fp32_tol(V, dl[0]));
}
INSTANTIATE_TEST_SUITE_P(Shapes, CudaLoss, ::testing::Values(LossShape{37, 101}, LossShape{3, 50257}, LossShape{5, 1}),
                         [](const auto& info) {
                           return "N" + std::to_string(info.param.N) + "_V" + std::to_string(info.param.V);
                         });

TEST_F(CudaOps, SumSquares) {
  for (size_t n : {size_t(0), size_t(1), size_t(1000003)}) {
    const Floats x = Rng(19).normal(n);
    FBuf a(*cpu, x), b(*gpu, x);
    const double want = cpu->sum_squares(a.get(), n), got = gpu->sum_squares(b.get(), n);
    // fp64 sums of fp32 squares (exact products): the orders differ, each off by ~sqrt(n) 2^-53 relative.
    EXPECT_NEAR(got, want, 1e-12 * want) << "n = " << n;
    EXPECT_EQ(gpu->sum_squares(b.get(), n), got) << "n = " << n << ": two runs differ";
  }
}

TEST_F(CudaOps, AdamW) {
  const size_t n = 1003;
  Rng rng(23);
  const Floats p0 = rng.normal(n), m0 = rng.normal(n, 0.1f), g1 = rng.normal(n), g2 = rng.normal(n);
  Floats v0 = rng.normal(n, 0.1f);
  for (float& x : v0) x = x * x;  // second moments are non-negative
  Floats p[2], m[2], v[2];
  Backend* be[2] = {cpu.get(), gpu.get()};
  for (int k = 0; k < 2; ++k) {
    FBuf pi(*be[k], p0), mi(*be[k], m0), vi(*be[k], v0), a(*be[k], g1), b(*be[k], g2);
    be[k]->adamw_update(pi.get(), a.get(), mi.get(), vi.get(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3);
    be[k]->adamw_update(pi.get(), b.get(), mi.get(), vi.get(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 4);
    p[k] = pi.host(), m[k] = mi.host(), v[k] = vi.host();
  }
  // A handful of roundings per element; nvcc may contract a*b+c into FMAs where the CPU rounds twice: K = 4.
  expect_close("adamw params", p[1], p[0], fp32_tol(4, p[0]));
  expect_close("adamw m", m[1], m[0], fp32_tol(4, m[0]));
  expect_close("adamw v", v[1], v[0], fp32_tol(4, v[0]));
}

// The one-kernel update over segments against the CPU's (one adamw_update per segment): ragged segments with gaps,
// more threads than some segments hold elements, and a span longer than one grid-stride pass (4096 x 256 threads).
TEST_F(CudaOps, AdamWSegmentsMatchTheCpu) {
  const size_t n = (size_t(1) << 21) + 77;
  std::vector<AdamWSegment> segs;
  for (size_t b = 5, k = 0; b < n - 40; ++k) {
    const size_t len = (k % 3 == 0) ? 1 + k % 7 : 1000 + 977 * (k % 11);
    const size_t e = std::min(b + len, n - 40);
    segs.push_back({b, e, k % 2 ? 0.1f : 0.0f});
    b = e + (k % 4 == 0 ? 13 : 0);  // a gap after every fourth segment
  }
  Rng rng(29);
  const Floats p0 = rng.normal(n), g = rng.normal(n, 0.1f);
  Floats p[2], m[2];
  Backend* be[2] = {cpu.get(), gpu.get()};
  for (int k = 0; k < 2; ++k) {
    FBuf pi(*be[k], p0), mi(*be[k], n), vi(*be[k], n), gi(*be[k], g);
    for (int t = 1; t <= 2; ++t)
      be[k]->adamw_update_segments(pi.get(), gi.get(), mi.get(), vi.get(), segs.data(), segs.size(), 1e-3f, 0.9f, 0.95f,
                                   1e-8f, t);
    p[k] = pi.host(), m[k] = mi.host();
  }
  // As the single-range AdamW test: a handful of roundings per element, FMA contraction on the GPU: K = 4.
  expect_close("segmented adamw params", p[1], p[0], fp32_tol(4, p[0]));
  expect_close("segmented adamw m", m[1], m[0], fp32_tol(4, m[0]));
  // Every covered element moves (by ~lr, far above fp32 resolution at |p| ~ 1); every other one keeps its value.
  size_t covered = 0, unchanged = 0;
  for (const AdamWSegment& s : segs) covered += s.end - s.begin;
  for (size_t i = 0; i < n; ++i) unchanged += p[1][i] == p0[i] ? 1 : 0;
  EXPECT_EQ(unchanged, n - covered) << "the GPU updated a gap element or skipped a segment's";
}

// Two identical runs of every op with a reduction must agree bit for bit (no atomics, fixed trees), at both matmul
// precisions (bf16 takes the tensor-core attention kernels here: HS = 16).
class CudaDeterministic : public CudaOps, public ::testing::WithParamInterface<MatmulPrecision> {};
TEST_P(CudaDeterministic, TwoRunsAgreeBitwise) {
  const int B = 2, T = 150, C = 48, NH = 3, V = 61;
  Rng rng(29);
  const Floats qkv = rng.normal(size_t(B) * T * 3 * C), dout = rng.normal(size_t(B) * T * C),
               w = rng.normal(size_t(C) * 3 * C), wte = rng.normal(size_t(V) * C), ln_w = rng.normal(C);
  const Ints inp = rng.tokens(size_t(B) * T, V);
  std::vector<Floats> runs[2];
  gpu->set_matmul_precision(GetParam());
  for (int r = 0; r < 2; ++r) {
    Backend& g = *gpu;
    FBuf x(g, qkv), o(g, Floats(size_t(B) * T * C)), l(g, Floats(size_t(B) * NH * T)), d(g, dout),
        dx(g, Floats(qkv.size())), wi(g, w), dw(g, Floats(w.size())), db(g, Floats(3 * C)),
        din(g, Floats(size_t(B) * T * C)), dwte(g, Floats(wte.size())), dwpe(g, Floats(size_t(T) * C)), lw(g, ln_w),
        m(g, Floats(size_t(B) * T)), rs(g, Floats(size_t(B) * T)), ldw(g, Floats(C)), ldb(g, Floats(C));
    IBuf ids(g, inp);
    g.attention_forward(o.get(), l.get(), x.get(), B, T, C, NH);
    g.attention_backward(dx.get(), d.get(), x.get(), o.get(), l.get(), B, T, C, NH);
    g.matmul_backward(din.get(), dw.get(), db.get(), dx.get(), d.get(), wi.get(), B * T, C, 3 * C);
    g.encoder_backward(dwte.get(), dwpe.get(), d.get(), ids.get(), B, T, C);
    g.layernorm_forward(din.get(), m.get(), rs.get(), d.get(), lw.get(), lw.get(), B * T, C);
    g.layernorm_backward(din.get(), ldw.get(), ldb.get(), d.get(), d.get(), lw.get(), m.get(), rs.get(), B * T, C);
    runs[r] = {o.host(),  l.host(),    dx.host(),   din.host(), dw.host(),
               db.host(), dwte.host(), dwpe.host(), ldw.host(), ldb.host()};
  }
  for (size_t i = 0; i < runs[0].size(); ++i) expect_bitwise("output " + std::to_string(i), runs[1][i], runs[0][i]);
}
INSTANTIATE_TEST_SUITE_P(Precision, CudaDeterministic, ::testing::Values(MatmulPrecision::fp32, MatmulPrecision::bf16),
                         [](const auto& info) { return matmul_precision_name(info.param); });

// ---------------------------------------------------------------------------------------------------------------
// The whole GPT on both backends from the same init seed and tokens: loss and every gradient agree.
// The whole-model tests' config: HS = 16, odd vocabulary.
ModelConfig whole_model_config() {
  ModelConfig c;
  c.n_layer = 2;
  c.n_head = 3;  // HS = 16
  c.n_embd = 48;
  c.block_size = 64;
  c.vocab_size = 101;
  return c;
}

// Runs forward and backward of the whole model on both backends at matmul precision `p` and checks the loss within
// loss_rtol and every gradient within {r rms, r} of the CPU's.
void expect_whole_model_close(Backend& cpu, Backend& gpu, MatmulPrecision p, double loss_rtol, double r) {
  const ModelConfig c = whole_model_config();
  const int B = 2, T = 45;  // T past the 32-key attention tile
  cpu.set_matmul_precision(p);
  gpu.set_matmul_precision(p);
  GPT cpu_model(c, cpu, B, T), gpu_model(c, gpu, B, T);
  cpu_model.init_weights(5);
  gpu_model.init_weights(5);
  Rng rng(31);
  const Ints in = rng.tokens(size_t(B) * T, c.vocab_size), tg = rng.tokens(size_t(B) * T, c.vocab_size);
  const double loss_cpu = cpu_model.forward(in.data(), tg.data(), B, T);
  const double loss_gpu = gpu_model.forward(in.data(), tg.data(), B, T);
  if (std::getenv("EMBER_TEST_VERBOSE"))
    std::printf("  loss relative difference %.3g\n", std::fabs(loss_gpu / loss_cpu - 1.0));
  EXPECT_NEAR(loss_gpu, loss_cpu, loss_rtol * loss_cpu);
  cpu_model.zero_grad();
  gpu_model.zero_grad();
  cpu_model.backward(1.0f);
  gpu_model.backward(1.0f);
  const size_t n = cpu_model.table().total_numel();
  Floats g_cpu(n), g_gpu(n);
  cpu.copy_to_host(g_cpu.data(), cpu_model.grads(), n * sizeof(float));
  gpu.copy_to_host(g_gpu.data(), gpu_model.grads(), n * sizeof(float));
  for (const ParamInfo& info : cpu_model.table().params()) {
    const Floats want(g_cpu.begin() + info.offset, g_cpu.begin() + info.offset + info.numel);
    const Floats got(g_gpu.begin() + info.offset, g_gpu.begin() + info.offset + info.numel);
    expect_close("grad " + info.name, got, want, {r * rms(want), r});
  }
  cpu.set_matmul_precision(MatmulPrecision::fp32);
  gpu.set_matmul_precision(MatmulPrecision::fp32);
}

TEST_F(CudaOps, WholeModelLossAndGradients) {
  // The mean loss is ~ln(V) = 4.6 and sums B T per-token losses, each from V-term sums after ~10 chained ops: 1e-5.
  // A gradient passes through ~4 L + 4 ops (each a sum of up to K = B T 4C = 17280 terms at most), so the errors
  // of the chain add up: 10x the single-op bound with K = B T 4C, relative to each parameter's RMS gradient.
  const double r = 10.0 * 8.0 * std::sqrt(2.0 * 45 * 4 * whole_model_config().n_embd) * kEps;  // ~1.3e-3
  expect_whole_model_close(*cpu, *gpu, MatmulPrecision::fp32, 1e-5, r);
}

// Matmul precision bf16 on both backends, the CPU emulating the GPU's roundings of every GEMM and attention input
// (attention at HS = 16 takes the tensor-core kernels). Both round the same values, so they differ as in fp32 except
// where a value that differs in its last fp32 bits between the backends rounds to the neighbouring bf16, 2^-8 of
// itself away. That is rare, but one such value moves a whole row or column of a weight gradient by 2^-8 of its
// term, and one large term in a sum of B T = 90 can be several times the sum's RMS (seen here: 3.6 x 2^-8 of a
// parameter's RMS gradient, under the kernel model). Allowed: 2^-4 relative to each parameter's RMS gradient (4x
// that), and 1e-4 of the loss (a mean over 90 tokens, which a few such values barely move). A wrong kernel is off by
// O(1); the fp32 test above holds every kernel to fp32 accuracy.
TEST_F(CudaOps, WholeModelLossAndGradientsBf16) {
  expect_whole_model_close(*cpu, *gpu, MatmulPrecision::bf16, 1e-4, std::ldexp(1.0, -4));
}

// 50 training steps (forward, backward, AdamW over the whole arena in one call) on one fixed batch, which the model
// memorises: the GPU's losses track the CPU's at both matmul precisions. fp32: the per-op differences of the
// whole-model test compound through 50 updates of lr 3e-3; 2e-4 relative (seen under the kernel model: 7e-7) is far
// below what a wrong op or optimizer gives (the loss halves over the run). bf16: values that round to neighbouring
// bf16s on the two backends (as in the whole-model test) move the trajectories apart as training goes on (seen under
// the kernel model: 4.4e-3 by step 50); 2e-2, the bound the CPU's bf16 run keeps to its fp32 run in
// tests/unit/test_model.cpp.
void expect_training_tracks_cpu(Backend& cpu, Backend& gpu, MatmulPrecision p, double rtol) {
  const ModelConfig c = whole_model_config();
  const int B = 2, T = 33, steps = 50;  // T past the 32-key tile of the fp32 attention kernels
  Rng rng(47);
  const Ints in = rng.tokens(size_t(B) * T, c.vocab_size), tg = rng.tokens(size_t(B) * T, c.vocab_size);
  OptimizerConfig oc;
  oc.lr = 3e-3f;
  oc.weight_decay = 0.1f;
  auto run = [&](Backend& be) {
    be.set_matmul_precision(p);
    GPT model(c, be, B, T);
    model.init_weights(7);
    AdamW adam(be, model.table(), oc, 0, model.arena_numel());
    const std::vector<double> losses = test::train_on_one_batch(model, adam, in, tg, B, T, steps, oc.lr);
    be.set_matmul_precision(MatmulPrecision::fp32);
    return losses;
  };
  const std::vector<double> want = run(cpu), got = run(gpu);
  EXPECT_LT(want.back(), 0.5 * want.front()) << "the CPU run did not learn the batch";
  double worst = 0.0;
  for (int s = 0; s < steps; ++s) {
    worst = std::max(worst, std::fabs(got[s] / want[s] - 1.0));
    EXPECT_NEAR(got[s] / want[s], 1.0, rtol) << "step " << s << ": gpu " << got[s] << ", cpu " << want[s];
  }
  if (std::getenv("EMBER_TEST_VERBOSE"))
    std::printf("  worst relative loss difference over %d steps: %.3g\n", steps, worst);
}

TEST_F(CudaOps, FiftyTrainingStepsTrackTheCpu) { expect_training_tracks_cpu(*cpu, *gpu, MatmulPrecision::fp32, 2e-4); }
TEST_F(CudaOps, FiftyTrainingStepsTrackTheCpuBf16) {
  expect_training_tracks_cpu(*cpu, *gpu, MatmulPrecision::bf16, 2e-2);
}

#ifndef EMBER_TEST_KERNEL_MODEL
// Memory accounting on the GPU: a training step allocates nothing beyond the model's buffers except op scratch: the
// attention backward's row sums (B NH T floats), dbias's partial column sums where cuBLASLt does not sum it and, with
// bf16 storage, dout rounded to bf16 for the matmul backward passes (B T rows of at most max(V, 4C) columns, 2 bytes
// each: the largest, the lm_head's). The scratch is one buffer, so the largest of these. The device reports at least
// what the backend holds in use.
TEST_F(CudaOps, StepsAllocateOnlyOpScratchAndTheDeviceReportsUse) {
  const ModelConfig c = whole_model_config();
  const int B = 2, T = 45;
  for (MatmulPrecision p : {MatmulPrecision::fp32, MatmulPrecision::bf16}) {
    auto be = make_cuda_backend(0);
    be->set_matmul_precision(p);
    GPT model(c, *be, B, T);
    EXPECT_EQ(model.bf16_storage(), p == MatmulPrecision::bf16);
    model.init_weights(5);
    const size_t held = be->allocated_bytes();
    EXPECT_GE(held, model.weight_bytes() + model.activation_bytes());
    Rng rng(37);
    const Ints in = rng.tokens(size_t(B) * T, c.vocab_size), tg = rng.tokens(size_t(B) * T, c.vocab_size);
    for (int s = 0; s < 2; ++s) {
      model.zero_grad();
      (void)model.forward(in.data(), tg.data(), B, T);
      model.backward(1.0f);
    }
    be->synchronize();
    // dbias's partial column sums: 4C floats per chunk of 256 rows; scratch pieces start 256-byte aligned.
    const size_t BT = size_t(B) * T, partials = sizeof(float) * ((BT + 255) / 256) * 4 * c.n_embd + 256;
    size_t scratch = std::max(sizeof(float) * size_t(B) * c.n_head * T, partials);
    if (model.bf16_storage())
      scratch = std::max(scratch, sizeof(BFloat16) * BT * std::max(c.vocab_size, 4 * c.n_embd) + 256 + partials);
    EXPECT_LE(be->peak_allocated_bytes(), held + scratch) << matmul_precision_name(p);
    size_t used = 0, total = 0;
    ASSERT_TRUE(be->device_memory(&used, &total));
    EXPECT_GE(used, be->allocated_bytes());
    EXPECT_GT(total, used);
  }
}
#endif  // EMBER_TEST_KERNEL_MODEL

}  // namespace
}  // namespace ember
