// The tensor-core attention kernels (cuda/cuda_attention_tc.cuh) compiled for the CPU and run under the kernel model
// (kernel_model.h: threads as fibers, __syncthreads and warp-wide exchanges through memory, mma.sync's fragments
// placed as the PTX ISA lays them out). Their results must agree with the CPU backend's attention within the bounds of
// attention_bf16_bounds.h, as on a GPU (tests/gpu/test_cuda_ops_attention.cpp, CudaAttentionBf16). This checks the
// kernels' own indexing (staging, fragments, masks, tiles, the online softmax, which rows and columns each thread owns)
// on any machine with the CUDA headers; the hardware's behaviour is what the GPU test checks.
#include "kernel_model.h"  // first: the model's definitions come before the kernels

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
                     const Floats& out_ref, const Floats& lse_ref, int B, int T, int C, int NH) {
  using namespace cuda::tc;
  const dim3 grid(unsigned(B * NH), unsigned((T + kRows - 1) / kRows)), block(kWarps * 32);
  const dim3 forward_grid(unsigned(B * NH), unsigned((T + kForwardRows - 1) / kForwardRows));
  const float scale = 1.0f / std::sqrt(float(HS));
  Floats delta(size_t(B) * NH * T);
  kernel_model::launch(attention_forward_tc_kernel<HS, float>, forward_grid, dim3(kForwardWarps * 32), out.data(),
                       lse.data(), qkv.data(), T, C, NH, scale);
  kernel_model::launch(attention_backward_dq_tc_kernel<HS, float, float, float>, grid, block, dqkv.data(), delta.data(),
                       dout.data(), qkv.data(), out_ref.data(), lse_ref.data(), T, C, NH, scale);
  kernel_model::launch(attention_backward_dkv_tc_kernel<HS, float, float, float>, grid, block, dqkv.data(),
                       delta.data(), dout.data(), qkv.data(), lse_ref.data(), T, C, NH, scale);
}

// The same passes from bf16 storage (qkv, out and dout in bf16, which takes the kernels' cp.async staging; out written
// in bf16, dqkv in fp32), on inputs that hold bf16 values already: out16 comes back widened.
template <int HS>
void model_attention_bf16(Floats& out16, Floats& lse, Floats& dqkv, const Floats& qkv, const Floats& dout,
                          const Floats& out_ref, const Floats& lse_ref, int B, int T, int C, int NH) {
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
                       o16.data(), lse.data(), qkv16.data(), T, C, NH, scale);
  kernel_model::launch(attention_backward_dq_tc_kernel<HS, __nv_bfloat16, float, __nv_bfloat16>, grid, block,
                       dqkv.data(), delta.data(), dout16.data(), qkv16.data(), out_ref16.data(), lse_ref.data(), T, C,
                       NH, scale);
  kernel_model::launch(attention_backward_dkv_tc_kernel<HS, __nv_bfloat16, float, __nv_bfloat16>, grid, block,
                       dqkv.data(), delta.data(), dout16.data(), qkv16.data(), lse_ref.data(), T, C, NH, scale);
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

}  // namespace
}  // namespace ember
