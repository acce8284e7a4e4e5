// CPU cross-entropy, softmax and the fast exp they use (cpu_loss.cpp, cpu_common.h), and the optimizer's ops:
// sum of squares and AdamW, whole and over segments (cpu_optim.cpp), against float64 references.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/cpu_common.h"
#include "ops_test_util.h"

namespace ember {
namespace {

class OpsLossOptim : public CpuOpsTest {};

INSTANTIATE_TEST_SUITE_P(Shapes, OpsLossOptim, testing::ValuesIn(kShapes), shape_name);

TEST_P(OpsLossOptim, CrossEntropy) {
  const auto [B, T, C, NH] = GetParam();
  const int N = B * T, V = 8 * C + 3;
  const float dloss = 1.0f / float(N);
  Rng rng(stream(7));
  const auto logits = rng.normal(size_t(N) * V, 3.0f, 10.0f);  // a large offset: the max shift must cancel it
  const auto targets = rng.tokens(N, V);
  Floats d_logits(*be, logits), d_losses(*be, N), d_dlogits(*be, logits.size());
  Ints d_targets(*be, targets);
  be->crossentropy_forward(d_losses.get(), d_logits.get(), d_targets.get(), N, V, V);
  Vec ld = to_double(logits);
  const Vec losses = ref_crossentropy(ld, targets, N, V);
  expect_close("crossentropy loss", d_losses.host(), losses, fp32_tol(V, losses));

  // Into a separate buffer (whose old contents must be overwritten), then in place over the logits.
  be->copy_to_device(d_dlogits.get(), rng.normal(logits.size()).data(), logits.size() * sizeof(float));
  be->crossentropy_backward(d_dlogits.get(), d_logits.get(), d_targets.get(), dloss, N, V, V);
  Vec dl = ref_softmax(ld, N, V);
  for (int r = 0; r < N; ++r) {
    dl[size_t(r) * V + targets[r]] -= 1.0;
    for (int j = 0; j < V; ++j) dl[size_t(r) * V + j] *= dloss;
  }
  const Tol tol = fp32_tol(V, dl);  // the softmax normaliser is a V-term sum
  const auto got = d_dlogits.host();
  expect_close("crossentropy dlogits", got, dl, tol);
  be->crossentropy_backward(d_logits.get(), d_logits.get(), d_targets.get(), dloss, N, V, V);
  const auto got_inplace = d_logits.host();
  EXPECT_EQ(0, std::memcmp(got.data(), got_inplace.data(), got.size() * sizeof(float)))
      << "in-place crossentropy_backward differs from the out-of-place result";
  auto loss = [&] {
    const Vec l = ref_crossentropy(ld, targets, N, V);
    double s = 0.0;
    for (double x : l) s += double(dloss) * x;
    return s;
  };
  expect_fd("crossentropy dlogits", got, std::vector<float>(got.size(), 0.0f),
            finite_differences(ld, loss, rng, fd_points(double(N) * V)), tol);
}

// Rows ld > V apart (the padded vocabulary): the losses and dlogits of the V real columns are bitwise those of the
// same rows stored densely, the padding columns (NaN and huge values here) take no part, and the backward pass
// writes them as zero, into fp32 and bf16 storage, in place and not.
TEST_F(OpsLossOptim, CrossEntropyOverPaddedRows) {
  const int N = 9, V = 45, ld = 128;
  Rng rng(171);
  const auto dense = rng.normal(size_t(N) * V, 3.0f);
  const auto targets = rng.tokens(N, V);
  std::vector<float> padded(size_t(N) * ld, NAN);
  for (int r = 0; r < N; ++r)
    for (int j = 0; j < ld; ++j) padded[size_t(r) * ld + j] = j < V ? dense[size_t(r) * V + j] : (j % 2 ? NAN : 1e30f);
  Floats d_dense(*be, dense), d_padded(*be, padded), l_dense(*be, N), l_padded(*be, N), g_dense(*be, dense.size()),
      g_padded(*be, padded.size());
  Ints d_targets(*be, targets);
  be->crossentropy_forward(l_dense.get(), d_dense.get(), d_targets.get(), N, V, V);
  be->crossentropy_forward(l_padded.get(), d_padded.get(), d_targets.get(), N, V, ld);
  EXPECT_EQ(l_padded.host(), l_dense.host()) << "losses over padded rows";
  be->crossentropy_backward(g_dense.get(), d_dense.get(), d_targets.get(), 0.5f, N, V, V);
  be->crossentropy_backward(g_padded.get(), d_padded.get(), d_targets.get(), 0.5f, N, V, ld);
  auto check = [&](const std::vector<float>& got, const char* what) {
    const std::vector<float> want = g_dense.host();
    for (int r = 0; r < N; ++r)
      for (int j = 0; j < ld; ++j) {
        const float g = got[size_t(r) * ld + j], w = j < V ? want[size_t(r) * V + j] : 0.0f;
        ASSERT_EQ(std::bit_cast<uint32_t>(g), std::bit_cast<uint32_t>(w)) << what << " row " << r << " column " << j;
      }
  };
  check(g_padded.host(), "dlogits over padded rows");
  be->crossentropy_backward(d_padded.get(), d_padded.get(), d_targets.get(), 0.5f, N, V, ld);
  check(d_padded.host(), "dlogits over padded rows, in place");
  // bf16 storage: dlogits rounded, the padding zero.
  be->set_matmul_precision(MatmulPrecision::bf16);
  test::BackendArray<BFloat16> h16(*be, padded.size());
  be->crossentropy_backward(h16.get(), d_dense.get(), d_targets.get(), 0.5f, N, V, V);  // dense into the front
  const std::vector<BFloat16> dense16 = h16.host();
  be->copy_to_device(d_padded.get(), padded.data(), padded.size() * sizeof(float));
  be->crossentropy_backward(h16.get(), d_padded.get(), d_targets.get(), 0.5f, N, V, ld);
  const std::vector<BFloat16> got16 = h16.host();
  for (int r = 0; r < N; ++r)
    for (int j = 0; j < ld; ++j)
      ASSERT_EQ(got16[size_t(r) * ld + j].bits, j < V ? dense16[size_t(r) * V + j].bits : uint16_t(0))
          << "bf16 dlogits over padded rows, row " << r << " column " << j;
  be->set_matmul_precision(MatmulPrecision::fp32);
  EXPECT_THROW(be->crossentropy_forward(l_padded.get(), d_padded.get(), d_targets.get(), N, V, V - 1), Error);
}

TEST_P(OpsLossOptim, Softmax) {
  const auto [B, T, C, NH] = GetParam();
  const int N = B * T, V = 8 * C + 3;
  Rng rng(stream(8));
  const auto logits = rng.normal(size_t(N) * V, 3.0f);
  Floats d_logits(*be, logits), d_probs(*be, logits.size());
  for (float temperature : {1.0f, 0.7f, 2.0f}) {
    be->softmax_forward(d_probs.get(), d_logits.get(), temperature, N, V);
    const Vec p = ref_softmax(to_double(logits), N, V, temperature);
    expect_close("softmax t=" + std::to_string(temperature), d_probs.host(), p, fp32_tol(V, p));
  }
}

TEST_F(OpsLossOptim, SumSquares) {
  for (size_t n : {size_t(0), size_t(1), size_t(999), size_t(1000003)}) {
    Rng rng(200 + uint32_t(n));
    const auto x = rng.normal(n, 3.0f);
    Floats d_x(*be, x);
    double want = 0.0;
    for (float v : x) want += double(v) * double(v);
    // fp64 accumulation of n terms: error ~ sqrt(n) * 1.1e-16 relative; 1e-12 leaves room for n = 1e6.
    EXPECT_NEAR(be->sum_squares(d_x.get(), n), want, 1e-12 * want) << n;
  }
}

TEST_F(OpsLossOptim, AdamW) {
  const float lr = 1e-2f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  for (float wd : {0.0f, 0.1f}) {
    for (size_t n : {size_t(37), size_t(100003)}) {
      Rng rng(300 + uint32_t(n) + (wd > 0 ? 1 : 0));
      auto p = rng.normal(n);
      Floats d_p(*be, p), d_m(*be, n), d_v(*be, n);
      Vec pd = to_double(p), md(n, 0.0), vd(n, 0.0);
      for (int t = 1; t <= 5; ++t) {
        const auto g = rng.normal(n, 0.1f);
        Floats d_g(*be, g);
        be->adamw_update(d_p.get(), d_g.get(), d_m.get(), d_v.get(), n, lr, beta1, beta2, eps, wd, t, 1.0f);
        const double b1 = beta1, b2 = beta2;  // the fp32 hyper-parameters, exactly
        for (size_t i = 0; i < n; ++i) {
          md[i] = b1 * md[i] + (1 - b1) * g[i];
          vd[i] = b2 * vd[i] + (1 - b2) * double(g[i]) * g[i];
          const double mhat = md[i] / (1 - std::pow(b1, t)), vhat = vd[i] / (1 - std::pow(b2, t));
          pd[i] -= double(lr) * (mhat / (std::sqrt(vhat) + double(eps)) + double(wd) * pd[i]);
        }
      }
      // Each step rounds p, m and v once (0.5 ulp) and the update lr * mhat / sqrt(vhat) ~ lr to a few ulp;
      // over 5 steps that is < 20 ulp of |p| ~ 1, and the update's error < 20 eps * lr.
      const std::string tag = "adamw wd=" + std::to_string(wd) + " n=" + std::to_string(n);
      expect_close(tag + " params", d_p.host(), pd, {20 * kEps * rms(pd), 20 * kEps});
      expect_close(tag + " m", d_m.host(), md, {20 * kEps * rms(md), 20 * kEps});
      expect_close(tag + " v", d_v.host(), vd, {20 * kEps * rms(vd), 20 * kEps});
    }
  }
}

// Clipping inside the update: grad_scale s gives bitwise the update from the gradients scaled by s in place first (the
// product is the same fp32 rounding either way), and leaves the gradients as they were.
TEST_F(OpsLossOptim, AdamWGradScaleEqualsScalingTheGradientsFirst) {
  const size_t n = 100003;
  const float s = 0.3f;
  Rng rng(305);
  const auto p0 = rng.normal(n), g = rng.normal(n, 0.1f);
  Floats p(*be, p0), m(*be, n), v(*be, n), gb(*be, g);
  Floats q(*be, p0), qm(*be, n), qv(*be, n), gs(*be, g);
  be->scale(gs.get(), s, n);
  for (int t = 1; t <= 3; ++t) {
    be->adamw_update(p.get(), gb.get(), m.get(), v.get(), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, t, s);
    be->adamw_update(q.get(), gs.get(), qm.get(), qv.get(), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, t, 1.0f);
  }
  EXPECT_EQ(p.host(), q.host());
  EXPECT_EQ(m.host(), qm.host());
  EXPECT_EQ(v.host(), qv.host());
  EXPECT_EQ(gb.host(), g) << "the update changed the gradients";
  be->adamw_update(q.get(), gb.get(), qm.get(), qv.get(), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 4, 1.0f);
  EXPECT_NE(q.host(), p.host()) << "unscaled gradients gave the scaled update";
}

// AdamW over segments in one call: each segment equals adamw_update on its slice with its own decay, bitwise, and
// the elements between segments (the arena's alignment padding) are not touched.
TEST_F(OpsLossOptim, AdamWSegmentsEqualOneUpdatePerSegmentAndSkipGaps) {
  const size_t n = 1000;
  const std::vector<AdamWSegment> segs = {{3, 200, 0.1f}, {200, 517, 0.0f}, {530, 531, 0.1f}, {544, 990, 0.0f}};
  Rng rng(310);
  const auto p0 = rng.normal(n), g = rng.normal(n, 0.1f);
  Floats p(*be, p0), m(*be, n), v(*be, n), gb(*be, g);
  Floats q(*be, p0), qm(*be, n), qv(*be, n);
  for (int t = 1; t <= 3; ++t) {
    be->adamw_update_segments(p.get(), gb.get(), m.get(), v.get(), segs.data(), segs.size(), 1e-2f, 0.9f, 0.95f, 1e-8f,
                              t, 0.75f);
    for (const AdamWSegment& s : segs)
      be->adamw_update(q.get() + s.begin, gb.get() + s.begin, qm.get() + s.begin, qv.get() + s.begin, s.end - s.begin,
                       1e-2f, 0.9f, 0.95f, 1e-8f, s.weight_decay, t, 0.75f);
  }
  EXPECT_EQ(p.host(), q.host());
  EXPECT_EQ(m.host(), qm.host());
  EXPECT_EQ(v.host(), qv.host());
  const auto ph = p.host(), mh = m.host();
  for (size_t i : {size_t(0), size_t(2), size_t(517), size_t(529), size_t(531), size_t(543), size_t(990), n - 1}) {
    EXPECT_EQ(ph[i], p0[i]) << "gap element " << i << " was updated";
    EXPECT_EQ(mh[i], 0.0f) << "gap element " << i;
  }
  EXPECT_NE(ph[100], p0[100]);
  EXPECT_NE(ph[530], p0[530]);
}

// The update with the weights' bf16 copy written in its pass (an offloaded optimizer's host update): the weights and
// moments bitwise those of adamw_update_segments, the copy each updated weight cast (nearest even, as cast_to_bf16),
// and the copy's elements between segments untouched. Large enough for the threaded pass.
TEST_F(OpsLossOptim, AdamWSegmentsBf16WritesTheUpdatedWeightsCast) {
  const size_t n = 3 * cpu::kMinParallelWork + 77;
  const std::vector<AdamWSegment> segs = {{5, n / 3, 0.1f}, {n / 3, n / 2 + 3, 0.0f}, {n / 2 + 40, n - 9, 0.1f}};
  Rng rng(311);
  const auto p0 = rng.normal(n), g = rng.normal(n, 0.1f);
  Floats p(*be, p0), m(*be, n), v(*be, n), gb(*be, g);
  Floats q(*be, p0), qm(*be, n), qv(*be, n);
  const std::vector<BFloat16> sentinel(n, BFloat16{0x7fc1});
  test::BackendArray<BFloat16> copy(*be, sentinel);
  for (int t = 1; t <= 3; ++t) {
    be->adamw_update_segments_bf16(p.get(), copy.get(), gb.get(), m.get(), v.get(), segs.data(), segs.size(), 1e-2f,
                                   0.9f, 0.95f, 1e-8f, t, 0.75f);
    be->adamw_update_segments(q.get(), gb.get(), qm.get(), qv.get(), segs.data(), segs.size(), 1e-2f, 0.9f, 0.95f,
                              1e-8f, t, 0.75f);
  }
  const auto ph = p.host();
  EXPECT_EQ(ph, q.host());
  EXPECT_EQ(m.host(), qm.host());
  EXPECT_EQ(v.host(), qv.host());
  const std::vector<BFloat16> got = copy.host();
  size_t cast = 0, wrong = 0, gap_written = 0;
  for (size_t i = 0; i < n; ++i) {
    const bool in =
        std::any_of(segs.begin(), segs.end(), [&](const AdamWSegment& s) { return i >= s.begin && i < s.end; });
    if (in) {
      wrong += got[i].bits != to_bf16(ph[i]).bits;
      cast += got[i].bits != to_bf16(p0[i]).bits;  // the copy is of the updated weights, not the old ones
    } else {
      gap_written += got[i].bits != sentinel[i].bits;
    }
  }
  EXPECT_EQ(wrong, 0u) << "of " << n << " elements, the copy is not the updated weight cast";
  EXPECT_EQ(gap_written, 0u) << "elements between segments were written";
  EXPECT_GT(cast, n / 2) << "the copy holds the weights before the update";
}

TEST_F(OpsLossOptim, ExpApprox) {
  // The vectorised exp behind softmax, attention and GELU: within 3e-7 relative of exp over [-87, 88] (glibc's
  // expf is within 1 ulp; 3e-7 is 2.5 ulp), finite above, and e^-87 (not a denormal) below.
  double worst = 0.0;
  for (double x = -87.0; x <= 88.0; x += 1.0 / 1024 + 1e-7) {
    const float xf = float(x);
    worst = std::max(worst, std::fabs(double(cpu::exp_approx(xf)) / std::exp(double(xf)) - 1.0));
  }
  EXPECT_LT(worst, 3e-7);
  EXPECT_EQ(cpu::exp_approx(0.0f), 1.0f);
  EXPECT_TRUE(std::isfinite(cpu::exp_approx(1e30f)));
  EXPECT_NEAR(cpu::exp_approx(-INFINITY), std::exp(-87.0), 1e-40);
  EXPECT_NEAR(cpu::exp_approx(-1e30f), std::exp(-87.0), 1e-40);
}

TEST_F(OpsLossOptim, CrossEntropyExtremeLogits) {
  // Logits 2000 apart: without the max shift exp overflows; with it the loss is exactly the gap.
  const int N = 2, V = 37;
  std::vector<float> logits(size_t(N) * V, 0.0f);
  logits[0] = 1000.0f, logits[1] = -1000.0f, logits[V + 5] = 50.0f;
  const std::vector<int32_t> targets = {1, 5};
  Floats d_logits(*be, logits), d_losses(*be, N);
  Ints d_targets(*be, targets);
  be->crossentropy_forward(d_losses.get(), d_logits.get(), d_targets.get(), N, V, V);
  const auto losses = d_losses.host();
  EXPECT_NEAR(losses[0], 2000.0, 2000.0 * 4 * kEps);
  EXPECT_NEAR(losses[1], 0.0, 1e-6);  // log(1 + 36 e^-50) ~ 7e-21
  be->crossentropy_backward(d_logits.get(), d_logits.get(), d_targets.get(), 1.0f, N, V, V);
  const auto g = d_logits.host();
  for (float x : g) ASSERT_TRUE(std::isfinite(x));
  EXPECT_NEAR(g[0], 1.0, 1e-6);
  EXPECT_NEAR(g[1], -1.0, 1e-6);
  EXPECT_NEAR(g[V + 5], 0.0, 1e-6);
}

}  // namespace
}  // namespace ember
