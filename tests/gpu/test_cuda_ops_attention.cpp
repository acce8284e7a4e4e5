// CUDA causal attention (cuda_attention.cu) against the CPU backend: the fp32 kernels, and the head sizes that keep
// them under matmul precision bf16. The tensor-core kernels are in test_cuda_ops_attention_bf16.cpp.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_ops_test_util.h"

namespace ember {
namespace {

// (B, T, C, NH): HS = 16 with T = 150 > the 32-key tile and not a multiple of the 16/8-row blocks; HS = 64
// (GPT-2's); HS = 128 (the kernel's maximum); HS = 5 (odd, below a warp); T = 1.
class CudaOpsAttention : public CudaOps, public ::testing::WithParamInterface<AttnShape> {};
TEST_P(CudaOpsAttention, ForwardBackward) {
  const auto [B, T, C, NH] = GetParam();
  const int HS = C / NH;
  Rng rng(11 + uint32_t(T));
  const Floats qkv = rng.normal(size_t(B) * T * 3 * C), dout = rng.normal(size_t(B) * T * C);
  const Floats dqkv0 = nans(qkv.size());  // dqkv is written whole: NaN shows an element read or left
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
INSTANTIATE_TEST_SUITE_P(Shapes, CudaOpsAttention,
                         ::testing::Values(AttnShape{2, 150, 48, 3}, AttnShape{1, 70, 192, 3}, AttnShape{2, 41, 256, 2},
                                           AttnShape{3, 33, 15, 3}, AttnShape{2, 1, 48, 3}),
                         attn_shape_name);

// The fp32 kernels with a layer's schedule (windows of 1, of a tile, past T; ALiBi; rope) against the CPU backend's
// attention with the same schedule, as above; tiles wholly outside a block's windows are skipped, so a window edge
// one key off (checked: the comparison fails for the kernels run with the window one off), a bias of the wrong sign
// or a rotation not carried back shows here.
TEST_P(CudaOpsAttention, ForwardBackwardWithASchedule) {
  const auto [B, T, C, NH] = GetParam();
  const int HS = C / NH;
  const AttentionLayer layers[] = {{1, 0.0f, 0.0f}, {5, 0.5f, 10000.0f}, {32, 0.0f, 500000.0f}, {T + 3, 0.25f, 0.0f}};
  for (const AttentionLayer& layer : layers) {
    if (layer.rope_theta != 0.0f && HS % 2 != 0) continue;  // rope rotates pairs of a head's values
    const std::string tag = "window " + std::to_string(layer.window) + (layer.rope_theta != 0.0f ? " rope " : " ");
    Rng rng(29 + uint32_t(T + layer.window));
    const Floats qkv = rng.normal(size_t(B) * T * 3 * C), dout = rng.normal(size_t(B) * T * C);
    Floats out[2], lse[2], dqkv[2];
    Backend* be[2] = {cpu.get(), gpu.get()};
    for (int k = 0; k < 2; ++k) {
      FBuf x(*be[k], qkv), o(*be[k], Floats(size_t(B) * T * C)), l(*be[k], Floats(size_t(B) * NH * T)), g(*be[k], dout),
          gx(*be[k], nans(qkv.size()));
      be[k]->attention_forward(o.get(), l.get(), x.get(), B, T, C, NH, layer);
      be[k]->attention_backward(gx.get(), g.get(), x.get(), o.get(), l.get(), B, T, C, NH, layer);
      out[k] = o.host(), lse[k] = l.host(), dqkv[k] = gx.host();
    }
    expect_close(tag + "out", out[1], out[0], fp32_tol(double(T) * HS, out[0]));
    expect_close(tag + "lse", lse[1], lse[0], fp32_tol(double(T) * HS, lse[0]));
    expect_close(tag + "dqkv", dqkv[1], dqkv[0], fp32_tol(2.0 * T * HS, dqkv[0]));
    if (layer.window != 32 || T <= 33) continue;
    // The same comparison must see a window edge one key off either way (a window of 32 without ALiBi, past it).
    for (const int window : {31, 33}) {
      AttentionLayer off = layer;
      off.window = window;
      FBuf x(*gpu, qkv), o(*gpu, Floats(out[0].size())), l(*gpu, Floats(lse[0].size())), g(*gpu, dout),
          gx(*gpu, nans(qkv.size()));
      gpu->attention_forward(o.get(), l.get(), x.get(), B, T, C, NH, off);
      gpu->attention_backward(gx.get(), g.get(), x.get(), o.get(), l.get(), B, T, C, NH, off);
      EXPECT_NONFATAL_FAILURE(expect_close("out", o.host(), out[0], fp32_tol(double(T) * HS, out[0])), "out of");
      EXPECT_NONFATAL_FAILURE(expect_close("dqkv", gx.host(), dqkv[0], fp32_tol(2.0 * T * HS, dqkv[0])), "out of");
    }
  }
}

// Head sizes without a tensor-core kernel (128, and 5) keep the fp32 kernels under matmul precision bf16: the
// results are bitwise those of precision fp32.
TEST_F(CudaOpsAttention, AttentionWithoutATensorCoreKernelStaysFp32) {
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

}  // namespace
}  // namespace ember
