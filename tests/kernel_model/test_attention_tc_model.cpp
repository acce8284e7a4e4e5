// The tensor-core attention kernels (cuda/cuda_attention_tc.cuh) compiled for the CPU and run under the kernel model
// (kernel_model.h: threads as fibers, __syncthreads and warp-wide exchanges through memory, mma.sync's fragments
// placed as the PTX ISA lays them out). Their results must agree with the CPU backend's attention within the bounds of
// attention_bf16_bounds.h, as on a GPU (tests/gpu/test_cuda_ops_attention.cpp, CudaAttentionBf16). This checks the
// kernels' own indexing (staging, fragments, masks, tiles, the online softmax, which rows and columns each thread owns)
// on any machine with the CUDA headers; the hardware's behaviour is what the GPU test checks.
#include "kernel_model.h"  // first: the model's definitions come before the kernels

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "attention_bf16_bounds.h"
#include "backend/backend.h"
#include "core/philox.h"
#include "core/rope.h"
#include "cuda_common.cuh"
#include "test_support.h"
#include "tolerance.h"

// After cuda_common.cuh, which provides what the kernels header expects of its includer.
#include "cuda_attention_tc.cuh"

namespace ember {
namespace {

using Floats = std::vector<float>;

template <int HS>
void model_attention(Floats& out, Floats& lse, Floats& dqkv, const Floats& qkv, const Floats& dout,
                     const Floats& out_ref, const Floats& lse_ref, int B, int T, int C, int NH,
                     const cuda::AttentionSchedule& sch = {}) {
  using namespace cuda::tc;
  const dim3 grid(unsigned(B * NH), unsigned((T + kRows - 1) / kRows)), block(kWarps * 32);
  const dim3 forward_grid(unsigned(B * NH), unsigned((T + kForwardRows - 1) / kForwardRows));
  const float scale = 1.0f / std::sqrt(float(HS));
  Floats delta(size_t(B) * NH * T);
  kernel_model::launch(attention_forward_tc_kernel<HS, float>, forward_grid, dim3(kForwardWarps * 32), out.data(),
                       lse.data(), qkv.data(), T, C, NH, scale, sch);
  kernel_model::launch(attention_backward_dq_tc_kernel<HS, float, float, float>, grid, block, dqkv.data(), delta.data(),
                       dout.data(), qkv.data(), out_ref.data(), lse_ref.data(), T, C, NH, scale, sch);
  kernel_model::launch(attention_backward_dkv_tc_kernel<HS, float, float, float>, grid, block, dqkv.data(),
                       delta.data(), dout.data(), qkv.data(), lse_ref.data(), T, C, NH, scale, sch);
}

// The same passes from bf16 storage (qkv, out and dout in bf16, which takes the kernels' cp.async staging; out written
// in bf16, dqkv in fp32), on inputs that hold bf16 values already: out16 comes back widened.
template <int HS>
void model_attention_bf16(Floats& out16, Floats& lse, Floats& dqkv, const Floats& qkv, const Floats& dout,
                          const Floats& out_ref, const Floats& lse_ref, int B, int T, int C, int NH,
                          const cuda::AttentionSchedule& sch = {}) {
  using namespace cuda::tc;
  using Bf16s = std::vector<__nv_bfloat16>;
  auto to16 = [](const Floats& v) {
    Bf16s r(v.size());
    for (size_t i = 0; i < v.size(); ++i) r[i] = __float2bfloat16_rn(v[i]);
    return r;
  };
  const Bf16s qkv16 = to16(qkv), dout16 = to16(dout), out_ref16 = to16(out_ref);
  Bf16s o16(out16.size(), __float2bfloat16_rn(NAN));
  const dim3 grid(unsigned(B * NH), unsigned((T + kRows - 1) / kRows)), block(kWarps * 32);
  const dim3 forward_grid(unsigned(B * NH), unsigned((T + kForwardRows - 1) / kForwardRows));
  const float scale = 1.0f / std::sqrt(float(HS));
  Floats delta(size_t(B) * NH * T);
  kernel_model::launch(attention_forward_tc_kernel<HS, __nv_bfloat16>, forward_grid, dim3(kForwardWarps * 32),
                       o16.data(), lse.data(), qkv16.data(), T, C, NH, scale, sch);
  kernel_model::launch(attention_backward_dq_tc_kernel<HS, __nv_bfloat16, float, __nv_bfloat16>, grid, block,
                       dqkv.data(), delta.data(), dout16.data(), qkv16.data(), out_ref16.data(), lse_ref.data(), T, C,
                       NH, scale, sch);
  kernel_model::launch(attention_backward_dkv_tc_kernel<HS, __nv_bfloat16, float, __nv_bfloat16>, grid, block,
                       dqkv.data(), delta.data(), dout16.data(), qkv16.data(), lse_ref.data(), T, C, NH, scale, sch);
  for (size_t i = 0; i < o16.size(); ++i) out16[i] = __bfloat162float(o16[i]);
}

struct Shape {
  int B, T, C, NH;
};
class TensorCoreAttentionModel : public ::testing::TestWithParam<Shape> {};

// As CudaAttentionBf16 on a GPU: the CPU backend's fp32 attention on bf16-rounded inputs is the reference, the
// backward passes read its out and lse, and every element must lie within twice the rounding bound of P and dS
// plus the fp32 tolerance of the CUDA op tests (8 sqrt(K) eps, relative to the RMS and to the element).
TEST_P(TensorCoreAttentionModel, MatchesTheCpuWithinTheRoundingOfPAndDS) {
  const auto [B, T, C, NH] = GetParam();
  const int HS = C / NH;
  Philox rng(20240612, 0, uint32_t(T + HS), RNG_PURPOSE_TEST);
  auto normal = [&](size_t n) {
    Floats v(n);
    for (float& x : v) x = rng.normal();
    return test::rounded_to_bf16(v);
  };
  const Floats qkv = normal(size_t(B) * T * 3 * C), dout = normal(size_t(B) * T * C);
  const Floats dqkv0(qkv.size(), NAN);  // dqkv is written whole: NaN shows an element read or left
  auto cpu = make_cpu_backend();
  test::BackendArray<float> cx(*cpu, qkv), co(*cpu, Floats(dout.size())), cl(*cpu, Floats(size_t(B) * NH * T)),
      cg(*cpu, dout), cgx(*cpu, dqkv0);
  cpu->attention_forward(co.get(), cl.get(), cx.get(), B, T, C, NH);
  cpu->attention_backward(cgx.get(), cg.get(), cx.get(), co.get(), cl.get(), B, T, C, NH);
  const Floats out_ref = co.host(), lse_ref = cl.host(), dqkv_ref = cgx.host();

  Floats out(out_ref.size(), NAN), lse(lse_ref.size(), NAN), dqkv = dqkv0;  // NaN: an unwritten element fails
  Floats out16(out_ref.size(), NAN), lse16(lse_ref.size(), NAN), dqkv16 = dqkv0;
  switch (HS) {
    case 16:
      model_attention<16>(out, lse, dqkv, qkv, dout, out_ref, lse_ref, B, T, C, NH);
      model_attention_bf16<16>(out16, lse16, dqkv16, qkv, dout, out_ref, lse_ref, B, T, C, NH);
      break;
    case 32:
      model_attention<32>(out, lse, dqkv, qkv, dout, out_ref, lse_ref, B, T, C, NH);
      model_attention_bf16<32>(out16, lse16, dqkv16, qkv, dout, out_ref, lse_ref, B, T, C, NH);
      break;
    case 64:
      model_attention<64>(out, lse, dqkv, qkv, dout, out_ref, lse_ref, B, T, C, NH);
      model_attention_bf16<64>(out16, lse16, dqkv16, qkv, dout, out_ref, lse_ref, B, T, C, NH);
      break;
    default:
      FAIL() << "no tensor-core kernel for HS = " << HS;
  }
  // From bf16 storage (staged by cp.async) the same bits: the inputs hold bf16 values, which the fp32 path rounds to
  // themselves, and the output is the fp32 one rounded. D reads O rounded either way.
  test::expect_bitwise("out from bf16 storage", out16, test::rounded_to_bf16(out));
  test::expect_bitwise("lse from bf16 storage", lse16, lse);
  test::expect_bitwise("dqkv from bf16 storage", dqkv16, dqkv);

  const test::AttnBounds bd = test::attention_bf16_bounds(qkv, dout, B, T, C, NH);
  // The fp32 tolerance of the sums plus twice the first-order bound for rounding P and dS.
  auto check = [&](const char* what, const Floats& got, const Floats& want, const Floats* bound, double K) {
    Floats twice;
    if (bound)
      for (float x : *bound) twice.push_back(2.0f * x);
    test::expect_close(what, got, want, test::fp32_tol(K, want), bound ? &twice : nullptr);
  };
  check("out", out, out_ref, &bd.out, double(T) * HS);
  check("lse", lse, lse_ref, nullptr, double(T) * HS);
  check("dqkv", dqkv, dqkv_ref, &bd.dqkv, 2.0 * T * HS);
}
// Backward blocks of 128 rows and forward blocks of 256 over tiles of 64: HS = 16 over two backward blocks and three
// key tiles (the last partial, on the second block's diagonal), HS = 32 in one partial tile, HS = 64 in one block
// over two tiles (the second past the first four warps' rows), HS = 64 over two backward blocks where the second
// block's last tile starts past its first four warps' rows, HS = 16 over two forward blocks (the second's last tile
// past its first twelve warps' rows) and three backward blocks, and T = 1.
INSTANTIATE_TEST_SUITE_P(Shapes, TensorCoreAttentionModel,
                         ::testing::Values(Shape{1, 150, 48, 3}, Shape{2, 41, 64, 2}, Shape{1, 70, 128, 2},
                                           Shape{1, 200, 128, 2}, Shape{1, 300, 48, 3}, Shape{1, 1, 48, 3}),
                         [](const auto& info) {
                           const Shape& s = info.param;
                           return "B" + std::to_string(s.B) + "_T" + std::to_string(s.T) + "_C" + std::to_string(s.C) +
                                  "_NH" + std::to_string(s.NH);
                         });

// The kernels with a layer's schedule, launched directly, against the CPU backend's bf16 attention with the same
// schedule (which emulates their roundings) within twice the bounds of attention_bf16_bounds.h for it, as
// CudaOpsAttentionBf16's schedule test does on a GPU; from bf16 storage (V by cp.async, rotated q and k through
// registers) the same bits. Then the same kernels with the window's edge one key off either way: the comparison must
// fail (gtest-spi), so the test sees a misplaced edge. A window of 100 (not a multiple of 16) at T = 200 puts the
// edge inside warps' 16-column blocks, across key tiles and across the backward's blocks of 128 rows.
TEST(TensorCoreAttentionSchedule, WindowEdgesAreExactAndAMisplacedEdgeFails) {
  constexpr int B = 1, T = 200, C = 64, NH = 2, HS = C / NH;
  const AttentionLayer layer{100, 0.0f, 10000.0f};  // no ALiBi: at a slope of 0.5 the edge's keys weigh e^-50
  Philox rng(20261130, 0, 1, RNG_PURPOSE_TEST);
  auto normal = [&](size_t n) {
    Floats v(n);
    for (float& x : v) x = rng.normal();
    return test::rounded_to_bf16(v);
  };
  const Floats qkv = normal(size_t(B) * T * 3 * C), dout = normal(size_t(B) * T * C);
  auto cpu = make_cpu_backend();
  cpu->set_matmul_precision(MatmulPrecision::bf16);
  test::BackendArray<float> cx(*cpu, qkv), co(*cpu, Floats(dout.size())), cl(*cpu, Floats(size_t(B) * NH * T)),
      cg(*cpu, dout), cgx(*cpu, Floats(qkv.size(), NAN));
  cpu->attention_forward(co.get(), cl.get(), cx.get(), B, T, C, NH, layer);
  cpu->attention_backward(cgx.get(), cg.get(), cx.get(), co.get(), cl.get(), B, T, C, NH, layer);
  const Floats out_ref = co.host(), lse_ref = cl.host(), dqkv_ref = cgx.host();

  Floats cos(size_t(T) * HS / 2), sin(cos.size());
  rope_table(layer.rope_theta, HS / 2, 0, T, cos.data(), sin.data());
  cuda::AttentionSchedule sch;  // the kernel model's "device" memory is the host's
  sch.window = layer.window, sch.alibi_slope = layer.alibi_slope, sch.rope_cos = cos.data(), sch.rope_sin = sin.data();
  test::AttnBounds bd = test::attention_bf16_bounds(qkv, dout, B, T, C, NH, layer);
  for (float& e : bd.out) e *= 2.0f;
  for (float& e : bd.dqkv) e *= 2.0f;
  auto run = [&](const cuda::AttentionSchedule& s, Floats& out, Floats& dqkv) {
    Floats lse(lse_ref.size(), NAN);
    out.assign(out_ref.size(), NAN), dqkv.assign(qkv.size(), NAN);
    model_attention<HS>(out, lse, dqkv, qkv, dout, out_ref, lse_ref, B, T, C, NH, s);
    return lse;
  };
  Floats out, dqkv;
  const Floats lse = run(sch, out, dqkv);
  test::expect_close("out", out, out_ref, test::fp32_tol(double(T) * HS, out_ref), &bd.out);
  test::expect_close("lse", lse, lse_ref, test::fp32_tol(double(T) * HS, lse_ref));
  test::expect_close("dqkv", dqkv, dqkv_ref, test::fp32_tol(2.0 * T * HS, dqkv_ref), &bd.dqkv);
  Floats out16(out.size(), NAN), lse16(lse.size(), NAN), dqkv16(dqkv.size(), NAN);
  model_attention_bf16<HS>(out16, lse16, dqkv16, qkv, dout, out_ref, lse_ref, B, T, C, NH, sch);
  test::expect_bitwise("out from bf16 storage", out16, test::rounded_to_bf16(out));
  test::expect_bitwise("lse from bf16 storage", lse16, lse);
  test::expect_bitwise("dqkv from bf16 storage", dqkv16, dqkv);

  {
    Floats o1(out16.size(), NAN), l1(lse16.size(), NAN), d1(dqkv16.size(), NAN);
    cuda::AttentionSchedule w1;
    w1.window = 1;
    model_attention_bf16<HS>(o1, l1, d1, qkv, dout, out_ref, lse_ref, B, T, C, NH, w1);
  }
  for (int window : {layer.window - 1, layer.window + 1}) {
    cuda::AttentionSchedule off = sch;
    off.window = window;
    Floats out_off, dqkv_off;
    run(off, out_off, dqkv_off);
    EXPECT_NONFATAL_FAILURE(
        test::expect_close("out", out_off, out_ref, test::fp32_tol(double(T) * HS, out_ref), &bd.out),
        "out of tolerance");
    EXPECT_NONFATAL_FAILURE(
        test::expect_close("dqkv", dqkv_off, dqkv_ref, test::fp32_tol(2.0 * T * HS, dqkv_ref), &bd.dqkv),
        "out of tolerance");
  }
}

}  // namespace
}  // namespace ember
