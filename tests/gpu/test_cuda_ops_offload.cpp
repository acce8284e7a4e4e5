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

// With a model that keeps no fp32 arena (GPT's host masters) the offloaded step sends each chunk back as the bf16
// copy (cast on the host) and the packed fp32 tensors (model/device_weights.h), or where the dense weights' bf16 copy
// stays on the host (host_dense) as the packed tensors in fp32 and bf16: over the same shard of three chunks, the
// copies hold the CPU's updated weights rounded to bf16 and the packed fp32 tensors hold them as they are, bit for
// bit; nothing outside the shard is written; the masters are the CPU's weights.
TEST_F(CudaOpsOffload, WithHostMastersTheStepWritesTheBf16CopyAndThePackedTensors) {
  ModelConfig mc;
  mc.n_layer = 3, mc.n_head = 6, mc.n_embd = 384, mc.vocab_size = 257, mc.block_size = 64;
  const ParamTable table(mc);
  const PackedFp32Layout layout(table);
  const size_t n = table.total_numel(), begin = 1000, end = n - 500;
  Rng rng(37);
  const Floats p0 = rng.normal(n), g = rng.normal(end - begin, 0.1f);
  Floats want = p0;
  {
    FBuf pi(*cpu, p0), gi(*cpu, g);
    AdamW adam(*cpu, table, OptimizerConfig{}, begin, end);
    for (int t = 1; t <= 3; ++t) adam.step(pi.get(), gi.get(), 1e-3f, t == 2 ? 0.5f : 1.0f);
    want = pi.host();
  }
  Halves want_copy(n);  // zero outside the shard: never written
  for (size_t i = begin; i < end; ++i) want_copy[i] = to_bf16(want[i]);
  Floats want_packed(layout.numel(), 0.0f);
  const auto [p0_, p1_] = layout.pack(begin, end, want.data() + begin, want_packed.data());
  ASSERT_LT(p0_, p1_);
  Halves want_packed_bf16(layout.numel());
  for (size_t i = p0_; i < p1_; ++i) want_packed_bf16[i] = to_bf16(want_packed[i]);
  auto differing = [](const Halves& got, const Halves& want) {
    size_t differ = 0;
    for (size_t i = 0; i < got.size(); ++i) differ += got[i].bits != want[i].bits;
    return differ;
  };
  for (bool host_dense : {false, true}) {
    SCOPED_TRACE(host_dense ? "host_dense" : "host");
    HBuf copy(*gpu, n), packed_bf16(*gpu, layout.numel());
    FBuf packed(*gpu, layout.numel()), gi(*gpu, g);
    const DeviceWeights device = host_dense ? DeviceWeights{nullptr, packed_bf16.get(), packed.get(), &layout}
                                            : DeviceWeights{copy.get(), nullptr, packed.get(), &layout};
    AdamW adam(*gpu, table, OptimizerConfig{}, begin, end, Offload::optimizer, false, device);
    adam.weights_loaded(p0.data());
    for (int t = 1; t <= 3; ++t) adam.step(nullptr, gi.get(), 1e-3f, t == 2 ? 0.5f : 1.0f);
    expect_bitwise("packed fp32 tensors", packed.host(), want_packed);
    if (host_dense) {
      EXPECT_EQ(differing(packed_bf16.host(), want_packed_bf16), 0u) << "the packed tensors' bf16 copy";
      EXPECT_EQ(differing(Halves(adam.host_bf16(), adam.host_bf16() + (end - begin)),
                          Halves(want_copy.begin() + begin, want_copy.begin() + end)),
                0u)
          << "the host's bf16 copy";
      EXPECT_EQ(differing(copy.host(), Halves(n)), 0u) << "host_dense wrote a device copy of the arena";
    } else {
      EXPECT_EQ(differing(copy.host(), want_copy), 0u) << "the bf16 copy";
      EXPECT_EQ(differing(packed_bf16.host(), Halves(layout.numel())), 0u) << "host wrote a packed bf16 copy";
    }
    const float* masters = adam.host_masters(nullptr);
    expect_bitwise("host masters", Floats(masters, masters + (end - begin)),
                   Floats(want.begin() + begin, want.begin() + end));
  }
}

// Three training steps of a small GPT on `be` with an offloaded AdamW, each stepped after backward (handoff false) or
// handed off layer by layer as backward finishes each (begin_handoff_step, as the trainers arm it): each step's loss
// and gradient norm, and the weights after the last.
// With host masters (home other than device; in bf16 or int8) the model keeps no fp32 arena: params are then the
// host's masters, and the bf16 copy of the arena (the device's, or under host_dense the host's) and the device's
// packed fp32 tensors are kept too.
struct Trained {
  std::vector<double> losses;
  std::vector<float> norms;
  Floats params;
  Halves copy;
  Floats packed;
};
ModelConfig small_model() {
  ModelConfig m;
  m.n_layer = 3, m.n_head = 2, m.n_embd = 32, m.vocab_size = 67, m.block_size = 32;
  return m;
}
Trained train_offloaded(Backend& be, bool handoff, float max_norm, WeightHome home = WeightHome::device) {
  RunConfig c;
  c.model = small_model();
  c.training.max_norm = max_norm;
  c.training.steps = 3;
  c.optimizer.warmup_steps = 1;
  const int B = 2, T = 16;
  GPT model(c.model, be, B, T, true, Recompute::none, home);
  const Floats w0 = model.initial_weights(7);
  model.set_weights(w0.data());
  AdamW adam(be, model.table(), c.optimizer, 0, model.arena_numel(), Offload::optimizer, handoff,
             model.device_weights());
  adam.weights_loaded(w0.data());
  if (home == WeightHome::host_dense) model.set_host_weight_copy(adam.host_bf16());
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
    apply_update(adam, model.device_masters(), model.grads(), out.norms.back(), c, step);
  }
  out.params.resize(model.arena_numel());
  if (home == WeightHome::device) {
    be.copy_to_host(out.params.data(), std::as_const(model).params(), out.params.size() * sizeof(float));
    return out;
  }
  const float* masters = adam.host_masters(nullptr);
  out.params.assign(masters, masters + model.arena_numel());
  const DeviceWeights d = model.device_weights();
  out.copy.resize(model.arena_numel());
  out.packed.resize(d.layout->numel());
  if (d.bf16)
    be.copy_to_host(out.copy.data(), d.bf16, out.copy.size() * sizeof(BFloat16));
  else
    out.copy.assign(adam.host_bf16(), adam.host_bf16() + model.arena_numel());
  be.copy_to_host(out.packed.data(), d.fp32, out.packed.size() * sizeof(float));
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

// In bf16 with host masters (no fp32 arena on the device: the bf16 copy and the packed tensors, written from the
// host), chunked or handed off layer by layer, three steps are those of the model with its fp32 arena, bit for bit:
// losses, norms, the masters, and the device's copy and packed tensors are the arena's weights cast and packed. Under
// the kernel model a weight copy left unwaited holds NaN, which the next forward would read.
TEST_F(CudaOpsOffload, WithHostMastersTheStepsAreThoseOfTheFp32Arena) {
  for (Backend* be : {cpu.get(), gpu.get()})
    for (float max_norm : {0.0f, 0.05f}) {
      SCOPED_TRACE(be->name() + ", max_norm " + std::to_string(max_norm));
      be->set_matmul_precision(MatmulPrecision::bf16);
      const Trained arena = train_offloaded(*be, false, max_norm);
      for (bool handoff : {false, true}) {
        SCOPED_TRACE(handoff ? "handed off" : "chunked");
        const Trained host = train_offloaded(*be, handoff, max_norm, WeightHome::host);
        EXPECT_EQ(host.losses, arena.losses);
        EXPECT_EQ(host.norms, arena.norms);
        expect_bitwise("host masters", host.params, arena.params);
        Halves cast(arena.params.size());
        for (size_t i = 0; i < cast.size(); ++i) cast[i] = to_bf16(arena.params[i]);
        size_t differ = 0;
        for (size_t i = 0; i < cast.size(); ++i) differ += host.copy[i].bits != cast[i].bits;
        EXPECT_EQ(differ, 0u) << "bf16 copy: " << differ << " differ";
        const PackedFp32Layout layout{ParamTable(small_model())};
        Floats packed(layout.numel(), 0.0f);
        layout.pack(0, arena.params.size(), arena.params.data(), packed.data());
        expect_bitwise("packed tensors", host.packed, packed);
      }
      EXPECT_NE(arena.losses.back(), arena.losses.front()) << "the steps changed nothing";
      be->set_matmul_precision(MatmulPrecision::fp32);
    }
}

// Under int8 the products quantize the bf16 copy where the model has no fp32 arena: on the device (host), or where
// it stays on the host (host_dense: the backend reads it there, once per step, as the dense weights' source). The two
// quantize the same values, so three steps, chunked or handed off, give the same bits: losses, norms, masters and
// copies. Under the kernel model a copy still in flight holds NaN.
TEST_F(CudaOpsOffload, Int8StepsQuantizeTheHostsCopyAsTheDevicesCopy) {
  for (Backend* be : {cpu.get(), gpu.get()})
    for (bool handoff : {false, true}) {
      SCOPED_TRACE(be->name() + (handoff ? ", handed off" : ", chunked"));
      be->set_matmul_precision(MatmulPrecision::int8);
      const Trained device = train_offloaded(*be, handoff, 0.05f, WeightHome::host),
                    host = train_offloaded(*be, handoff, 0.05f, WeightHome::host_dense);
      EXPECT_EQ(host.losses, device.losses);
      EXPECT_EQ(host.norms, device.norms);
      expect_bitwise("host masters", host.params, device.params);
      expect_bitwise("packed tensors", host.packed, device.packed);
      size_t differ = 0;
      for (size_t i = 0; i < host.copy.size(); ++i) differ += host.copy[i].bits != device.copy[i].bits;
      EXPECT_EQ(differ, 0u) << "bf16 copy: " << differ << " differ";
      EXPECT_NE(device.losses.back(), device.losses.front()) << "the steps changed nothing";
      be->set_matmul_precision(MatmulPrecision::fp32);
    }
}

}  // namespace
}  // namespace ember
