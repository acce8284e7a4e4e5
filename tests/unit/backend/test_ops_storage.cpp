// CPU backend memory (alloc, copies, accounting), the elementwise ops, argument checks, bf16 rounding and bf16
// storage (cpu_backend.cpp, core/dtype.h): storing a result in bf16 changes no value but its rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "bf16_vectors.h"
#include "core/dtype.h"
#include "core/error.h"
#include "ops_test_util.h"

namespace ember {
namespace {

class OpsStorage : public CpuOpsTest {};

TEST_F(OpsStorage, AllocIsAlignedZeroedAndCopies) {
  EXPECT_EQ(be->name(), "cpu");
  for (size_t bytes : {size_t(0), size_t(1), size_t(3), size_t(100), size_t(1) << 20}) {
    auto* p = static_cast<unsigned char*>(be->alloc(bytes));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << bytes;
    for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(p[i], 0) << "byte " << i << " of " << bytes;
    be->free(p);
  }
  Rng rng(100);
  const auto host = rng.normal(1001);
  Floats a(*be, host), b(*be, host.size());
  be->copy(b.get(), a.get(), host.size() * sizeof(float));
  EXPECT_EQ(b.host(), host);
  be->zero(b.get(), host.size() * sizeof(float));
  be->synchronize();
  EXPECT_EQ(b.host(), std::vector<float>(host.size(), 0.0f));
}

// Memory accounting: bytes held now and the high-water mark, each allocation counted at its 64-byte rounded size.
TEST_F(OpsStorage, AllocationsAreCountedWithTheirPeak) {
  const size_t base = be->allocated_bytes();
  void* a = be->alloc(100);   // 128 bytes held
  void* b = be->alloc(1000);  // 1024
  EXPECT_EQ(be->allocated_bytes() - base, 1152u);
  EXPECT_EQ(be->peak_allocated_bytes() - base, 1152u);
  be->free(a);
  EXPECT_EQ(be->allocated_bytes() - base, 1024u);
  void* c = be->alloc(0);  // 64: a zero-byte request still holds a block
  EXPECT_EQ(be->allocated_bytes() - base, 1088u);
  EXPECT_EQ(be->peak_allocated_bytes() - base, 1152u) << "the peak fell or grew without a new high";
  be->free(b);
  be->free(c);
  be->free(nullptr);
  EXPECT_EQ(be->allocated_bytes(), base);
  EXPECT_EQ(be->peak_allocated_bytes() - base, 1152u);
  size_t used = 0, total = 0;
  EXPECT_FALSE(be->device_memory(&used, &total)) << "the CPU backend has no device to report";
}

TEST_F(OpsStorage, Elementwise) {
  // The sum or product of two floats is exact in double, so the fp32 op must match the rounded double exactly.
  for (size_t n : {size_t(1), size_t(13), size_t(100003)}) {
    Rng rng(101 + uint32_t(n));
    const auto a = rng.normal(n), b = rng.normal(n);
    Floats d_a(*be, a), d_b(*be, b), d_out(*be, n);
    be->add(d_out.get(), d_a.get(), d_b.get(), n);
    be->accumulate(d_a.get(), d_b.get(), n);
    be->scale(d_b.get(), 0.375f, n);
    std::vector<float> sum(n), scaled(n);
    for (size_t i = 0; i < n; ++i) sum[i] = float(double(a[i]) + double(b[i])), scaled[i] = float(double(b[i]) * 0.375);
    EXPECT_EQ(d_out.host(), sum) << n;
    EXPECT_EQ(d_a.host(), sum) << n;
    EXPECT_EQ(d_b.host(), scaled) << n;
    be->add(d_out.get(), d_out.get(), d_out.get(), n);  // in place
    for (float& x : sum) x *= 2.0f;
    EXPECT_EQ(d_out.host(), sum) << n;
  }
}

TEST_F(OpsStorage, RejectsBadArguments) {
  Floats qkv(*be, 2 * 4 * 30), out(*be, 2 * 4 * 10), lse(*be, 2 * 3 * 4), logits(*be, 2 * 5);
  EXPECT_THROW(be->attention_forward(out.get(), lse.get(), qkv.get(), 2, 4, 10, 3), Error);  // C % NH != 0
  Ints targets(*be, std::vector<int32_t>{1, 5});                                             // 5 is not < V
  Floats losses(*be, 2);
  EXPECT_THROW(be->crossentropy_forward(losses.get(), logits.get(), targets.get(), 2, 5, 5), Error);
}

// bf16: rounding to nearest, ties to even, checked on bit patterns whose answers are known.
uint32_t bits_of(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof(b));
  return b;
}
float float_of(uint32_t b) {
  float x;
  std::memcpy(&x, &b, sizeof(x));
  return x;
}

TEST_F(OpsStorage, Bf16RoundsToNearestTiesToEven) {
  EXPECT_EQ(bits_of(round_to_bf16(1.0f)), 0x3f800000u);
  EXPECT_EQ(bits_of(round_to_bf16(float_of(0x3f808000u))), 0x3f800000u);  // 1 + 2^-8, a tie: to the even 1
  EXPECT_EQ(bits_of(round_to_bf16(float_of(0x3f818000u))), 0x3f820000u);  // 1 + 3 * 2^-8, a tie: to the even side
  EXPECT_EQ(bits_of(round_to_bf16(float_of(0x3f808001u))), 0x3f810000u);  // just above a tie: up
  EXPECT_EQ(bits_of(round_to_bf16(float_of(0x3f807fffu))), 0x3f800000u);  // just below: down
  EXPECT_EQ(bits_of(round_to_bf16(float_of(0xbf80ffffu))), 0xbf810000u);  // negative: by magnitude
  EXPECT_EQ(round_to_bf16(float_of(0x7f7fffffu)), INFINITY);              // FLT_MAX is past the largest bf16
  EXPECT_EQ(round_to_bf16(-INFINITY), -INFINITY);
  EXPECT_TRUE(std::isnan(round_to_bf16(float_of(0x7f800001u))));  // a NaN whose payload lies in the dropped bits
  // Any value: low 16 bits clear, within half a bf16 ulp (at most 2^-8 of the value) of the input.
  Rng rng(200);
  for (float x : rng.normal(10000, 100.0f)) {
    const float r = round_to_bf16(x);
    ASSERT_EQ(bits_of(r) & 0xffffu, 0u) << x;
    ASSERT_LE(std::fabs(double(r) - x), std::ldexp(std::fabs(double(x)), -8)) << x;
  }
}

// A branch's output stored in bf16 (the projections' under bf16 storage): add and the fused residual layernorm give
// from it the bits they give from its values in fp32 (widened exactly).
TEST_F(OpsStorage, ResidualAddFromABf16BranchChangesNoValue) {
  using Halves = test::BackendArray<BFloat16>;
  const int N = 37, C = 45;
  Rng rng(232);
  const auto a = rng.normal(size_t(N) * C), w = rng.normal(C), bias = rng.normal(C);
  const auto b = test::rounded_to_bf16(rng.normal(size_t(N) * C, 2.0f));
  Floats d_a(*be, a), d_w(*be, w), d_bias(*be, bias), b32(*be, b);
  Halves b16(*be, test::bf16_values(b));
  std::vector<float> res[2][4];
  for (int k = 0; k < 2; ++k) {
    const TensorIn bk = k ? TensorIn(b16.get()) : TensorIn(b32.get());
    Floats sum(*be, a.size()), r(*be, a.size()), o(*be, a.size()), m(*be, N), s(*be, N);
    be->add(sum.get(), d_a.get(), bk, a.size());
    be->residual_layernorm_forward(r.get(), o.get(), m.get(), s.get(), d_a.get(), bk, d_w.get(), d_bias.get(), N, C);
    EXPECT_EQ(r.host(), sum.host()) << "the fused residual equals add, " << (k ? "bf16" : "fp32") << " b";
    res[k][0] = r.host(), res[k][1] = o.host(), res[k][2] = m.host(), res[k][3] = s.host();
  }
  for (int i = 0; i < 4; ++i) EXPECT_EQ(res[1][i], res[0][i]) << "residual layernorm from a bf16 b, output " << i;
}

// The gradient the model hands from a dense layer's backward pass to a layernorm's or to attention's (dC), stored in
// bf16 where attention is: the lm_head's and the MLP's first layer's dinp stored in bf16 are their fp32 dinp rounded,
// and layernorm_backward and attention_backward give from a bf16-stored dout the bits they give from the same values
// in fp32. A bf16 dout is refused at matmul precision fp32 (layernorm) and with fp32 qkv (attention).
TEST_F(OpsStorage, Bf16StoredInputGradientsChangeNoValueButTheirRounding) {
  using Halves = test::BackendArray<BFloat16>;
  using test::widened;
  Rng rng(231);
  be->set_matmul_precision(MatmulPrecision::bf16);
  {  // the lm_head's dinp and the MLP's first layer's
    const int N = 37, C = 45, V = 101, H = 67;
    const auto x = rng.normal(size_t(N) * C), wte = rng.normal(size_t(V) * C), gl = rng.normal(size_t(N) * V),
               wfc = rng.normal(size_t(C) * H), pre = rng.normal(size_t(N) * H, 2.5f), dg = rng.normal(size_t(N) * H);
    Floats d_x(*be, x), d_wte(*be, wte), d_gl(*be, gl), d_wfc(*be, wfc), d_pre(*be, pre);
    Floats dx32(*be, nans(x.size())), dw32(*be, wte.size()), dw16(*be, wte.size());
    Halves dx16(*be, x.size());
    be->matmul_backward_transposed(dx32.get(), dw32.get(), d_gl.get(), d_x.get(), d_wte.get(), N, C, V);
    be->matmul_backward_transposed(dx16.get(), dw16.get(), d_gl.get(), d_x.get(), d_wte.get(), N, C, V);
    EXPECT_EQ(widened(dx16.host()), test::rounded_to_bf16(dx32.host())) << "lm_head dinp stored in bf16";
    EXPECT_EQ(dw16.host(), dw32.host()) << "lm_head dwte beside a bf16-stored dinp";
    Floats g32(*be, dg), g16(*be, dg), fx32(*be, nans(x.size())), fw32(*be, wfc.size()), fb32(*be, size_t(H)),
        fw16(*be, wfc.size()), fb16(*be, size_t(H));
    Halves fx16(*be, x.size());
    be->matmul_gelu_backward(fx32.get(), fw32.get(), fb32.get(), g32.get(), d_pre.get(), d_x.get(), d_wfc.get(), N, C,
                             H);
    be->matmul_gelu_backward(fx16.get(), fw16.get(), fb16.get(), g16.get(), d_pre.get(), d_x.get(), d_wfc.get(), N, C,
                             H);
    EXPECT_EQ(widened(fx16.host()), test::rounded_to_bf16(fx32.host())) << "c_fc dinp stored in bf16";
    EXPECT_EQ(fw16.host(), fw32.host()) << "c_fc dweight beside a bf16-stored dinp";
    EXPECT_EQ(fb16.host(), fb32.host()) << "c_fc dbias beside a bf16-stored dinp";
  }
  {  // layernorm_backward from a bf16-stored dout
    const int N = 37, C = 45;
    const auto x = rng.normal(size_t(N) * C, 2.0f), w = rng.normal(C), b = rng.normal(C);
    const auto g = test::rounded_to_bf16(rng.normal(size_t(N) * C)), dx0 = rng.normal(x.size()), dw0 = rng.normal(C);
    Floats d_x(*be, x), d_w(*be, w), d_b(*be, b), out(*be, x.size()), m(*be, N), r(*be, N), g32(*be, g);
    Halves g16(*be, test::bf16_values(g));
    be->layernorm_forward(out.get(), m.get(), r.get(), d_x.get(), d_w.get(), d_b.get(), N, C);
    std::vector<float> res[2][3];
    for (int k = 0; k < 2; ++k) {
      Floats dx(*be, dx0), dw(*be, dw0), db(*be, dw0);
      be->layernorm_backward(dx.get(), dw.get(), db.get(), k ? TensorIn(g16.get()) : TensorIn(g32.get()), d_x.get(),
                             d_w.get(), m.get(), r.get(), N, C);
      res[k][0] = dx.host(), res[k][1] = dw.host(), res[k][2] = db.host();
    }
    for (int i = 0; i < 3; ++i) EXPECT_EQ(res[1][i], res[0][i]) << "layernorm_backward from a bf16 dout, output " << i;
    be->set_matmul_precision(MatmulPrecision::fp32);
    Floats dx(*be, dx0), dw(*be, dw0), db(*be, dw0);
    EXPECT_THROW(
        be->layernorm_backward(dx.get(), dw.get(), db.get(), g16.get(), d_x.get(), d_w.get(), m.get(), r.get(), N, C),
        Error);
    be->set_matmul_precision(MatmulPrecision::bf16);
  }
  {  // attention_backward (bf16 attention, HS 16) from a bf16-stored dout: D = dO . O reads its values
    const int B = 2, T = 21, AC = 32, NH = 2;
    const auto qkv = rng.normal(size_t(B) * T * 3 * AC), dout = test::rounded_to_bf16(rng.normal(size_t(B) * T * AC));
    Floats d_qkv(*be, qkv), d_dout(*be, dout), lse(*be, size_t(B) * NH * T), g32(*be, qkv.size());
    Halves qkv16(*be, qkv.size()), o16(*be, dout.size()), dout16(*be, test::bf16_values(dout)), gq16(*be, qkv.size()),
        gd16(*be, qkv.size());
    be->cast_to_bf16(qkv16.get(), d_qkv.get(), qkv.size());
    be->attention_forward(o16.get(), lse.get(), qkv16.get(), B, T, AC, NH);
    be->attention_backward(gq16.get(), d_dout.get(), qkv16.get(), o16.get(), lse.get(), B, T, AC, NH);
    be->attention_backward(gd16.get(), dout16.get(), qkv16.get(), o16.get(), lse.get(), B, T, AC, NH);
    EXPECT_EQ(widened(gd16.host()), widened(gq16.host())) << "attention dqkv from a bf16-stored dout";
    Floats o32(*be, dout.size());
    be->attention_forward(o32.get(), lse.get(), d_qkv.get(), B, T, AC, NH);
    EXPECT_THROW(be->attention_backward(g32.get(), dout16.get(), d_qkv.get(), o32.get(), lse.get(), B, T, AC, NH),
                 Error);  // a bf16 dout for fp32 qkv and out
  }
  be->set_matmul_precision(MatmulPrecision::fp32);
}

// bf16 storage (TensorIn/TensorOut, core/dtype.h): a layernorm, fused residual layernorm, GELU, attention or dense
// layer output stored in bf16 holds the fp32 output rounded to nearest even, bit for bit, with the same row
// statistics (the dense layer's with its bias stored in bf16, and so the fp32 one from that bias widened); GELU from a
// bf16-stored input gives the bits it gives from those values in fp32; under matmul precision bf16 the four matmul
// ops give the same bits from bf16-stored inputs as from the fp32-stored ones they round as they read, and so does
// bf16 attention from bf16-stored qkv and out; cast_to_bf16 rounds as round_to_bf16. Storage against those rules is
// refused.
TEST_F(OpsStorage, Bf16StorageChangesNoValue) {
  using Halves = test::BackendArray<BFloat16>;
  using test::widened;
  const int N = 37, C = 45, OC = 67, V = 101;
  Rng rng(230);
  const auto x = rng.normal(size_t(N) * C, 2.0f), y = rng.normal(size_t(N) * C), w = rng.normal(C), b = rng.normal(C),
             h = rng.normal(size_t(N) * OC, 3.0f);
  Floats d_x(*be, x), d_y(*be, y), d_w(*be, w), d_b(*be, b), d_h(*be, h);
  {
    Floats out32(*be, x.size()), m32(*be, N), r32(*be, N), m16(*be, N), r16(*be, N), res32(*be, x.size()),
        res16(*be, x.size()), gelu32(*be, h.size());
    Halves out16(*be, x.size()), gelu16(*be, h.size());
    be->layernorm_forward(out32.get(), m32.get(), r32.get(), d_x.get(), d_w.get(), d_b.get(), N, C);
    be->layernorm_forward(out16.get(), m16.get(), r16.get(), d_x.get(), d_w.get(), d_b.get(), N, C);
    EXPECT_EQ(widened(out16.host()), test::rounded_to_bf16(out32.host())) << "layernorm out";
    EXPECT_EQ(m16.host(), m32.host()) << "layernorm mean";
    EXPECT_EQ(r16.host(), r32.host()) << "layernorm rstd";
    be->residual_layernorm_forward(res32.get(), out32.get(), m32.get(), r32.get(), d_x.get(), d_y.get(), d_w.get(),
                                   d_b.get(), N, C);
    be->residual_layernorm_forward(res16.get(), out16.get(), m16.get(), r16.get(), d_x.get(), d_y.get(), d_w.get(),
                                   d_b.get(), N, C);
    EXPECT_EQ(widened(out16.host()), test::rounded_to_bf16(out32.host())) << "residual layernorm out";
    EXPECT_EQ(res16.host(), res32.host()) << "residual layernorm residual";
    EXPECT_EQ(r16.host(), r32.host()) << "residual layernorm rstd";
    be->gelu_forward(gelu32.get(), d_h.get(), h.size());
    be->gelu_forward(gelu16.get(), d_h.get(), h.size());
    EXPECT_EQ(widened(gelu16.host()), test::rounded_to_bf16(gelu32.host())) << "gelu out";
    // GELU from a bf16-stored input, forward into either storage and backward, against the same values in fp32.
    const auto dh = rng.normal(h.size()), dx0 = rng.normal(h.size());
    Floats d_hr(*be, test::rounded_to_bf16(h)), d_dh(*be, dh), gin32(*be, dx0), gin16(*be, dx0);
    Halves h16(*be, h.size());
    be->cast_to_bf16(h16.get(), d_h.get(), h.size());
    be->gelu_forward(gelu32.get(), d_hr.get(), h.size());
    const std::vector<float> from32 = gelu32.host();
    be->gelu_forward(gelu32.get(), h16.get(), h.size());
    EXPECT_EQ(gelu32.host(), from32) << "gelu out from a bf16-stored input";
    be->gelu_forward(gelu16.get(), h16.get(), h.size());
    EXPECT_EQ(widened(gelu16.host()), test::rounded_to_bf16(from32)) << "gelu bf16 out from a bf16-stored input";
    be->gelu_backward(gin32.get(), d_hr.get(), d_dh.get(), h.size());
    be->gelu_backward(gin16.get(), h16.get(), d_dh.get(), h.size());
    EXPECT_EQ(gin16.host(), gin32.host()) << "gelu dinp from a bf16-stored input";
  }
  {  // ties either way, past the largest bf16, infinity, signed zero and a denormal, then random values
    std::vector<float> v = {1.00390625f, 1.01171875f, 3.4028235e38f, -INFINITY, -0.0f, 1e-40f};
    for (float r : x) v.push_back(r);
    Floats d_v(*be, v);
    Halves cast(*be, v.size());
    be->cast_to_bf16(cast.get(), d_v.get(), v.size());
    const std::vector<BFloat16> got = cast.host();
    for (size_t i = 0; i < v.size(); ++i) {
      ASSERT_EQ(got[i].bits, uint16_t(bits_of(round_to_bf16(v[i])) >> 16)) << "cast_to_bf16 of " << v[i];
      ASSERT_EQ(to_bf16(v[i]).bits, got[i].bits) << "to_bf16 of " << v[i];
    }
  }
  {  // attention with bf16 attention (HS 16): from bf16-stored qkv the stored output is the fp32 one rounded, with the
     // same lse, and the backward pass gives the same bits from either storage (q, k, v rounded as read, D reading O
     // rounded both ways); qkv and out stored unlike, or bf16 with fp32 attention (HS 8), are refused.
    const int B = 2, T = 21, AC = 32, NH = 2;
    const auto qkv = rng.normal(size_t(B) * T * 3 * AC), dout = rng.normal(size_t(B) * T * AC);
    Floats d_qkv(*be, qkv), d_dout(*be, dout), o32(*be, dout.size()), lse32(*be, size_t(B) * NH * T),
        lse16(*be, size_t(B) * NH * T), g32(*be, qkv.size()), g16(*be, qkv.size());
    Halves o16(*be, dout.size()), qkv16(*be, qkv.size());
    be->cast_to_bf16(qkv16.get(), d_qkv.get(), qkv.size());
    be->set_matmul_precision(MatmulPrecision::bf16);
    be->attention_forward(o32.get(), lse32.get(), d_qkv.get(), B, T, AC, NH);
    be->attention_forward(o16.get(), lse16.get(), qkv16.get(), B, T, AC, NH);
    EXPECT_EQ(widened(o16.host()), test::rounded_to_bf16(o32.host())) << "attention out";
    EXPECT_EQ(lse16.host(), lse32.host()) << "attention lse";
    be->attention_backward(g32.get(), d_dout.get(), d_qkv.get(), o32.get(), lse32.get(), B, T, AC, NH);
    be->attention_backward(g16.get(), d_dout.get(), qkv16.get(), o16.get(), lse32.get(), B, T, AC, NH);
    EXPECT_EQ(g16.host(), g32.host()) << "attention dqkv from bf16-stored qkv and out";
    // dqkv stored in bf16 (where qkv is): the fp32 one rounded; and the qkv layer's backward pass from it gives the
    // fp32 dqkv's results for dinp and dweight (its GEMMs round dout anyway), dbias summing the rounded values.
    Halves gq16(*be, qkv.size());
    be->attention_backward(gq16.get(), d_dout.get(), qkv16.get(), o16.get(), lse32.get(), B, T, AC, NH);
    const std::vector<float> dq_rounded = test::rounded_to_bf16(g32.host());
    EXPECT_EQ(widened(gq16.host()), dq_rounded) << "attention dqkv stored in bf16";
    {
      const int N = B * T, IC = 19, OC = 3 * AC;
      const auto xin = rng.normal(size_t(N) * IC), win = rng.normal(size_t(IC) * OC);
      Floats d_xin(*be, xin), d_win(*be, win), d_dq(*be, dq_rounded);
      std::vector<float> res[2][3];
      for (int k = 0; k < 2; ++k) {
        Floats dx(*be, nans(xin.size())), dw(*be, win.size()), db(*be, size_t(OC));
        be->matmul_backward(dx.get(), dw.get(), db.get(), k ? TensorIn(gq16.get()) : TensorIn(d_dq.get()), d_xin.get(),
                            d_win.get(), N, IC, OC);
        res[k][0] = dx.host(), res[k][1] = dw.host(), res[k][2] = db.host();
      }
      for (int i = 0; i < 3; ++i)
        EXPECT_EQ(res[1][i], res[0][i]) << "matmul backward from a bf16-stored dout, output " << i;
      // dinp stored in bf16: the fp32 one rounded.
      Halves dx16(*be, xin.size());
      Floats dw(*be, win.size()), db(*be, size_t(OC));
      be->matmul_backward(dx16.get(), dw.get(), db.get(), d_dq.get(), d_xin.get(), d_win.get(), N, IC, OC);
      EXPECT_EQ(widened(dx16.host()), test::rounded_to_bf16(res[0][0])) << "matmul backward's dinp stored in bf16";
      // The MLP's first layer from a bf16-stored gradient at the GELU's output: what the same values in fp32 give.
      const auto pre = rng.normal(size_t(N) * OC, 2.5f);
      const std::vector<float> dg = test::rounded_to_bf16(rng.normal(size_t(N) * OC));
      Floats d_pre(*be, pre);
      std::vector<float> gel[2][3];
      for (int k = 0; k < 2; ++k) {
        Floats g32(*be, dg), gx(*be, nans(xin.size())), gw(*be, win.size()), gb(*be, size_t(OC));
        Halves g16(*be, test::bf16_values(dg));
        be->matmul_gelu_backward(gx.get(), gw.get(), gb.get(), k ? TensorOut(g16.get()) : TensorOut(g32.get()),
                                 d_pre.get(), d_xin.get(), d_win.get(), N, IC, OC);
        gel[k][0] = gx.host(), gel[k][1] = gw.host(), gel[k][2] = gb.host();
      }
      for (int i = 0; i < 3; ++i)
        EXPECT_EQ(gel[1][i], gel[0][i]) << "matmul_gelu_backward from a bf16-stored dout, output " << i;
    }
    EXPECT_THROW(be->attention_backward(gq16.get(), d_dout.get(), d_qkv.get(), o32.get(), lse32.get(), B, T, AC, NH),
                 Error);  // a bf16 dqkv for an fp32 qkv
    EXPECT_THROW(be->attention_forward(o16.get(), lse16.get(), d_qkv.get(), B, T, AC, NH), Error);  // unlike
    EXPECT_THROW(be->attention_backward(g16.get(), d_dout.get(), qkv16.get(), o32.get(), lse32.get(), B, T, AC, NH),
                 Error);
    EXPECT_THROW(be->attention_forward(o16.get(), lse16.get(), qkv16.get(), B, T, AC, 4), Error);
    be->set_matmul_precision(MatmulPrecision::fp32);
    {  // a bf16-stored dout needs matmul precision bf16
      Floats dx(*be, size_t(B) * T * 19), dw(*be, size_t(19) * 3 * AC), x19(*be, size_t(B) * T * 19);
      EXPECT_THROW(be->matmul_backward(dx.get(), dw.get(), nullptr, gq16.get(), x19.get(), dw.get(), B * T, 19, 3 * AC),
                   Error);
    }
  }
  // The matmuls at matmul precision bf16, with a bias and pre-filled gradients, once on fp32-stored inputs and once
  // on their bf16 copies (cast on the backend); the lm_head's reads x as its input and wte (V, C).
  const auto wm = rng.normal(size_t(C) * OC), bias = rng.normal(OC), wte = rng.normal(size_t(V) * C),
             g = rng.normal(size_t(N) * OC), gl = rng.normal(size_t(N) * V), dx0 = rng.normal(x.size()),
             dw0 = rng.normal(wm.size()), db0 = rng.normal(OC), dwte0 = rng.normal(wte.size());
  Floats d_wm(*be, wm), d_bias(*be, bias), d_wte(*be, wte), d_g(*be, g), d_gl(*be, gl);
  Halves x16(*be, x.size()), wm16(*be, wm.size()), wte16(*be, wte.size());
  be->cast_to_bf16(x16.get(), d_x.get(), x.size());
  be->cast_to_bf16(wm16.get(), d_wm.get(), wm.size());
  be->cast_to_bf16(wte16.get(), d_wte.get(), wte.size());
  be->set_matmul_precision(MatmulPrecision::bf16);
  std::vector<float> res[2][7];
  for (int k = 0; k < 2; ++k) {
    const TensorIn xi = k ? TensorIn(x16.get()) : TensorIn(d_x.get()), wi = k ? TensorIn(wm16.get()) : d_wm.get(),
                   ti = k ? TensorIn(wte16.get()) : d_wte.get();
    Floats out(*be, size_t(N) * OC), dx(*be, dx0), dw(*be, dw0), db(*be, db0), lout(*be, size_t(N) * V), ldx(*be, dx0),
        ldwte(*be, dwte0);
    be->matmul_forward(out.get(), xi, wi, d_bias.get(), N, C, OC);
    be->matmul_backward(dx.get(), dw.get(), db.get(), d_g.get(), xi, wi, N, C, OC);
    be->matmul_forward_transposed(lout.get(), xi, ti, N, C, V);
    be->matmul_backward_transposed(ldx.get(), ldwte.get(), d_gl.get(), xi, ti, N, C, V);
    res[k][0] = out.host(), res[k][1] = dx.host(), res[k][2] = dw.host(), res[k][3] = db.host();
    res[k][4] = lout.host(), res[k][5] = ldx.host(), res[k][6] = ldwte.host();
  }
  const char* names[7] = {"out", "dinp", "dweight", "dbias", "lm_head out", "lm_head dinp", "lm_head dwte"};
  for (int i = 0; i < 7; ++i) EXPECT_EQ(res[1][i], res[0][i]) << "matmul " << names[i] << ": bf16 storage changed it";
  // A bf16-stored output with its bias in bf16, from either storage of the inputs, and without a bias: the fp32 output
  // (from the bias widened) rounded.
  Floats out(*be, size_t(N) * OC), d_biasr(*be, test::rounded_to_bf16(bias));
  Halves out16(*be, size_t(N) * OC), bias16(*be, size_t(OC));
  be->cast_to_bf16(bias16.get(), d_bias.get(), size_t(OC));
  for (bool with_bias : {true, false}) {
    be->matmul_forward(out.get(), d_x.get(), d_wm.get(), with_bias ? TensorIn(d_biasr.get()) : nullptr, N, C, OC);
    const std::vector<float> want = test::rounded_to_bf16(out.host());
    for (int k = 0; k < 2; ++k) {
      be->matmul_forward(out16.get(), k ? TensorIn(x16.get()) : TensorIn(d_x.get()),
                         k ? TensorIn(wm16.get()) : TensorIn(d_wm.get()), with_bias ? TensorIn(bias16.get()) : nullptr,
                         N, C, OC);
      EXPECT_EQ(widened(out16.host()), want) << "matmul bf16 out, " << (k ? "bf16" : "fp32") << " inputs, "
                                             << (with_bias ? "with" : "without") << " a bias";
    }
  }
  // The lm_head's output stored in bf16 is its fp32 output rounded; its backward pass gives the same bits from dout
  // stored in bf16 as from the fp32 dout it rounds as it reads.
  {
    Floats lout(*be, size_t(N) * V), ldx(*be, dx0), ldwte(*be, dwte0);
    Halves lout16(*be, size_t(N) * V), gl16(*be, gl.size());
    be->matmul_forward_transposed(lout16.get(), x16.get(), wte16.get(), N, C, V);
    EXPECT_EQ(widened(lout16.host()), test::rounded_to_bf16(res[0][4])) << "lm_head bf16 out";
    be->cast_to_bf16(gl16.get(), d_gl.get(), gl.size());
    be->matmul_backward_transposed(ldx.get(), ldwte.get(), gl16.get(), x16.get(), wte16.get(), N, C, V);
    EXPECT_EQ(ldx.host(), res[0][5]) << "lm_head dinp from a bf16-stored dout";
    EXPECT_EQ(ldwte.host(), res[0][6]) << "lm_head dwte from a bf16-stored dout";
  }
  EXPECT_THROW(be->matmul_forward(out.get(), x16.get(), d_wm.get(), nullptr, N, C, OC), Error);         // stored unlike
  EXPECT_THROW(be->matmul_forward(out16.get(), x16.get(), wm16.get(), d_bias.get(), N, C, OC), Error);  // bias unlike
  EXPECT_THROW(be->matmul_forward(out.get(), x16.get(), wm16.get(), bias16.get(), N, C, OC), Error);
  be->set_matmul_precision(MatmulPrecision::fp32);
  EXPECT_THROW(be->matmul_forward(out.get(), x16.get(), wm16.get(), nullptr, N, C, OC), Error);  // bf16 under fp32
  EXPECT_THROW(be->matmul_forward(out16.get(), d_x.get(), d_wm.get(), bias16.get(), N, C, OC), Error);
  {
    Halves lout16(*be, size_t(N) * V), gl16(*be, gl.size());
    Floats ldx(*be, dx0), ldwte(*be, dwte0);
    EXPECT_THROW(be->matmul_forward_transposed(lout16.get(), d_x.get(), d_wte.get(), N, C, V), Error);
    EXPECT_THROW(be->matmul_backward_transposed(ldx.get(), ldwte.get(), gl16.get(), d_x.get(), d_wte.get(), N, C, V),
                 Error);
  }
  // The cross-entropy on logits stored in bf16: the losses are those of the same values in fp32, and dlogits (into
  // either storage, in place over the bf16 logits too) is the fp32 one rounded, bit for bit.
  {
    const int R = 13, K = 211;
    const auto logits = test::rounded_to_bf16(rng.normal(size_t(R) * K, 4.0f));
    std::vector<int32_t> tg(R);
    for (int r = 0; r < R; ++r) tg[size_t(r)] = int32_t((r * 37) % K);
    test::BackendArray<int32_t> d_tg(*be, tg);
    Floats d_lg(*be, logits), loss32(*be, R), loss16(*be, R), dl32(*be, logits.size()), dl32b(*be, logits.size());
    Halves lg16(*be, logits.size()), dl16(*be, logits.size());
    be->cast_to_bf16(lg16.get(), d_lg.get(), logits.size());
    be->crossentropy_forward(loss32.get(), d_lg.get(), d_tg.get(), R, K, K);
    be->crossentropy_forward(loss16.get(), lg16.get(), d_tg.get(), R, K, K);
    EXPECT_EQ(loss16.host(), loss32.host()) << "cross-entropy from bf16-stored logits";
    be->crossentropy_backward(dl32.get(), d_lg.get(), d_tg.get(), 0.25f, R, K, K);
    be->crossentropy_backward(dl32b.get(), lg16.get(), d_tg.get(), 0.25f, R, K, K);
    EXPECT_EQ(dl32b.host(), dl32.host()) << "dlogits from bf16-stored logits";
    be->crossentropy_backward(dl16.get(), d_lg.get(), d_tg.get(), 0.25f, R, K, K);
    const std::vector<float> want = test::rounded_to_bf16(dl32.host());
    EXPECT_EQ(widened(dl16.host()), want) << "dlogits stored in bf16";
    be->crossentropy_backward(lg16.get(), lg16.get(), d_tg.get(), 0.25f, R, K, K);
    EXPECT_EQ(widened(lg16.host()), want) << "dlogits stored in bf16 over the logits";
  }
}

}  // namespace
}  // namespace ember
