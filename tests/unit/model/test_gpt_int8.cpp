// The whole GPT under matmul precision int8 on the CPU backend: the dithering keyed by the trainer's seed and sample
// (bitwise repeatable, different for another micro-batch, never touching the forward pass), and recomputation bitwise
// equal to keeping the activations. Its loss curve against fp32 is GPT.LowPrecisionMatmulsTrackTheFp32LossCurve.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/dtype.h"
#include "core/philox.h"
#include "model/gpt.h"
#include "model_test_util.h"

namespace ember {
namespace {

// One forward_backward from the same weights: the loss depends only on the weights and the batch; the gradients
// on the dither key too (the seed and the micro-batch's first sample): bitwise the same for the same key, different
// for another seed or sample. And recomputation (attention, full) gives bitwise the gradients of none.
TEST(GPTInt8, DitherIsKeyedAndRecomputationIsBitwise) {
  ModelConfig c = tiny_config();
  c.n_layer = 3;
  const int B = 3, T = 11;
  const auto in = random_tokens(size_t(B) * T, c.vocab_size, 5), tg = random_tokens(size_t(B) * T, c.vocab_size, 6);
  auto backend = make_cpu_backend();
  backend->set_matmul_precision(MatmulPrecision::int8);
  struct Result {
    double loss;
    std::vector<float> grads;
  };
  auto run = [&](uint64_t seed, uint64_t sample, Recompute r) {
    GPT model(c, *backend, B, T, /*with_grads=*/true, r);
    model.init_weights(5);
    model.set_dither_seed(seed);
    model.set_dither_sample(sample);
    model.zero_grad();
    Result out{model.forward_backward(in.data(), tg.data(), B, T, 1.0f), {}};
    out.grads.resize(model.table().total_numel());
    backend->copy_to_host(out.grads.data(), model.grads(), out.grads.size() * sizeof(float));
    return out;
  };
  const Result a = run(1, 1000, Recompute::none);
  const Result again = run(1, 1000, Recompute::none), seed2 = run(2, 1000, Recompute::none),
               sample2 = run(1, 1004, Recompute::none), far = run(1, uint64_t(1) << 40, Recompute::none);
  EXPECT_EQ(again.loss, a.loss);
  EXPECT_EQ(again.grads, a.grads);
  for (const Result* other : {&seed2, &sample2, &far}) {
    EXPECT_EQ(other->loss, a.loss) << "the forward pass does not dither";
    EXPECT_NE(other->grads, a.grads) << "another key must round the gradients otherwise";
  }
  for (Recompute r : {Recompute::attention, Recompute::full}) {
    const Result re = run(1, 1000, r);
    EXPECT_EQ(re.loss, a.loss) << recompute_name(r);
    EXPECT_EQ(re.grads, a.grads) << recompute_name(r);
  }
}

// training.int8_stochastic_rounding = false (the convergence test's weakened variant): the output gradients rounded
// to nearest, so the key no longer matters, and the gradients differ from every dithered draw.
TEST(GPTInt8, NearestRoundingIgnoresTheKey) {
  const ModelConfig c = tiny_config();
  const int B = 2, T = 9;
  const auto in = random_tokens(size_t(B) * T, c.vocab_size, 7), tg = random_tokens(size_t(B) * T, c.vocab_size, 8);
  auto backend = make_cpu_backend();
  backend->set_matmul_precision(MatmulPrecision::int8);
  auto grads = [&](uint64_t seed, bool stochastic) {
    backend->set_int8_stochastic_rounding(stochastic);
    GPT model(c, *backend, B, T);
    model.init_weights(5);
    model.set_dither_seed(seed);
    model.set_dither_sample(0);
    model.zero_grad();
    model.forward_backward(in.data(), tg.data(), B, T, 1.0f);
    std::vector<float> g(model.table().total_numel());
    backend->copy_to_host(g.data(), model.grads(), g.size() * sizeof(float));
    return g;
  };
  const std::vector<float> nearest = grads(1, false);
  EXPECT_EQ(grads(2, false), nearest);
  EXPECT_NE(grads(1, true), nearest);
  EXPECT_NE(grads(2, true), nearest);
}

}  // namespace
}  // namespace ember
