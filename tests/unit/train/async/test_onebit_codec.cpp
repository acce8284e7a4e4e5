// The 1-bit codec (sign + per-block mean-|x| scale) and its error feedback, against float64 references and the
// identity sum(sent) = sum(inputs) + first residual - last residual. Inputs come from Philox (RNG_PURPOSE_TEST).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/philox.h"
#include "train/async/delta_codec.h"
#include "train/async/onebit_codec.h"

namespace ember {
namespace {

using Vec = std::vector<double>;
constexpr uint64_t kSeed = 20240611;
constexpr double kEps = 1.1920928955078125e-7;  // fp32 machine epsilon, 2^-23

struct Rng {
  Philox philox;
  explicit Rng(uint32_t stream) : philox(kSeed, 0, stream, RNG_PURPOSE_TEST) {}
  std::vector<float> normal(size_t n, float scale = 1.0f) {
    std::vector<float> v(n);
    for (float& x : v) x = scale * philox.normal();
    return v;
  }
};

// The (n, K) shapes swept by most tests: n = 0 and 1, n not a multiple of 8 or of K, K = 1, K > n, K = n.
struct Shape {
  size_t n, K;
};
const Shape kShapes[] = {{0, 1},   {0, 64},    {1, 1},       {1, 64},   {7, 3},       {13, 5},      {64, 64},
                         {100, 8}, {1001, 64}, {1001, 1000}, {1001, 1}, {1001, 1001}, {1001, 4096}, {4096, 256}};

std::string name(Shape s) { return "n=" + std::to_string(s.n) + " K=" + std::to_string(s.K); }

float scale_of(const std::vector<uint8_t>& msg, size_t b) {
  float s;
  std::memcpy(&s, msg.data() + b * sizeof(float), sizeof(float));
  return s;
}
bool sign_bit(const std::vector<uint8_t>& msg, size_t n, size_t K, size_t i) {
  return (msg[onebit_block_count(n, K) * sizeof(float) + i / 8] >> (i % 8)) & 1u;
}

std::vector<uint8_t> pack(const std::vector<float>& x, size_t K) {
  std::vector<uint8_t> msg(onebit_packed_bytes(x.size(), K));
  onebit_pack(x.data(), x.size(), K, msg.data());
  return msg;
}
std::vector<float> unpack(const std::vector<uint8_t>& msg, size_t n, size_t K) {
  std::vector<float> out(n);
  onebit_unpack(msg.data(), n, K, out.data());
  return out;
}

// ---------------------------------------------------------------------------------------------------------------
TEST(OnebitCodec, PackedBytesFormula) {
  struct Case {
    size_t n, K, blocks, bytes;
  };
  // bytes = 4 ceil(n / K) + ceil(n / 8), written out by hand.
  const Case cases[] = {{0, 1, 0, 0},
                        {0, 64, 0, 0},
                        {1, 1, 1, 4 + 1},
                        {1, 64, 1, 4 + 1},
                        {7, 3, 3, 12 + 1},
                        {8, 64, 1, 4 + 1},
                        {9, 64, 1, 4 + 2},
                        {64, 64, 1, 4 + 8},
                        {65, 64, 2, 8 + 9},
                        {1001, 64, 16, 64 + 126},
                        {1001, 1000, 2, 8 + 126},
                        {1001, 1, 1001, 4004 + 126},
                        {1001, 4096, 1, 4 + 126}};
  for (const Case& c : cases) {
    EXPECT_EQ(onebit_block_count(c.n, c.K), c.blocks) << name({c.n, c.K});
    EXPECT_EQ(onebit_packed_bytes(c.n, c.K), c.bytes) << name({c.n, c.K});
  }
}

TEST(OnebitCodec, BlockSizeZeroIsRejected) {
  EXPECT_THROW(onebit_packed_bytes(10, 0), Error);
  EXPECT_THROW(DeltaCodec(DeltaCompression::onebit, 10, 0), Error);
}

// Every decoded value is +-(its block's scale) with the sign of the input; unused sign bits are zero; unpack_add adds
// exactly the decoded value.
TEST(OnebitCodec, RoundTripSignAndScale) {
  uint32_t stream = 1;
  for (Shape s : kShapes) {
    Rng rng(stream++);
    std::vector<float> x = rng.normal(s.n);
    if (s.n > 5) x[2] = 0.0f, x[5] = -0.0f;  // zeros of both signs inside a block
    const std::vector<uint8_t> msg = pack(x, s.K);
    const std::vector<float> y = unpack(msg, s.n, s.K);
    size_t bad = 0;
    for (size_t i = 0; i < s.n; ++i) {
      const float scale = scale_of(msg, i / s.K);
      const float want = x[i] >= 0.0f ? scale : -scale;  // convention: 0 and -0 decode to +scale
      bad += !(y[i] == want) || sign_bit(msg, s.n, s.K, i) != (x[i] >= 0.0f) || !(scale >= 0.0f);
    }
    EXPECT_EQ(bad, 0u) << name(s);
    if (s.n % 8 != 0) {
      EXPECT_EQ(msg.back() >> (s.n % 8), 0) << name(s) << ": unused bits of the last byte";
    }

    std::vector<float> acc = rng.normal(s.n), want = acc;
    for (size_t i = 0; i < s.n; ++i) want[i] += y[i];
    onebit_unpack_add(msg.data(), s.n, s.K, acc.data());
    EXPECT_EQ(acc, want) << name(s);
  }
}

TEST(OnebitCodec, ZeroCountsAsPositive) {
  const std::vector<float> x = {0.0f, -0.0f, -1.0f, 1.0f, 0.0f, 0.0f};  // K = 4: blocks {0,-0,-1,1} and {0,0}
  const std::vector<uint8_t> msg = pack(x, 4);
  EXPECT_EQ(scale_of(msg, 0), 0.5f);
  EXPECT_EQ(scale_of(msg, 1), 0.0f);  // an all-zero block sends scale 0, so it decodes to exactly 0
  EXPECT_EQ(unpack(msg, 6, 4), (std::vector<float>{0.5f, 0.5f, -0.5f, 0.5f, 0.0f, 0.0f}));
  EXPECT_EQ(msg.back(), 0b111011);
}

// The scale is the float64 mean of |x| over the block's actual values (the last block may be shorter), rounded once
// to fp32: allowed error 1 ulp = eps |ref| (rounding costs at most half of that; the float64 sum ~K 2^-53 more).
TEST(OnebitCodec, ScaleIsMeanAbsoluteValue) {
  uint32_t stream = 100;
  for (Shape s : kShapes) {
    Rng rng(stream++);
    std::vector<float> x = rng.normal(s.n);
    for (float& v : x) v *= std::pow(10.0f, 4.0f * rng.philox.uniform() - 2.0f);  // magnitudes over 4 decades
    const std::vector<uint8_t> msg = pack(x, s.K);
    for (size_t b = 0; b < onebit_block_count(s.n, s.K); ++b) {
      const size_t begin = b * s.K, end = std::min(begin + s.K, s.n);
      double ref = 0.0;
      for (size_t i = begin; i < end; ++i) ref += std::fabs(double(x[i]));
      ref /= double(end - begin);
      EXPECT_LE(std::fabs(double(scale_of(msg, b)) - ref), kEps * ref) << name(s) << " block " << b;
    }
  }
}

// A block whose values all have one magnitude m is sent exactly: its mean |x| is m (K m is exact in float64).
TEST(OnebitCodec, EqualMagnitudesRoundTripExactly) {
  uint32_t stream = 200;
  for (Shape s : kShapes) {
    Rng rng(stream++);
    std::vector<float> x(s.n);
    for (size_t i = 0; i < s.n; ++i) {
      const float m = 0.1f * float(1 + i / s.K) + 1e-3f * float(i / s.K);  // one non-power-of-two value per block
      x[i] = rng.philox.uniform() < 0.5f ? -m : m;
    }
    EXPECT_EQ(unpack(pack(x, s.K), s.n, s.K), x) << name(s);
  }
}

// Above the parallel threshold the bytes must not depend on the thread count (static schedules, per-block sums).
TEST(OnebitCodec, ThreadCountDoesNotChangeBytes) {
  const size_t n = 100003, K = 100;
  Rng rng(300);
  const std::vector<float> x = rng.normal(n);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const std::vector<uint8_t> serial = pack(x, K);
  ErrorFeedback ef_serial(DeltaCodec(DeltaCompression::onebit, n, K));
  std::vector<uint8_t> m1(ef_serial.packed_bytes());
  ef_serial.compress(x.data(), m1.data());
  omp_set_num_threads(std::max(2, threads));
  EXPECT_EQ(pack(x, K), serial);
  ErrorFeedback ef_parallel(DeltaCodec(DeltaCompression::onebit, n, K));
  std::vector<uint8_t> m2(ef_parallel.packed_bytes());
  ef_parallel.compress(x.data(), m2.data());
  omp_set_num_threads(threads);
  EXPECT_EQ(m1, m2);
  EXPECT_EQ(ef_serial.residual(), ef_parallel.residual());
}

// ---------------------------------------------------------------------------------------------------------------
// Error feedback. Over S steps, with c_k = x_k + r_{k-1}, t_k = decode(pack(c_k)) and r_k = c_k - t_k:
//   sum_k t_k = sum_k x_k + r_0 - r_S   exactly in real arithmetic.
// In fp32 each step rounds twice (the add and the subtract), each by at most eps/2 of a value no bigger than the
// step's |c|, so after S = 50 steps the gap is at most ~S eps max|c| = 6e-6 max|c|. We allow 1e-5 relative to the
// magnitude of the sums, taken as their largest element (one element's sum can cancel to ~0 while its rounding
// does not). Without feedback the gap is the whole compression error, of the order of the values themselves.
constexpr int kSteps = 50;
constexpr double kIdentityRtol = 1e-5;

struct Sums {
  Vec sent, inputs;  // (n) float64 sums of the decoded messages and of the compressed inputs
  explicit Sums(size_t n) : sent(n, 0.0), inputs(n, 0.0) {}
  void add(const std::vector<float>& input, const std::vector<float>& decoded) {
    for (size_t i = 0; i < sent.size(); ++i) sent[i] += decoded[i], inputs[i] += input[i];
  }
};

// Worst |sent - (inputs + r0 - rS)| over its tolerance; <= 1 means the identity holds.
double identity_error_ratio(const Sums& s, const std::vector<float>& r0, const std::vector<float>& rS) {
  const size_t n = s.sent.size();
  Vec want(n);
  double magnitude = 0.0;
  for (size_t i = 0; i < n; ++i) {
    want[i] = s.inputs[i] + double(r0[i]) - double(rS[i]);
    magnitude = std::max({magnitude, std::fabs(want[i]), std::fabs(s.sent[i])});
  }
  double worst = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double err = std::fabs(s.sent[i] - want[i]), allowed = kIdentityRtol * magnitude;
    worst = std::max(worst, allowed > 0 ? err / allowed : (err > 0 ? INFINITY : 0.0));
  }
  return worst;
}

void report(const std::string& what, double ratio) {
  if (std::getenv("EMBER_TEST_VERBOSE")) std::printf("  %-40s worst err/tol = %.3g\n", what.c_str(), ratio);
}

// A worker: fresh deltas each step (sizes varying over two decades, as the loss and learning rate move), starting
// from a non-zero residual as after a checkpoint restore.
TEST(OnebitCodec, IdentityHoldsForWorker) {
  uint32_t stream = 400;
  for (Shape s : {Shape{1001, 64}, Shape{1001, 1000}, Shape{1001, 1}, Shape{13, 5}, Shape{0, 8}}) {
    Rng rng(stream++);
    ErrorFeedback ef(DeltaCodec(DeltaCompression::onebit, s.n, s.K));
    const std::vector<float> r0 = rng.normal(s.n, 0.3f);
    ef.set_residual(r0.data());
    ASSERT_EQ(ef.residual(), r0);
    Sums sums(s.n);
    std::vector<uint8_t> msg(ef.packed_bytes());
    std::vector<float> decoded(s.n);
    for (int k = 0; k < kSteps; ++k) {
      const std::vector<float> delta = rng.normal(s.n, std::pow(10.0f, 2.0f * rng.philox.uniform() - 1.0f));
      ef.compress(delta.data(), msg.data());
      onebit_unpack(msg.data(), s.n, s.K, decoded.data());
      sums.add(delta, decoded);
    }
    const double ratio = identity_error_ratio(sums, r0, ef.residual());
    report("worker " + name(s), ratio);
    EXPECT_LE(ratio, 1.0) << name(s);
  }
}

// The center: what it compresses is a worker's decoded 1-bit message plus its own update (an outer-optimizer step),
// so its input is already two-valued per block plus noise. Its own identity holds, and chaining the two gives
//   sum(center sent) = sum(worker deltas) + sum(updates) + both first residuals - both last residuals.
TEST(OnebitCodec, IdentityHoldsForCenter) {
  uint32_t stream = 500;
  for (Shape s : {Shape{1001, 64}, Shape{1001, 1000}, Shape{1001, 1}}) {
    Rng rng(stream++);
    ErrorFeedback worker(DeltaCodec(DeltaCompression::onebit, s.n, s.K)),
        center(DeltaCodec(DeltaCompression::onebit, s.n, s.K));
    Sums center_sums(s.n), chain_sums(s.n);
    std::vector<uint8_t> worker_msg(worker.packed_bytes()), center_msg(center.packed_bytes());
    std::vector<float> center_sent(s.n);
    const std::vector<float> r0 = rng.normal(s.n, 0.2f);
    center.set_residual(r0.data());
    for (int k = 0; k < kSteps; ++k) {
      const std::vector<float> delta = rng.normal(s.n), update = rng.normal(s.n, 0.1f);
      worker.compress(delta.data(), worker_msg.data());
      std::vector<float> input = update;  // the center accumulates the worker's message onto its update
      onebit_unpack_add(worker_msg.data(), s.n, s.K, input.data());
      center.compress(input.data(), center_msg.data());
      onebit_unpack(center_msg.data(), s.n, s.K, center_sent.data());
      center_sums.add(input, center_sent);
      std::vector<float> delta_plus_update(s.n);  // the chain's true input, summed in float64 inside add()
      for (size_t i = 0; i < s.n; ++i) delta_plus_update[i] = delta[i] + update[i];
      chain_sums.add(delta_plus_update, center_sent);
    }
    const double ratio = identity_error_ratio(center_sums, r0, center.residual());
    report("center " + name(s), ratio);
    EXPECT_LE(ratio, 1.0) << name(s);

    std::vector<float> first(s.n), last(s.n);
    for (size_t i = 0; i < s.n; ++i) first[i] = r0[i], last[i] = worker.residual()[i] + center.residual()[i];
    const double chain = identity_error_ratio(chain_sums, first, last);
    report("worker -> center " + name(s), chain);
    EXPECT_LE(chain, 1.0) << name(s);
  }
}

// Without the residual (plain pack of each delta) the compression error is simply lost, and the identity check must
// fail by far: this is what keeps the two tests above from passing vacuously.
TEST(OnebitCodec, IdentityFailsWithoutFeedback) {
  const size_t n = 1001, K = 64;
  Rng rng(400);  // the same deltas as the worker test's first shape
  rng.normal(n, 0.3f);
  Sums sums(n);
  for (int k = 0; k < kSteps; ++k) {
    const std::vector<float> delta = rng.normal(n, std::pow(10.0f, 2.0f * rng.philox.uniform() - 1.0f));
    sums.add(delta, unpack(pack(delta, K), n, K));
  }
  const std::vector<float> zero(n, 0.0f);
  const double ratio = identity_error_ratio(sums, zero, zero);
  report("no feedback", ratio);
  EXPECT_GT(ratio, 100.0);
}

// The residual stays bounded over many steps of fresh random deltas (rms 1): after every step |r_i| <= 16 x its
// block's scale (|r_i| = ||c_i| - s|; over 2000 steps x 1001 values the worst seen is 7.5-8.5 for K = 64 and 1000,
// growing only slowly with the number of draws, as a tail does) and rms(r) <= 1.5 (seen ~0.8, flat from step 10 to
// 20000). A feedback bug (a wrong sign or block in the subtraction) makes the residual grow without limit.
TEST(OnebitCodec, ResidualStaysSmallForRandomDeltas) {
  const size_t n = 1001;
  const int steps = 2000;
  uint32_t stream = 600;
  for (size_t K : {64, 1000, 8, 1}) {
    Rng rng(stream++);
    ErrorFeedback ef(DeltaCodec(DeltaCompression::onebit, n, K));
    std::vector<uint8_t> msg(ef.packed_bytes());
    double worst_ratio = 0.0, worst_rms = 0.0;
    for (int k = 0; k < steps; ++k) {
      const std::vector<float> delta = rng.normal(n);
      ef.compress(delta.data(), msg.data());
      double ss = 0.0;
      for (size_t i = 0; i < n; ++i) {
        const double r = ef.residual()[i];
        worst_ratio = std::max(worst_ratio, std::fabs(r) / double(scale_of(msg, i / K)));
        ss += r * r;
      }
      worst_rms = std::max(worst_rms, std::sqrt(ss / double(n)));
    }
    if (std::getenv("EMBER_TEST_VERBOSE"))
      std::printf("  K=%-4zu max |r|/scale = %.3g, max rms(r) = %.3g\n", K, worst_ratio, worst_rms);
    EXPECT_LE(worst_ratio, 16.0) << "K=" << K;
    EXPECT_LE(worst_rms, 1.5) << "K=" << K;
    if (K == 1) {
      EXPECT_EQ(worst_rms, 0.0) << "a block of one value is sent exactly";
    }
  }
}

// For any inputs, one block's residual is bounded by a contraction argument: sending s sign(c) with s = |c|_1 / L
// (L values) leaves |c - s sign(c)|^2 = |c|^2 - |c|_1^2 / L <= q^2 |c|^2, q = sqrt(1 - 1/L), so with c = delta + r,
//   |r_k| <= q (|delta_k| + |r_{k-1}|)  and hence  |r_k| <= q / (1 - q) max_k |delta_k|   (~2L max|delta|).
// Checked per block (with 0.1% slack for fp32) for the same delta every step, the case where the residual grows the
// most (some values must carry the block's scale), and for random deltas.
TEST(OnebitCodec, ResidualObeysContractionBound) {
  const size_t n = 1001;
  const int steps = 3000;
  uint32_t stream = 650;
  for (size_t K : {64, 1000, 7})
    for (bool constant : {true, false}) {
      Rng rng(stream++);
      ErrorFeedback ef(DeltaCodec(DeltaCompression::onebit, n, K));
      std::vector<uint8_t> msg(ef.packed_bytes());
      const size_t nblocks = onebit_block_count(n, K);
      Vec max_delta_norm(nblocks, 0.0);
      std::vector<float> delta = rng.normal(n);
      size_t bad = 0;
      double worst = 0.0;
      for (int k = 0; k < steps; ++k) {
        if (!constant) delta = rng.normal(n);
        ef.compress(delta.data(), msg.data());
        for (size_t b = 0; b < nblocks; ++b) {
          const size_t begin = b * K, end = std::min(begin + K, n);
          double dd = 0.0, rr = 0.0;
          for (size_t i = begin; i < end; ++i)
            dd += double(delta[i]) * delta[i], rr += double(ef.residual()[i]) * ef.residual()[i];
          max_delta_norm[b] = std::max(max_delta_norm[b], std::sqrt(dd));
          const double q = std::sqrt(1.0 - 1.0 / double(end - begin));
          // A block of one value (L = 1, q = 0) is sent exactly: its bound is 0 and its residual must be 0.
          const double bound = q / (1.0 - q) * max_delta_norm[b] * 1.001;
          const double ratio = rr == 0.0 ? 0.0 : std::sqrt(rr) / bound;
          bad += !(ratio <= 1.0);
          worst = std::max(worst, ratio);
        }
      }
      if (std::getenv("EMBER_TEST_VERBOSE"))
        std::printf("  K=%-4zu %s deltas: worst |r_block| / bound = %.3g\n", K, constant ? "constant" : "random",
                    worst);
      EXPECT_EQ(bad, 0u) << "K=" << K << (constant ? " constant" : " random") << " deltas; worst ratio " << worst;
    }
}

TEST(OnebitCodec, ResetClearsResidual) {
  const size_t n = 1001, K = 64;
  Rng rng(700);
  ErrorFeedback ef(DeltaCodec(DeltaCompression::onebit, n, K));
  EXPECT_EQ(ef.residual(), std::vector<float>(n, 0.0f));
  const std::vector<float> delta = rng.normal(n);
  std::vector<uint8_t> first(ef.packed_bytes()), again(ef.packed_bytes());
  ef.compress(delta.data(), first.data());
  EXPECT_NE(ef.residual(), std::vector<float>(n, 0.0f));
  ef.reset();
  EXPECT_EQ(ef.residual(), std::vector<float>(n, 0.0f));
  ef.compress(delta.data(), again.data());  // from a zero residual the first message is plain pack(delta)
  EXPECT_EQ(again, first);
  EXPECT_EQ(again, pack(delta, K));
}

}  // namespace
}  // namespace ember
