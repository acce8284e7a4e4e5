// The CUDA backend's adapter decisions (cuda/cuda_dispatch.h) at emulated compute capabilities before and after
// sm_80, run by the kernel-model backend: which attention kernels bf16 attention takes, that bf16-stored qkv and out
// before sm_80 go through the fp32 kernels on widened copies and give bit for bit what those kernels give on the
// widened values, that the int8 products' two paths are both the CPU's, and the checks on AdamW segments.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "bf16_vectors.h"
#include "core/dtype.h"
#include "core/error.h"
#include "cuda_dispatch.h"
#include "kernel_model_backend.h"
#include "test_rng.h"
#include "test_support.h"
#include "tolerance.h"

namespace ember {
namespace {

using Floats = std::vector<float>;
using Halves = std::vector<BFloat16>;
using FBuf = test::BackendArray<float>;
using HBuf = test::BackendArray<BFloat16>;
constexpr uint64_t kSeed = 20240613;

// Tensor cores for bf16 attention from sm_80 on; before, the fp32 kernels, on widened copies where qkv and out are
// stored in bf16. Head sizes without a tensor-core kernel, and precision fp32, keep the fp32 kernels everywhere.
TEST(CudaDispatchModel, AttentionPathFollowsTheComputeCapability) {
  using cuda::attention_path;
  using cuda::AttentionPath;
  const MatmulPrecision bf16 = MatmulPrecision::bf16, fp32 = MatmulPrecision::fp32;
  for (int major : {8, 9, 10}) {
    EXPECT_EQ(attention_path(major, bf16, 48, 3, true), AttentionPath::tensor_core) << major;
    EXPECT_EQ(attention_path(major, bf16, 256, 4, false), AttentionPath::tensor_core) << major;
    EXPECT_EQ(attention_path(major, bf16, 256, 2, false), AttentionPath::fp32) << major;  // HS = 128
    EXPECT_EQ(attention_path(major, fp32, 48, 3, false), AttentionPath::fp32) << major;
  }
  for (int major : {6, 7}) {
    EXPECT_EQ(attention_path(major, bf16, 48, 3, true), AttentionPath::fp32_widened) << major;
    EXPECT_EQ(attention_path(major, bf16, 48, 3, false), AttentionPath::fp32) << major;
  }
  EXPECT_EQ(cuda::attention_forward_scratch_floats(AttentionPath::tensor_core, 2, 5, 12), 0u);
  EXPECT_EQ(cuda::attention_forward_scratch_floats(AttentionPath::fp32_widened, 2, 5, 12), 4u * 2 * 5 * 12);
  EXPECT_EQ(cuda::attention_backward_scratch_floats(AttentionPath::fp32, 2, 5, 12, 3), 2u * 3 * 5);
  EXPECT_EQ(cuda::attention_backward_scratch_floats(AttentionPath::fp32_widened, 2, 5, 12, 3),
            2u * 3 * 5 + 5u * 2 * 5 * 12);
}

struct Attention {
  Floats out, lse, dqkv;
  Floats dqkv16;            // with bf16 storage: the backward pass again into a bf16-stored dqkv, widened
  Floats dqkv_from_dout16;  // with bf16 storage: the backward pass again from dout stored in bf16 (rounded)
};

// Forward and backward attention on `be` at matmul precision bf16, qkv and out stored in bf16 or in fp32 (holding the
// same bf16 values); the backward pass reads `out_in` (widened bf16 values) and `lse_in` where given, else the
// forward's own.
Attention run_attention(Backend& be, bool bf16_storage, const Floats& qkv, const Floats& dout, int B, int T, int C,
                        int NH, const Floats* out_in = nullptr, const Floats* lse_in = nullptr) {
  be.set_matmul_precision(MatmulPrecision::bf16);
  const size_t n = size_t(B) * T * C;
  Attention r;
  FBuf lse(be, Floats(size_t(B) * NH * T)), g(be, dout), dqkv(be, Floats(qkv.size()));
  if (bf16_storage) {
    HBuf q(be, test::bf16_values(qkv)), o(be, Halves(n));
    be.attention_forward(o.get(), lse.get(), q.get(), B, T, C, NH);
    r.out = test::widened(o.host());
    HBuf ob(be, test::bf16_values(out_in ? *out_in : r.out));
    FBuf l(be, lse_in ? *lse_in : lse.host());
    be.attention_backward(dqkv.get(), g.get(), q.get(), ob.get(), l.get(), B, T, C, NH);
    HBuf d16(be, Halves(qkv.size()));
    be.attention_backward(d16.get(), g.get(), q.get(), ob.get(), l.get(), B, T, C, NH);
    r.dqkv16 = test::widened(d16.host());
    HBuf g16(be, test::bf16_values(dout));
    be.attention_backward(dqkv.get(), g16.get(), q.get(), ob.get(), l.get(), B, T, C, NH);
    r.dqkv_from_dout16 = dqkv.host();
    be.attention_backward(dqkv.get(), g.get(), q.get(), ob.get(), l.get(), B, T, C, NH);
  } else {
    FBuf q(be, qkv), o(be, Floats(n));
    be.attention_forward(o.get(), lse.get(), q.get(), B, T, C, NH);
    r.out = o.host();
    FBuf ob(be, out_in ? *out_in : r.out), l(be, lse_in ? *lse_in : lse.host());
    be.attention_backward(dqkv.get(), g.get(), q.get(), ob.get(), l.get(), B, T, C, NH);
  }
  r.lse = lse.host(), r.dqkv = dqkv.host();
  return r;
}

// Before sm_80, bf16 attention (HS = 16) on bf16-stored qkv and out: the fp32 kernels on the widened values, so the
// stored out is their fp32 out rounded to nearest even, and lse and dqkv are theirs bit for bit; and within the fp32
// tolerance of the CPU's fp32 attention, which the tensor-core kernels (their P and dS rounded to bf16) are not.
// On sm_90 the same call takes the tensor cores and differs.
TEST(CudaDispatchModel, Bf16AttentionBeforeSm80RunsTheFp32KernelsOnWidenedCopies) {
  const int B = 2, T = 41, C = 48, NH = 3, HS = C / NH;
  test::Rng rng(kSeed, 1);
  const Floats qkv = test::rounded_to_bf16(rng.normal(size_t(B) * T * 3 * C)), dout = rng.normal(size_t(B) * T * C);
  std::unique_ptr<Backend> sm75 = make_kernel_model_backend(75), sm90 = make_kernel_model_backend(90);

  const Attention widened_path = run_attention(*sm75, true, qkv, dout, B, T, C, NH);
  const Attention fp32 = run_attention(*sm75, false, qkv, dout, B, T, C, NH, &widened_path.out, &widened_path.lse);
  test::expect_bitwise("sm_75 bf16-stored out", widened_path.out, test::rounded_to_bf16(fp32.out));
  test::expect_bitwise("sm_75 bf16-stored lse", widened_path.lse, fp32.lse);
  test::expect_bitwise("sm_75 bf16-stored dqkv", widened_path.dqkv, fp32.dqkv);
  test::expect_bitwise("sm_75 dqkv stored in bf16", widened_path.dqkv16, test::rounded_to_bf16(widened_path.dqkv));
  // dout stored in bf16: widened for the fp32 kernels, so what the same values in fp32 give.
  const Floats dout_r = test::rounded_to_bf16(dout);
  const Attention rounded_dout = run_attention(*sm75, true, qkv, dout_r, B, T, C, NH);
  test::expect_bitwise("sm_75 dqkv from dout stored in bf16", widened_path.dqkv_from_dout16, rounded_dout.dqkv);

  std::unique_ptr<Backend> cpu = make_cpu_backend();  // precision fp32: the plain fp32 attention
  FBuf q(*cpu, qkv), o(*cpu, Floats(size_t(B) * T * C)), l(*cpu, Floats(size_t(B) * NH * T));
  cpu->attention_forward(o.get(), l.get(), q.get(), B, T, C, NH);
  const Floats out_ref = o.host();
  test::expect_close("sm_75 fp32 out vs the cpu", fp32.out, out_ref, test::fp32_tol(double(T) * HS, out_ref));

  const Attention tc = run_attention(*sm90, true, qkv, dout, B, T, C, NH);
  size_t differ = 0;
  for (size_t i = 0; i < tc.out.size(); ++i) differ += tc.out[i] != widened_path.out[i];
  EXPECT_GT(differ, 0u) << "sm_90 gave the sm_75 results: the tensor-core kernels did not run";
  test::expect_bitwise("sm_90 dqkv stored in bf16", tc.dqkv16, test::rounded_to_bf16(tc.dqkv));
  const Attention tc_rounded_dout = run_attention(*sm90, true, qkv, dout_r, B, T, C, NH);
  test::expect_bitwise("sm_90 dqkv from dout stored in bf16", tc.dqkv_from_dout16, tc_rounded_dout.dqkv);
}

// The int8 products take one kernel with the scales in registers from sm_80 and cuBLAS's int8 GEMM with an epilogue
// pass before: both are the CPU's bit for bit, forward, input gradient and int8 weight gradient (dithered), with
// sizes off every tile and padding boundary (K % 32 == 16, two weight-gradient tiles, the second partial).
TEST(CudaDispatchModel, Int8ProductsAreTheCpusBeforeAndFromSm80) {
  EXPECT_FALSE(cuda::int8_products_fused(7));
  EXPECT_TRUE(cuda::int8_products_fused(8));
  const int N = 300, IC = 45, OC = 67;
  test::Rng rng(kSeed, 2);
  const Floats x = rng.normal(size_t(N) * IC), w = rng.normal(size_t(IC) * OC), bias = rng.normal(OC),
               dout = rng.normal(size_t(N) * OC), dw0 = rng.normal(w.size());
  std::unique_ptr<Backend> cpu = make_cpu_backend(), sm75 = make_kernel_model_backend(75),
                           sm90 = make_kernel_model_backend(90);
  Floats out[3], dx[3], dw[3];
  Backend* be[3] = {cpu.get(), sm75.get(), sm90.get()};
  for (int k = 0; k < 3; ++k) {
    be[k]->set_matmul_precision(MatmulPrecision::int8);
    be[k]->set_int8_weight_gradient(true);
    be[k]->set_gradient_dither(DitherKey{99, 1, 2, 3});
    FBuf xi(*be[k], x), wi(*be[k], w), bi(*be[k], bias), o(*be[k], Floats(size_t(N) * OC)), g(*be[k], dout),
        gx(*be[k], Floats(x.size())), gw(*be[k], dw0);
    be[k]->matmul_forward(o.get(), xi.get(), wi.get(), bi.get(), N, IC, OC);
    be[k]->matmul_backward(gx.get(), gw.get(), nullptr, g.get(), xi.get(), wi.get(), N, IC, OC);
    out[k] = o.host(), dx[k] = gx.host(), dw[k] = gw.host();
  }
  for (int k = 1; k < 3; ++k) {
    const std::string sm = k == 1 ? "sm_75 " : "sm_90 ";
    test::expect_bitwise(sm + "int8 out", out[k], out[0]);
    test::expect_bitwise(sm + "int8 dinp", dx[k], dx[0]);
    test::expect_bitwise(sm + "int8 dweight", dw[k], dw[0]);
  }
}

// AdamW over segments refuses segments out of order or overlapping, before any kernel runs, at every capability.
TEST(CudaDispatchModel, AdamWSegmentsAreChecked) {
  std::unique_ptr<Backend> be = make_kernel_model_backend(75);
  FBuf p(*be, Floats(64, 1.0f)), g(*be, Floats(64, 1.0f)), m(*be, Floats(64)), v(*be, Floats(64));
  const std::vector<AdamWSegment> overlapping = {{0, 20, 0.1f}, {16, 40, 0.0f}}, descending = {{32, 40}, {0, 8}},
                                  reversed = {{8, 4}};
  for (const auto* segs : {&overlapping, &descending, &reversed})
    EXPECT_THROW(be->adamw_update_segments(p.get(), g.get(), m.get(), v.get(), segs->data(), segs->size(), 1e-2f, 0.9f,
                                           0.95f, 1e-8f, 1, 1.0f),
                 Error);
  EXPECT_EQ(p.host(), Floats(64, 1.0f)) << "a refused update changed the parameters";
}

}  // namespace
}  // namespace ember
