// CUDA tensor-core attention (cuda_attention_tc.cu), taken under matmul precision bf16, against the CPU's fp32
// attention within the rounding bounds of attention_bf16_bounds.h, and bitwise across the bf16 storage variants.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "attention_bf16_bounds.h"
#include "cuda_ops_test_util.h"

namespace ember {
namespace {

// Matmul precision bf16 takes the tensor-core attention kernels (head sizes 16, 32, 64): every product has bf16
// inputs and fp32 accumulation. The reference is the CPU's fp32 attention on inputs already rounded to bf16, and the
// kernels may differ from it by the rounding of P and dS, within the per-element bounds of attention_bf16_bounds.h
// (allowed twice over, on top of the fp32 tolerance of the plain test). The backward pass gets the CPU's out and lse
// on both backends, so it is checked on its own. tests/kernel_model/test_attention_tc_model.cpp runs the same kernels
// on the CPU against a software model of the warp.
class CudaOpsAttentionBf16 : public CudaOps, public ::testing::WithParamInterface<AttnShape> {};
TEST_P(CudaOpsAttentionBf16, TensorCoresMatchTheCpuWithinTheRoundingOfPAndDS) {
  const auto [B, T, C, NH] = GetParam();
  const int HS = C / NH;
  Rng rng(41 + uint32_t(T));
  const Floats raw = rng.normal(size_t(B) * T * 3 * C), qkv = test::rounded_to_bf16(raw),
               dout = test::rounded_to_bf16(rng.normal(size_t(B) * T * C));
  const Floats dqkv0 = nans(qkv.size());  // dqkv is written whole: NaN shows an element read or left
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
  HBuf gx16(*gpu, qkv.size());  // dqkv stored in bf16 too: the fp32 one rounded
  gpu->attention_backward(gx16.get(), g.get(), xb.get(), ob_ref.get(), l_ref.get(), B, T, C, NH);
  expect_bitwise("tc attention dqkv stored in bf16", widened(gx16.host()), test::rounded_to_bf16(dqkv));
  // dout stored in bf16 (the same values: staged as they are, D reading them widened): the same bits, into either
  // storage of dqkv.
  HBuf gd16(*gpu, test::bf16_values(dout)), gx16d(*gpu, qkv.size());
  FBuf gx3(*gpu, dqkv0);
  gpu->attention_backward(gx3.get(), gd16.get(), xb.get(), ob_ref.get(), l_ref.get(), B, T, C, NH);
  expect_bitwise("tc attention dqkv from dout stored in bf16", gx3.host(), dqkv);
  gpu->attention_backward(gx16d.get(), gd16.get(), xb.get(), ob_ref.get(), l_ref.get(), B, T, C, NH);
  expect_bitwise("tc attention bf16 dqkv from dout stored in bf16", widened(gx16d.host()), widened(gx16.host()));
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
// The tensor-core kernels with a layer's schedule against the CPU backend's bf16 attention with the same schedule,
// which emulates them (q and k rotated in fp32 and then rounded; tiles of 64 keys from a block's first window;
// the softmax's running maximum over the visible keys only). Both round P and dS, each within 2^-8 of the exact
// value, so they may differ by twice the bounds of attention_bf16_bounds.h for the schedule, plus the fp32
// tolerance. Windows of 1, of a tile with ALiBi and rope, of 100 (not a multiple of 16: the edge inside a warp's
// block of scores, and past a backward block of 128 rows), past T, and rope alone; then the same from bf16 storage,
// which the kernels stage through registers under rope rather than by cp.async: bitwise the fp32 storage's results
// rounded. A window edge one key off moves every row past the window by O(|v|).
TEST_P(CudaOpsAttentionBf16, AScheduleMatchesTheCpuEmulationWithinTheRoundingOfPAndDS) {
  const auto [B, T, C, NH] = GetParam();
  const int HS = C / NH;
  const AttentionLayer layers[] = {
      {1, 0.0f, 0.0f}, {64, 0.5f, 500000.0f}, {100, 0.0f, 10000.0f}, {T + 3, 0.25f, 0.0f}, {0, 0.0f, 10000.0f}};
  for (const AttentionLayer& layer : layers) {
    const std::string tag = "window " + std::to_string(layer.window) + " slope " + std::to_string(layer.alibi_slope) +
                            (layer.rope_theta != 0.0f ? " rope " : " ");
    Rng rng(53 + uint32_t(T + layer.window));
    const Floats qkv = test::rounded_to_bf16(rng.normal(size_t(B) * T * 3 * C)),
                 dout = test::rounded_to_bf16(rng.normal(size_t(B) * T * C));
    Floats out[2], lse[2], dqkv[2];
    Backend* be[2] = {cpu.get(), gpu.get()};
    for (int k = 0; k < 2; ++k) {  // the GPU's backward reads the CPU's out and lse
      be[k]->set_matmul_precision(MatmulPrecision::bf16);
      FBuf x(*be[k], qkv), o(*be[k], Floats(size_t(B) * T * C)), l(*be[k], Floats(size_t(B) * NH * T)), g(*be[k], dout),
          gx(*be[k], nans(qkv.size()));
      be[k]->attention_forward(o.get(), l.get(), x.get(), B, T, C, NH, layer);
      out[k] = o.host(), lse[k] = l.host();
      FBuf o_ref(*be[k], out[0]), l_ref(*be[k], lse[0]);
      be[k]->attention_backward(gx.get(), g.get(), x.get(), o_ref.get(), l_ref.get(), B, T, C, NH, layer);
      dqkv[k] = gx.host();
    }
    // From bf16 storage of qkv, out and dout: the same bits, rounded where stored in bf16.
    Halves qkv16(qkv.size()), out16(out[0].size());
    for (size_t i = 0; i < qkv.size(); ++i) qkv16[i] = to_bf16(qkv[i]);
    for (size_t i = 0; i < out16.size(); ++i) out16[i] = to_bf16(out[0][i]);
    HBuf xb(*gpu, qkv16), ob(*gpu, out16.size()), ob_ref(*gpu, out16), gd16(*gpu, test::bf16_values(dout)),
        gx16(*gpu, qkv.size());
    FBuf l(*gpu, Floats(lse[0].size())), l_ref(*gpu, lse[0]);
    gpu->attention_forward(ob.get(), l.get(), xb.get(), B, T, C, NH, layer);
    expect_bitwise(tag + "out stored in bf16", widened(ob.host()), test::rounded_to_bf16(out[1]));
    expect_bitwise(tag + "lse from qkv stored in bf16", l.host(), lse[1]);
    gpu->attention_backward(gx16.get(), gd16.get(), xb.get(), ob_ref.get(), l_ref.get(), B, T, C, NH, layer);
    for (Backend* b : be) b->set_matmul_precision(MatmulPrecision::fp32);

    test::AttnBounds bd = test::attention_bf16_bounds(qkv, dout, B, T, C, NH, layer);
    for (float& e : bd.out) e *= 2.0f;
    for (float& e : bd.dqkv) e *= 2.0f;
    expect_close(tag + "out", out[1], out[0], fp32_tol(double(T) * HS, out[0]), &bd.out);
    expect_close(tag + "lse", lse[1], lse[0], fp32_tol(double(T) * HS, lse[0]));
    expect_close(tag + "dqkv", dqkv[1], dqkv[0], fp32_tol(2.0 * T * HS, dqkv[0]), &bd.dqkv);
    // dqkv from bf16 storage: the fp32 one (from the CPU's out rounded, as stored here) rounded.
    FBuf x(*gpu, qkv), o_ref16(*gpu, widened(out16)), g(*gpu, dout), gx(*gpu, nans(qkv.size()));
    gpu->set_matmul_precision(MatmulPrecision::bf16);
    gpu->attention_backward(gx.get(), g.get(), x.get(), o_ref16.get(), l_ref.get(), B, T, C, NH, layer);
    gpu->set_matmul_precision(MatmulPrecision::fp32);
    expect_bitwise(tag + "dqkv stored in bf16", widened(gx16.host()), test::rounded_to_bf16(gx.host()));
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaOpsAttentionBf16,
                         ::testing::Values(AttnShape{2, 150, 48, 3}, AttnShape{2, 41, 64, 2}, AttnShape{1, 70, 192, 3},
                                           AttnShape{1, 257, 256, 4}, AttnShape{2, 1, 48, 3}),
                         attn_shape_name);

}  // namespace
}  // namespace ember
