// The determinism of every CUDA op with a reduction: two identical runs agree bit for bit at both matmul precisions.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda_ops_test_util.h"

namespace ember {
namespace {

// Two identical runs of every op with a reduction must agree bit for bit (no atomics, fixed trees), at both matmul
// precisions (bf16 takes the tensor-core attention kernels here: HS = 16).
class CudaOpsDeterministic : public CudaOps, public ::testing::WithParamInterface<MatmulPrecision> {};
TEST_P(CudaOpsDeterministic, TwoRunsAgreeBitwise) {
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
INSTANTIATE_TEST_SUITE_P(Precision, CudaOpsDeterministic,
                         ::testing::Values(MatmulPrecision::fp32, MatmulPrecision::bf16),
                         [](const auto& info) { return matmul_precision_name(info.param); });

}  // namespace
}  // namespace ember
