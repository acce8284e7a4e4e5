// The whole GPT on the CUDA backend against the CPU backend: loss and gradients, 50 training steps at both matmul
// precisions, and what a training step allocates on the device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_ops_test_util.h"
#include "model/gpt.h"
#include "train/adamw.h"
#include "train_steps.h"
#ifndef EMBER_TEST_KERNEL_MODEL
#include "cuda_ops.h"  // the ops' scratch sizes
#endif

namespace ember {
namespace {

class CudaOpsWholeModel : public CudaOps {};

// The whole GPT on both backends from the same init seed and tokens: loss and every gradient agree.
// The whole-model tests' config: HS = 16, odd vocabulary.
ModelConfig whole_model_config() {
  ModelConfig c;
  c.n_layer = 2;
  c.n_head = 3;  // HS = 16
  c.n_embd = 48;
  c.block_size = 64;
  c.vocab_size = 101;
  return c;
}

// Runs forward and backward of the whole model (config c) on both backends at matmul precision `p` and checks the
// loss within loss_rtol and every gradient within {r rms, r} of the CPU's.
void expect_whole_model_close(Backend& cpu, Backend& gpu, MatmulPrecision p, double loss_rtol, double r,
                              const ModelConfig& c = whole_model_config()) {
  const int B = 2, T = 45;  // T past the 32-key attention tile
  cpu.set_matmul_precision(p);
  gpu.set_matmul_precision(p);
  GPT cpu_model(c, cpu, B, T), gpu_model(c, gpu, B, T);
  cpu_model.init_weights(5);
  gpu_model.init_weights(5);
  Rng rng(31);
  const Ints in = rng.tokens(size_t(B) * T, c.vocab_size), tg = rng.tokens(size_t(B) * T, c.vocab_size);
  const double loss_cpu = cpu_model.forward(in.data(), tg.data(), B, T);
  const double loss_gpu = gpu_model.forward(in.data(), tg.data(), B, T);
  if (std::getenv("EMBER_TEST_VERBOSE"))
    std::printf("  loss %.9f, relative difference %.3g\n", loss_cpu, std::fabs(loss_gpu / loss_cpu - 1.0));
  EXPECT_NEAR(loss_gpu, loss_cpu, loss_rtol * loss_cpu);
  cpu_model.zero_grad();
  gpu_model.zero_grad();
  cpu_model.backward(1.0f);
  gpu_model.backward(1.0f);
  const size_t n = cpu_model.table().total_numel();
  Floats g_cpu(n), g_gpu(n);
  cpu.copy_to_host(g_cpu.data(), cpu_model.grads(), n * sizeof(float));
  gpu.copy_to_host(g_gpu.data(), gpu_model.grads(), n * sizeof(float));
  for (const ParamInfo& info : cpu_model.table().params()) {
    const Floats want(g_cpu.begin() + info.offset, g_cpu.begin() + info.offset + info.numel);
    const Floats got(g_gpu.begin() + info.offset, g_gpu.begin() + info.offset + info.numel);
    expect_close("grad " + info.name, got, want, {r * rms(want), r});
  }
  cpu.set_matmul_precision(MatmulPrecision::fp32);
  gpu.set_matmul_precision(MatmulPrecision::fp32);
}

TEST_F(CudaOpsWholeModel, WholeModelLossAndGradients) {
  // The mean loss is ~ln(V) = 4.6 and sums B T per-token losses, each from V-term sums after ~10 chained ops: 1e-5.
  // A gradient passes through ~4 L + 4 ops (each a sum of up to K = B T 4C = 17280 terms at most), so the errors
  // of the chain add up: 10x the single-op bound with K = B T 4C, relative to each parameter's RMS gradient.
  const double r = 10.0 * 8.0 * std::sqrt(2.0 * 45 * 4 * whole_model_config().n_embd) * kEps;  // ~1.3e-3
  expect_whole_model_close(*cpu, *gpu, MatmulPrecision::fp32, 1e-5, r);
}

// Matmul precision bf16 on both backends, the CPU emulating the GPU's roundings of every GEMM and attention input
// (attention at HS = 16 takes the tensor-core kernels). Both round the same values, so they differ as in fp32 except
// where a value that differs in its last fp32 bits between the backends rounds to the neighbouring bf16, 2^-8 of
// itself away. That is rare, but one such value moves a whole row or column of a weight gradient by 2^-8 of its
// term, and one large term in a sum of B T = 90 can be several times the sum's RMS (seen here: 3.6 x 2^-8 of a
// parameter's RMS gradient, under the kernel model). Allowed: 2^-4 relative to each parameter's RMS gradient (4x
// that), and 1e-4 of the loss (a mean over 90 tokens, which a few such values barely move). A wrong kernel is off by
// O(1); the fp32 test above holds every kernel to fp32 accuracy.
TEST_F(CudaOpsWholeModel, WholeModelLossAndGradientsBf16) {
  expect_whole_model_close(*cpu, *gpu, MatmulPrecision::bf16, 1e-4, std::ldexp(1.0, -4));
}
// The same with an attention schedule in the tensor-core kernels (TScale's shape: a window of 1, then a window with
// an ALiBi slope, rope in both), on both backends and within the same bounds. Without the schedule in the kernels the
// first layer alone (each token seeing itself and one before it, against all of them) is off by O(1).
TEST_F(CudaOpsWholeModel, WholeModelLossAndGradientsBf16WithASchedule) {
  ModelConfig c = whole_model_config();
  c.position = PositionEncoding::rope;
  c.rope_theta = 500000.0f;
  c.attention_windows = {1, 20};
  c.alibi_slopes = {0.0f, 0.5f};
  expect_whole_model_close(*cpu, *gpu, MatmulPrecision::bf16, 1e-4, std::ldexp(1.0, -4), c);
}

// Matmul precision int8 on both backends, the weight gradients in int8 too: the dense layers' products are the CPU's
// bit for bit given the same inputs (test_cuda_ops_matmul_int8.cpp), and the rest runs as under bf16. So the backends
// differ where a value that differs in its last bits (attention's bf16 products, the GELU) rounds to the neighbouring
// int8 step, 1/127 of its row's (or tile's) largest magnitude: coarser than the bf16 test's flips, and summed into
// whole rows of the weight gradients. Allowed: 2^-3 of each parameter's RMS gradient and 1e-3 of the loss; a wrong
// scale, padding or transposition in an int8 launcher is off by O(1).
TEST_F(CudaOpsWholeModel, WholeModelLossAndGradientsInt8) {
  cpu->set_int8_weight_gradient(true);
  gpu->set_int8_weight_gradient(true);
  expect_whole_model_close(*cpu, *gpu, MatmulPrecision::int8, 1e-3, std::ldexp(1.0, -3));
}

// Matmul precision fp8 on both backends: the dense layers' fp8 codes and scales are the CPU's, their sums fp32 in
// another order (the kernel model) or the tensor cores' (a GPU), and a value that differs in its last bits may land
// on the neighbouring fp8 value (2^-3 or 2^-2 of itself apart: E4M3 keeps 4 significant bits, E5M2 3). Allowed: 2^-3
// of each parameter's RMS gradient and 1e-3 of the loss, as for int8.
TEST_F(CudaOpsWholeModel, WholeModelLossAndGradientsFp8) {
  expect_whole_model_close(*cpu, *gpu, MatmulPrecision::fp8, 1e-3, std::ldexp(1.0, -3));
}

// 50 training steps (forward, backward, AdamW over the whole arena in one call) on one fixed batch, which the model
// memorises: the GPU's losses track the CPU's at both matmul precisions. fp32: the per-op differences of the
// whole-model test compound through 50 updates of lr 3e-3; 2e-4 relative (seen under the kernel model: 7e-7) is far
// below what a wrong op or optimizer gives (the loss halves over the run). bf16: values that round to neighbouring
// bf16s on the two backends (as in the whole-model test) move the trajectories apart as training goes on, most where
// the loss falls fastest (steps 24-34). Seen under the kernel model: 5.5e-3. Seen on an H200 machine (2026-11-28):
// step 32's loss was 0.6048 on the GPU and 0.6215 on the CPU backend run on that machine's processor, 2.7% apart,
// where the same binary's CPU backend gives 0.6041 on an AMD EPYC with AVX-512: the CPU reference itself moves that
// much between processors. The cause is not established: OpenBLAS's kernels for other processors, forced there with
// OPENBLAS_CORETYPE, move it by 0.2% at most, and one fp32 ulp on every initial weight, or four on every gradient of
// every step, by under 1%. So 4e-2: a wrong bf16 op or optimizer is off by far more (the loss falls from 4.6 to
// 0.12), and the fp32 test holds every kernel to 2e-4.
void expect_training_tracks_cpu(Backend& cpu, Backend& gpu, MatmulPrecision p, double rtol) {
  const ModelConfig c = whole_model_config();
  const int B = 2, T = 33, steps = 50;  // T past the 32-key tile of the fp32 attention kernels
  Rng rng(47);
  const Ints in = rng.tokens(size_t(B) * T, c.vocab_size), tg = rng.tokens(size_t(B) * T, c.vocab_size);
  OptimizerConfig oc;
  oc.lr = 3e-3f;
  oc.weight_decay = 0.1f;
  auto run = [&](Backend& be) {
    be.set_matmul_precision(p);
    GPT model(c, be, B, T);
    model.init_weights(7);
    AdamW adam(be, model.table(), oc, 0, model.arena_numel());
    const std::vector<double> losses = test::train_on_one_batch(model, adam, in, tg, B, T, steps, oc.lr);
    be.set_matmul_precision(MatmulPrecision::fp32);
    return losses;
  };
  const std::vector<double> want = run(cpu), got = run(gpu);
  EXPECT_LT(want.back(), 0.5 * want.front()) << "the CPU run did not learn the batch";
  double worst = 0.0;
  for (int s = 0; s < steps; ++s) {
    worst = std::max(worst, std::fabs(got[s] / want[s] - 1.0));
    EXPECT_NEAR(got[s] / want[s], 1.0, rtol) << "step " << s << ": gpu " << got[s] << ", cpu " << want[s];
  }
  if (std::getenv("EMBER_TEST_VERBOSE"))
    std::printf("  worst relative loss difference over %d steps: %.3g\n", steps, worst);
}

TEST_F(CudaOpsWholeModel, FiftyTrainingStepsTrackTheCpu) {
  expect_training_tracks_cpu(*cpu, *gpu, MatmulPrecision::fp32, 2e-4);
}
TEST_F(CudaOpsWholeModel, FiftyTrainingStepsTrackTheCpuBf16) {
  expect_training_tracks_cpu(*cpu, *gpu, MatmulPrecision::bf16, 4e-2);
}

#ifndef EMBER_TEST_KERNEL_MODEL
// Memory accounting on the GPU: a training step allocates nothing beyond the model's buffers except op scratch: the
// attention backward's row sums (B NH T floats), dbias's partial column sums where cuBLASLt does not sum it and, with
// bf16 storage, dout rounded to bf16 for the matmul backward passes (B T rows of at most max(V, 4C) columns, 2 bytes
// each: the largest, the lm_head's). The scratch is one buffer, so the largest of these. The device reports at least
// what the backend holds in use.
TEST_F(CudaOpsWholeModel, StepsAllocateOnlyOpScratchAndTheDeviceReportsUse) {
  const ModelConfig c = whole_model_config();
  const int B = 2, T = 45;
  for (MatmulPrecision p : {MatmulPrecision::fp32, MatmulPrecision::bf16}) {
    auto be = make_cuda_backend(0);
    be->set_matmul_precision(p);
    GPT model(c, *be, B, T);
    EXPECT_EQ(model.bf16_storage(), p == MatmulPrecision::bf16);
    model.init_weights(5);
    const size_t held = be->allocated_bytes();
    EXPECT_GE(held, model.weight_bytes() + model.activation_bytes());
    Rng rng(37);
    const Ints in = rng.tokens(size_t(B) * T, c.vocab_size), tg = rng.tokens(size_t(B) * T, c.vocab_size);
    for (int s = 0; s < 2; ++s) {
      model.zero_grad();
      (void)model.forward(in.data(), tg.data(), B, T);
      model.backward(1.0f);
    }
    be->synchronize();
    // dbias's partial column sums: 4C floats per chunk of 256 rows; scratch pieces start 256-byte aligned. The
    // encoder's backward pass sorts the positions by token id, layernorm's sums its parameter gradients in chunks.
    const size_t BT = size_t(B) * T, partials = sizeof(float) * ((BT + 255) / 256) * 4 * c.n_embd + 256;
    size_t scratch =
        std::max({sizeof(float) * size_t(B) * c.n_head * T, partials, cuda::encoder_backward_scratch_bytes(int(BT)),
                  sizeof(float) * cuda::layernorm_backward_scratch_floats(int(BT), c.n_embd)});
    if (model.bf16_storage())
      scratch = std::max(scratch, sizeof(BFloat16) * BT * std::max(c.vocab_size, 4 * c.n_embd) + 256 + partials);
    EXPECT_LE(be->peak_allocated_bytes(), held + scratch) << matmul_precision_name(p);
    size_t used = 0, total = 0;
    ASSERT_TRUE(be->device_memory(&used, &total));
    EXPECT_GE(used, be->allocated_bytes());
    EXPECT_GT(total, used);
  }
}
#endif  // EMBER_TEST_KERNEL_MODEL

}  // namespace
}  // namespace ember
