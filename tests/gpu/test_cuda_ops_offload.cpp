// training.offload = optimizer on the CUDA backend: the offloaded AdamW against the CPU backend's, and its step handed
// off layer by layer during backward against the step taken after backward. Under the kernel model an asynchronous
// copy lands only at its wait and its destination holds NaN until then, so a wait left out fails these tests.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "cuda_ops_test_util.h"
#include "model/gpt.h"
#include "model/param_table.h"
#include "train/adamw.h"
#include "train/local_step.h"

namespace ember {
namespace {

class CudaOpsOffload : public CudaOps {};

// training.offload = optimizer on this backend (train/adamw.h): the gradients to the host, the CPU backend's AdamW on
// the host's masters and moments, the new weights back into the arena, chunk by chunk, on the backend's asynchronous
// copies. So three steps over a shard (an inner range of the arena, three chunks of 16 MiB) give the CPU backend's own
// AdamW bit for bit: the weights, the elements outside the shard untouched, and the moments. Under the kernel model a
// copy lands only at its wait (NaN until then), so a wait left out fails here (checked: the gradients' wait, and the
// weights' last waits).
TEST_F(CudaOpsOffload, OffloadedAdamWIsTheCpusUpdate) {
  ModelConfig mc;
  mc.n_layer = 3, mc.n_head = 6, mc.n_embd = 384, mc.vocab_size = 257, mc.block_size = 64;
  const ParamTable table(mc);
  const size_t n = table.total_numel(), begin = 1000, end = n - 500;
  ASSERT_GT(end - begin, size_t(1) << 22) << "the shard must span more than one chunk";
  Rng rng(31);
  const Floats p0 = rng.normal(n), g = rng.normal(end - begin, 0.1f);
  Floats p[2], m[2], v[2];
  Backend* be[2] = {cpu.get(), gpu.get()};
  for (int k = 0; k < 2; ++k) {
    FBuf pi(*be[k], p0), gi(*be[k], g);
    AdamW adam(*be[k], table, OptimizerConfig{}, begin, end, k ? Offload::optimizer : Offload::none);
    ASSERT_TRUE(adam.moments_on_host());
    for (int t = 1; t <= 3; ++t) adam.step(pi.get(), gi.get(), 1e-3f, t == 2 ? 0.5f : 1.0f);
    p[k] = pi.host();
    m[k].assign(adam.exp_avg(), adam.exp_avg() + (end - begin));
    v[k].assign(adam.exp_avg_sq(), adam.exp_avg_sq() + (end - begin));
  }
  expect_bitwise("offloaded adamw params", p[1], p[0]);
  expect_bitwise("offloaded adamw m", m[1], m[0]);
  expect_bitwise("offloaded adamw v", v[1], v[0]);
  EXPECT_NE(p[1][begin], p0[begin]);
  EXPECT_EQ(p[1][begin - 1], p0[begin - 1]);
  EXPECT_EQ(p[1][end], p0[end]);
}

// Three training steps of a small GPT on `be` with an offloaded AdamW, each stepped after backward (handoff false) or
// handed off layer by layer as backward finishes each (begin_handoff_step, as the trainers arm it): each step's loss
// and gradient norm, and the weights after the last.
struct Trained {
  std::vector<double> losses;
  std::vector<float> norms;
  Floats params;
};
Trained train_offloaded(Backend& be, bool handoff, float max_norm) {
  RunConfig c;
  c.model.n_layer = 3, c.model.n_head = 2, c.model.n_embd = 32, c.model.vocab_size = 67, c.model.block_size = 32;
  c.training.max_norm = max_norm;
  c.training.steps = 3;
  c.optimizer.warmup_steps = 1;
  const int B = 2, T = 16;
  GPT model(c.model, be, B, T);
  model.init_weights(7);
  AdamW adam(be, model.table(), c.optimizer, 0, model.arena_numel(), Offload::optimizer, handoff);
  EXPECT_EQ(adam.handoff_enabled(), handoff);
  Rng rng(43);
  const Ints in = rng.tokens(size_t(B) * T, c.model.vocab_size), tg = rng.tokens(size_t(B) * T, c.model.vocab_size);
  Trained out;
  for (int step = 0; step < c.training.steps; ++step) {
    model.zero_grad();
    model.set_backward_hook(handoff ? begin_handoff_step(adam, model, c, step) : nullptr);
    out.losses.push_back(model.forward_backward(in.data(), tg.data(), B, T, 1.0f));
    model.set_backward_hook(nullptr);
    out.norms.push_back(float(std::sqrt(be.sum_squares(model.grads(), model.arena_numel()))));
    apply_update(adam, model.params(), model.grads(), out.norms.back(), c, step);
  }
  out.params.resize(model.arena_numel());
  be.copy_to_host(out.params.data(), std::as_const(model).params(), out.params.size() * sizeof(float));
  return out;
}

// Handed off, each layer's gradients go to the host as backward finishes the layer, and a host thread updates it
// there: at once where nothing clips (beside the rest of backward), else once the norm is known. Either way the step
// is the one taken after backward, bit for bit: losses, norms and weights, on both backends.
TEST_F(CudaOpsOffload, AStepHandedOffLayerByLayerIsTheStepAfterBackward) {
  for (Backend* be : {cpu.get(), gpu.get()})
    for (float max_norm : {0.0f, 0.05f}) {  // 0.05 is below every step's norm here: each step clips
      SCOPED_TRACE(be->name() + ", max_norm " + std::to_string(max_norm));
      const Trained after = train_offloaded(*be, false, max_norm), handed = train_offloaded(*be, true, max_norm);
      EXPECT_EQ(handed.losses, after.losses);
      EXPECT_EQ(handed.norms, after.norms);
      expect_bitwise("handed-off weights", handed.params, after.params);
      if (max_norm > 0.0f) {
        for (float norm : after.norms) EXPECT_GT(norm, max_norm) << "a step that did not clip";
      }
      EXPECT_NE(after.losses.back(), after.losses.front()) << "the steps changed nothing";
    }
}

}  // namespace
}  // namespace ember
