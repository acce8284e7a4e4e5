// The whole GPT under matmul precision fp8 on the CPU backend: recomputation gives bitwise the loss and gradients of
// keeping the activations (the recomputed products quantize the same values with the same per-tensor scales), and the
// unscaled test variant (training.fp8_scaling = false) changes both. Its loss curve against fp32 is
// GPT.LowPrecisionMatmulsTrackTheFp32LossCurve.
#include <gtest/gtest.h>

#include <vector>

#include "core/dtype.h"
#include "model/gpt.h"
#include "model_test_util.h"

namespace ember {
namespace {

TEST(GPTFp8, RecomputationIsBitwiseAndScalingMatters) {
  ModelConfig c = tiny_config();
  c.n_layer = 3;
  const int B = 3, T = 11;
  const auto in = random_tokens(size_t(B) * T, c.vocab_size, 5), tg = random_tokens(size_t(B) * T, c.vocab_size, 6);
  struct Result {
    double loss;
    std::vector<float> grads;
  };
  auto run = [&](Recompute r, bool scaled) {
    auto backend = make_cpu_backend();
    backend->set_matmul_precision(MatmulPrecision::fp8);
    backend->set_fp8_scaling(scaled);
    GPT model(c, *backend, B, T, /*with_grads=*/true, r);
    model.init_weights(5);
    model.zero_grad();
    Result out{model.forward_backward(in.data(), tg.data(), B, T, 1.0f), {}};
    out.grads.resize(model.table().total_numel());
    backend->copy_to_host(out.grads.data(), model.grads(), out.grads.size() * sizeof(float));
    return out;
  };
  const Result a = run(Recompute::none, true);
  for (Recompute r : {Recompute::attention, Recompute::full}) {
    const Result re = run(r, true);
    EXPECT_EQ(re.loss, a.loss) << recompute_name(r);
    EXPECT_EQ(re.grads, a.grads) << recompute_name(r);
  }
  const Result unscaled = run(Recompute::none, false);
  EXPECT_NE(unscaled.loss, a.loss);
  EXPECT_NE(unscaled.grads, a.grads);
}

}  // namespace
}  // namespace ember
