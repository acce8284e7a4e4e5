// CUDA cross-entropy, softmax (cuda_loss.cu), sum of squares and AdamW, whole and over segments (cuda_optim.cu),
// against the CPU backend.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_ops_test_util.h"

namespace ember {
namespace {

struct LossShape {
  int N, V;
};
class CudaOpsLossOptim : public CudaOps, public ::testing::WithParamInterface<LossShape> {};
TEST_P(CudaOpsLossOptim, CrossEntropyAndSoftmax) {
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
    be[k]->crossentropy_forward(l.get(), x.get(), t.get(), N, V, V);
    be[k]->crossentropy_backward(d.get(), x.get(), t.get(), dloss, N, V, V);  // overwrites the 5.0 fill
    be[k]->softmax_forward(p.get(), x.get(), 0.7f, N, V);
    loss[k] = l.host(), dl[k] = d.host(), probs[k] = p.host();
    be[k]->crossentropy_backward(x.get(), x.get(), t.get(), dloss, N, V, V);  // in place: dlogits aliases logits
    dl_inplace[k] = x.host();
  }
  // Each row is a V-term sum of exps (max-shifted), so K = V.
  expect_close("crossentropy_forward", loss[1], loss[0], fp32_tol(V, loss[0]));
  expect_close("crossentropy_backward", dl[1], dl[0], fp32_tol(V, dl[0]));
  expect_close("crossentropy_backward in place", dl_inplace[1], dl[0], fp32_tol(V, dl[0]));
  expect_close("softmax_forward T=0.7", probs[1], probs[0], fp32_tol(V, probs[0]));
}

// Rows ld > V apart (the padded vocabulary), with NaN and huge values in the padding: the same results as the CPU
// over the V real columns (which match the dense rows bitwise, OpsLossOptim.CrossEntropyOverPaddedRows), and the
// padding of dlogits written as zero by the backward and the fused kernels, into fp32 and bf16.
TEST_F(CudaOpsLossOptim, CrossEntropyOverPaddedRows) {
  const int N = 9, V = 45, ld = 128;
  Rng rng(172);
  const Floats dense = rng.normal(size_t(N) * V, 3.0f);
  const Ints targets = rng.tokens(N, V);
  Floats padded(size_t(N) * ld);
  for (int r = 0; r < N; ++r)
    for (int j = 0; j < ld; ++j) padded[size_t(r) * ld + j] = j < V ? dense[size_t(r) * V + j] : (j % 2 ? NAN : 1e30f);
  Floats loss[2], dl[2], fused_loss[2], fused[2];
  Halves dl16[2];
  Backend* be[2] = {cpu.get(), gpu.get()};
  for (int k = 0; k < 2; ++k) {
    FBuf x(*be[k], padded), l(*be[k], Floats(N)), d(*be[k], nans(padded.size())), fl(*be[k], Floats(N));
    IBuf t(*be[k], targets);
    be[k]->crossentropy_forward(l.get(), x.get(), t.get(), N, V, ld);
    be[k]->crossentropy_backward(d.get(), x.get(), t.get(), 0.5f, N, V, ld);
    loss[k] = l.host(), dl[k] = d.host();
    be[k]->set_matmul_precision(MatmulPrecision::bf16);
    HBuf d16(*be[k], size_t(N) * ld);
    be[k]->crossentropy_backward(d16.get(), x.get(), t.get(), 0.5f, N, V, ld);
    dl16[k] = d16.host();
    be[k]->set_matmul_precision(MatmulPrecision::fp32);
    be[k]->crossentropy_forward_backward(fl.get(), x.get(), t.get(), 0.5f, N, V, ld);
    fused_loss[k] = fl.host(), fused[k] = x.host();
  }
  for (int r = 0; r < N; ++r)
    for (int j = V; j < ld; ++j) {
      const size_t i = size_t(r) * ld + j;
      ASSERT_EQ(dl[1][i], 0.0f) << "dlogits padding, row " << r << " column " << j;
      ASSERT_EQ(fused[1][i], 0.0f) << "fused dlogits padding, row " << r << " column " << j;
      ASSERT_EQ(dl16[1][i].bits, 0u) << "bf16 dlogits padding, row " << r << " column " << j;
    }
  // Each row is a V-term sum of exps (max-shifted), so K = V, as CrossEntropyAndSoftmax; the CPU's padding is zero too.
  expect_close("crossentropy_forward over padded rows", loss[1], loss[0], fp32_tol(V, loss[0]));
  expect_close("crossentropy_backward over padded rows", dl[1], dl[0], fp32_tol(V, dl[0]));
  expect_close("fused classifier losses over padded rows", fused_loss[1], fused_loss[0], fp32_tol(V, fused_loss[0]));
  expect_close("fused classifier dlogits over padded rows", fused[1], fused[0], fp32_tol(V, fused[0]));
  expect_close_bf16("bf16 dlogits over padded rows", dl16[1], dl16[0], fp32_tol(V, widened(dl16[0])));
}

// The cross-entropy on logits stored in bf16, as the model keeps them under matmul precision bf16 (the values rounded
// on the host, the same on both backends): the losses and an fp32 dlogits within the tolerances of
// CrossEntropyAndSoftmax; dlogits stored in bf16, in place over the logits, within those plus a bf16 ulp
// (expect_close_bf16).
TEST_P(CudaOpsLossOptim, CrossEntropyFromBf16Logits) {
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
    be[k]->crossentropy_forward(l.get(), x.get(), t.get(), N, V, V);
    be[k]->crossentropy_backward(d.get(), x.get(), t.get(), dloss, N, V, V);
    loss[k] = l.host(), dl[k] = d.host();
    be[k]->crossentropy_backward(x.get(), x.get(), t.get(), dloss, N, V, V);
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
// The fused classifier against the CPU's two ops (its default), in fp32 and bf16 storage, with an out-of-range target
// in the last row: a NaN loss and row, as the separate kernels give. The fused kernel sums in another order (online
// softmax), so the usual fp32 tolerances apply, and bf16's (expect_close_bf16) to the rounded dlogits.
TEST_P(CudaOpsLossOptim, FusedClassifierMatchesTheTwoOps) {
  const auto [N, V] = GetParam();
  Rng rng(23 + uint32_t(V));
  const Floats raw = rng.normal(size_t(N) * V, 3.0f);
  const Ints valid = rng.tokens(N, V);  // the CPU refuses an out-of-range target: it gets a valid one there
  Ints targets = valid;
  if (N > 1) targets[size_t(N) - 1] = V;          // out of range
  const size_t rows = N > 1 ? size_t(N) - 1 : 1;  // the rows with a valid target
  const float dloss = 1.0f / float(N);
  Backend* be[2] = {cpu.get(), gpu.get()};
  auto run = [&](int k, auto& x, FBuf& l, IBuf& t) {
    if (k == 0) {  // the reference: the two plain ops
      be[k]->crossentropy_forward(l.get(), x.get(), t.get(), N, V, V);
      be[k]->crossentropy_backward(x.get(), x.get(), t.get(), dloss, N, V, V);
    } else {
      be[k]->crossentropy_forward_backward(l.get(), x.get(), t.get(), dloss, N, V, V);
    }
  };
  auto check_nan_row = [&](const Floats& loss, const Floats& dl) {
    if (N == 1) return;
    EXPECT_TRUE(std::isnan(loss[rows])) << loss[rows];
    size_t finite = 0;
    for (size_t j = 0; j < size_t(V); ++j) finite += !std::isnan(dl[rows * V + j]);
    EXPECT_EQ(finite, 0u) << "the out-of-range row holds non-NaN values";
  };
  Floats loss[2], dl32[2];
  Halves dl16[2];
  for (int k = 0; k < 2; ++k) {  // fp32 storage
    FBuf x(*be[k], raw), l(*be[k], Floats(N));
    IBuf t(*be[k], k == 0 ? valid : targets);
    run(k, x, l, t);
    loss[k] = l.host(), dl32[k] = x.host();
  }
  check_nan_row(loss[1], dl32[1]);
  for (int k = 0; k < 2; ++k) loss[k].resize(rows), dl32[k].resize(rows * V);
  expect_close("fused classifier loss, fp32 logits", loss[1], loss[0], fp32_tol(V, loss[0]));
  expect_close("fused classifier dlogits, fp32", dl32[1], dl32[0], fp32_tol(V, dl32[0]));
  Halves logits16(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) logits16[i] = to_bf16(raw[i]);
  for (int k = 0; k < 2; ++k) {  // bf16 storage
    HBuf x(*be[k], logits16);
    FBuf l(*be[k], Floats(N));
    IBuf t(*be[k], k == 0 ? valid : targets);
    run(k, x, l, t);
    loss[k] = l.host(), dl16[k] = x.host();
  }
  check_nan_row(loss[1], widened(dl16[1]));
  for (int k = 0; k < 2; ++k) loss[k].resize(rows), dl16[k].resize(rows * V);
  expect_close("fused classifier loss, bf16 logits", loss[1], loss[0], fp32_tol(V, loss[0]));
  expect_close_bf16("fused classifier dlogits, bf16", dl16[1], dl16[0], fp32_tol(V, widened(dl16[0])));
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaOpsLossOptim,
                         ::testing::Values(LossShape{37, 101}, LossShape{3, 50257}, LossShape{5, 1}),
                         [](const auto& info) {
                           return "N" + std::to_string(info.param.N) + "_V" + std::to_string(info.param.V);
                         });

TEST_F(CudaOpsLossOptim, SumSquares) {
  for (size_t n : {size_t(0), size_t(1), size_t(1000003)}) {
    const Floats x = Rng(19).normal(n);
    FBuf a(*cpu, x), b(*gpu, x);
    const double want = cpu->sum_squares(a.get(), n), got = gpu->sum_squares(b.get(), n);
    // fp64 sums of fp32 squares (exact products): the orders differ, each off by ~sqrt(n) 2^-53 relative.
    EXPECT_NEAR(got, want, 1e-12 * want) << "n = " << n;
    EXPECT_EQ(gpu->sum_squares(b.get(), n), got) << "n = " << n << ": two runs differ";
  }
}

TEST_F(CudaOpsLossOptim, AdamW) {
  const size_t n = 1003;
  Rng rng(23);
  const Floats p0 = rng.normal(n), m0 = rng.normal(n, 0.1f), g1 = rng.normal(n), g2 = rng.normal(n);
  Floats v0 = rng.normal(n, 0.1f);
  for (float& x : v0) x = x * x;  // second moments are non-negative
  Floats p[2], m[2], v[2];
  Backend* be[2] = {cpu.get(), gpu.get()};
  for (int k = 0; k < 2; ++k) {
    FBuf pi(*be[k], p0), mi(*be[k], m0), vi(*be[k], v0), a(*be[k], g1), b(*be[k], g2);
    be[k]->adamw_update(pi.get(), a.get(), mi.get(), vi.get(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, 1.0f);
    be[k]->adamw_update(pi.get(), b.get(), mi.get(), vi.get(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 4, 0.37f);
    p[k] = pi.host(), m[k] = mi.host(), v[k] = vi.host();
  }
  // A handful of roundings per element; nvcc may contract a*b+c into FMAs where the CPU rounds twice: K = 4.
  expect_close("adamw params", p[1], p[0], fp32_tol(4, p[0]));
  expect_close("adamw m", m[1], m[0], fp32_tol(4, m[0]));
  expect_close("adamw v", v[1], v[0], fp32_tol(4, v[0]));
}

// The one-kernel update over segments against the CPU's (one adamw_update per segment): ragged segments with gaps,
// more threads than some segments hold elements, and a span longer than one grid-stride pass (4096 x 256 threads).
TEST_F(CudaOpsLossOptim, AdamWSegmentsMatchTheCpu) {
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
    for (int t = 1; t <= 2; ++t)  // the second step with gradients clipped by half
      be[k]->adamw_update_segments(pi.get(), gi.get(), mi.get(), vi.get(), segs.data(), segs.size(), 1e-3f, 0.9f, 0.95f,
                                   1e-8f, t, t == 2 ? 0.5f : 1.0f);
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

}  // namespace
}  // namespace ember
