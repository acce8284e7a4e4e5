// The memory estimate against the allocations it predicts: GPT and AdamW built on the CPU backend at small, odd
// sizes, every recompute mode and precision, with and without gradients, must allocate exactly what
// estimate_training_memory / estimate_inference_memory say, so the check before allocating cannot drift.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/gpt.h"
#include "train/adamw.h"
#include "train/memory_estimate.h"

namespace ember {
namespace {

// The CPU backend rounds each allocation up to 64 bytes; the models here make fewer than 100 allocations.
constexpr size_t kRoundingSlack = 64 * 100;

RunConfig odd_config() {
  RunConfig c;
  c.model = {3, 3, 48, 16, 257};  // n_layer, n_head, n_embd (head size 16), block_size, vocab_size
  c.training.batch_size = 3;
  c.training.seq_len = 7;
  return c;
}

TEST(MemoryEstimate, TrainingEqualsWhatGptAndAdamWAllocate) {
  for (Recompute recompute : kRecomputes)
    for (MatmulPrecision precision : {MatmulPrecision::fp32, MatmulPrecision::bf16})
      for (int world_size : {1, 2, 4})
        for (int zero : {0, 1}) {
          RunConfig c = odd_config();
          c.training.recompute = recompute;
          c.training.zero = zero;
          std::unique_ptr<Backend> be = make_cpu_backend();
          be->set_matmul_precision(precision);
          const MemoryEstimate est = estimate_training_memory(c, world_size, precision);
          GPT model(c.model, *be, c.training.batch_size, c.training.seq_len, /*with_grads=*/true, recompute);
          // The shard as the sync trainer takes it.
          const size_t share = zero ? model.arena_numel() / size_t(world_size) : model.arena_numel();
          AdamW adam(*be, model.table(), c.optimizer, 0, share);
          void* grad_shard = zero ? be->alloc(share * sizeof(float)) : nullptr;
          const std::string what = std::string(recompute_name(recompute)) + " " + matmul_precision_name(precision) +
                                   " world " + std::to_string(world_size) + " zero " + std::to_string(zero);
          EXPECT_EQ(est.weights, model.weight_bytes()) << what;
          EXPECT_EQ(est.activations, model.activation_bytes()) << what;
          EXPECT_EQ(est.moments, 2 * (adam.shard_end() - adam.shard_begin()) * sizeof(float)) << what;
          // Everything the backend handed out, less its rounding of each allocation up to 64 bytes.
          EXPECT_LE(est.total(), be->peak_allocated_bytes()) << what;
          EXPECT_LT(be->peak_allocated_bytes() - est.total(), kRoundingSlack) << what;
          if (grad_shard) be->free(grad_shard);
        }
}

// Under int8 and fp8 the backend also keeps each dense weight's quantized copies (int8: two, fp8: one), made by the
// first step: the estimate counts them exactly, on top of what GPT and AdamW allocate.
TEST(MemoryEstimate, QuantizedPrecisionsCountTheWeightCopiesTheBackendKeeps) {
  for (MatmulPrecision precision : {MatmulPrecision::int8, MatmulPrecision::fp8}) {
    const std::string what = matmul_precision_name(precision);
    RunConfig c = odd_config();
    std::unique_ptr<Backend> be = make_cpu_backend();
    be->set_matmul_precision(precision);
    const MemoryEstimate est = estimate_training_memory(c, 1, precision);
    GPT model(c.model, *be, c.training.batch_size, c.training.seq_len);
    model.init_weights(1);
    AdamW adam(*be, model.table(), c.optimizer, 0, model.arena_numel());
    std::vector<int32_t> tokens(size_t(c.training.batch_size) * size_t(c.training.seq_len));
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(i * 37 % 257);
    EXPECT_EQ(be->quantized_weight_copy_bytes(), 0u) << what;
    model.zero_grad();
    model.forward_backward(tokens.data(), tokens.data(), c.training.batch_size, c.training.seq_len, 1.0f);
    const size_t copies = be->quantized_weight_copy_bytes();
    EXPECT_GT(copies, 0u) << what;
    EXPECT_EQ(copies, GPT::quantized_weight_copy_bytes(c.model, precision)) << what;
    EXPECT_EQ(est.weights, model.weight_bytes() + copies) << what;
    EXPECT_EQ(est.activations, model.activation_bytes()) << what;
    // The backend's accounting (the start-up log's measured peak) counts the copies too; its GEMM scratch it does
    // not.
    EXPECT_LE(est.total(), be->peak_allocated_bytes()) << what;
    EXPECT_LT(be->peak_allocated_bytes() - est.total(), kRoundingSlack) << what;
  }
}

TEST(MemoryEstimate, InferenceEqualsWhatAGradientFreeGptAllocates) {
  for (MatmulPrecision precision : {MatmulPrecision::fp32, MatmulPrecision::bf16}) {
    const ModelConfig m = odd_config().model;
    std::unique_ptr<Backend> be = make_cpu_backend();
    be->set_matmul_precision(precision);
    const MemoryEstimate est = estimate_inference_memory(m, 5, 11, precision, 123);
    GPT model(m, *be, 5, 11, /*with_grads=*/false);
    EXPECT_EQ(est.weights, model.weight_bytes());
    EXPECT_EQ(est.activations, model.activation_bytes());
    EXPECT_EQ(est.extra, 123u);
    EXPECT_LE(est.total() - est.extra, be->peak_allocated_bytes());
    EXPECT_LT(be->peak_allocated_bytes() - (est.total() - est.extra), kRoundingSlack);
  }
}

TEST(MemoryEstimate, SaturatesInsteadOfOverflowing) {
  RunConfig c;
  c.model = {1024, 64, 65536, 1 << 20, 65536};
  c.training.batch_size = 65536;
  c.training.seq_len = 1 << 20;
  EXPECT_EQ(estimate_training_memory(c, 1, MatmulPrecision::fp32).total(), SIZE_MAX);
}

TEST(MemoryEstimate, ShortfallGivesTheEstimateAndWhatIsAvailable) {
  MemoryEstimate need;
  need.weights = 3 << 20;
  need.moments = 2 << 20;
  need.activations = 5 << 20;
  EXPECT_EQ(memory_shortfall("training", need, 1, 10 << 20, "host"), "");
  const std::string msg = memory_shortfall("training", need, 1, (10 << 20) - 1, "host");
  EXPECT_NE(msg.find("training needs about 10.0 MiB"), std::string::npos) << msg;
  EXPECT_NE(msg.find("activations 5.0 MiB"), std::string::npos) << msg;
  EXPECT_NE(msg.find("host has 10.0 MiB available"), std::string::npos) << msg;
  // Ranks on one host share its memory.
  EXPECT_EQ(memory_shortfall("training", need, 2, 20 << 20, "host"), "");
  EXPECT_NE(memory_shortfall("training", need, 3, 20 << 20, "host").find("x 3 ranks = 30.0 MiB"), std::string::npos);
}

// training.offload = optimizer: the moments leave the backend's memory (GPT and AdamW allocate the estimate's
// total there, no moments) and the host holds the masters, moments and gradient staging the estimate's host part
// counts: two chunks' where the gradients are averaged over 2 ranks first, the whole arena's where one rank hands
// them off layer by layer (offload_hands_off). In bf16 and int8 the model keeps no fp32 arena (host masters; in int8
// without ZeRO-1 the dense weights' bf16 copy stays on the host too) and the host stages the bf16 copy and the packed
// tensors: the estimate counts all of those, rank 0's shard under ZeRO-1 fewer.
TEST(MemoryEstimate, OffloadMovesTheMomentsToTheHost) {
  struct Case {
    int world, zero;
    MatmulPrecision precision;
    WeightHome home;
  };
  const auto fp32 = MatmulPrecision::fp32, bf16 = MatmulPrecision::bf16, int8 = MatmulPrecision::int8;
  for (const Case k : {Case{2, 0, fp32, WeightHome::device}, Case{2, 1, fp32, WeightHome::device},
                       Case{1, 0, fp32, WeightHome::device}, Case{2, 0, bf16, WeightHome::host},
                       Case{2, 1, bf16, WeightHome::host}, Case{1, 0, bf16, WeightHome::host},
                       Case{1, 0, int8, WeightHome::host_dense}, Case{2, 1, int8, WeightHome::host}}) {
    SCOPED_TRACE("world " + std::to_string(k.world) + ", zero " + std::to_string(k.zero) + ", " +
                 matmul_precision_name(k.precision));
    RunConfig c = odd_config();
    c.training.zero = k.zero;
    c.training.offload = Offload::optimizer;
    std::unique_ptr<Backend> be = make_cpu_backend();
    be->set_matmul_precision(k.precision);
    const MemoryEstimate est = estimate_training_memory(c, k.world, k.precision);
    EXPECT_EQ(offload_weight_home(c, k.precision), k.home);
    GPT model(c.model, *be, c.training.batch_size, c.training.seq_len, true, Recompute::none, k.home);
    const size_t share = k.zero ? model.arena_numel() / size_t(k.world) : model.arena_numel();
    const bool handoff = offload_hands_off(c, k.world);
    EXPECT_EQ(handoff, k.world == 1);
    AdamW adam(*be, model.table(), c.optimizer, 0, share, Offload::optimizer, handoff, model.device_weights());
    void* grad_shard = k.zero ? be->alloc(share * sizeof(float)) : nullptr;
    EXPECT_EQ(est.moments, 0u);
    // Masters, two moments, and the staging: two buffers of the shard here (smaller than a chunk), or the gradients;
    // with host masters the bf16 copy's and the packed tensors' (in bf16 too under host_dense).
    const bool host = k.home != WeightHome::device;
    const size_t packed = host ? PackedFp32Layout(model.table()).numel() : 0;
    const size_t packed_bytes = k.home == WeightHome::host_dense ? 6 : 4;
    EXPECT_EQ(est.host, (handoff ? 4 : 5) * share * sizeof(float) + (host ? share * 2 + packed * packed_bytes : 0));
    if (k.zero && host) {
      EXPECT_LT(adam.host_bytes(), est.host);
      EXPECT_GE(adam.host_bytes() + packed * packed_bytes, est.host);
    } else {
      EXPECT_EQ(adam.host_bytes(), est.host);
    }
    // The backend makes its int8 copies only when a product runs, which none does here.
    const size_t allocated = est.total() - GPT::quantized_weight_copy_bytes(c.model, k.precision);
    EXPECT_LE(allocated, be->peak_allocated_bytes());
    EXPECT_LT(be->peak_allocated_bytes() - allocated, kRoundingSlack);
    if (grad_shard) be->free(grad_shard);
  }
}

// GPT-2 1.5B (configs/gpt2-1.5b.ini: B 2, T 1024) in bf16 with full recompute on one 24 GB GPU: refused as it is
// (the moments alone are 12.5 GB), accepted with the optimizer offloaded where the host has 64 GB, refused naming
// the host where it has 16 GB (the masters, moments, the gradients handed off and the staging of the device's weights
// take 26.4 GiB); one rank.
TEST(MemoryEstimate, OffloadFitsGpt2XlOnA24GBDevice) {
  RunConfig c;
  c.model = {48, 25, 1600, 1024, 50257};
  c.training.batch_size = 2;
  c.training.seq_len = 1024;
  c.training.recompute = Recompute::full;
  const size_t gb = size_t(1) << 30, device = 24 * gb;
  const MemoryEstimate plain = estimate_training_memory(c, 1, MatmulPrecision::bf16);
  const std::string refused = memory_problem("training", plain, device, "RTX 4090", 64 * gb, 1);
  EXPECT_NE(refused.find("RTX 4090 (free memory)"), std::string::npos) << refused;
  c.training.offload = Offload::optimizer;
  const MemoryEstimate offloaded = estimate_training_memory(c, 1, MatmulPrecision::bf16);
  EXPECT_NEAR(double(offloaded.host) / double(gb), 26.42, 0.01);
  // The device holds no fp32 arena then (GPT's host masters): the weights' part drops by 1.558e9 x 4 bytes less the
  // packed fp32 tensors' (wte, wpe and the layers' vectors: 83.0e6 x 4); the host stages the bf16 copy instead.
  EXPECT_NEAR(double(plain.weights - offloaded.weights) / double(gb), 5.49, 0.01);
  // In int8 the dense weights' bf16 copy stays on the host too (host_dense): the device keeps the packed tensors in
  // fp32 and bf16, the int8 copies (2 bytes a dense parameter), the gradients and the activations.
  const MemoryEstimate int8 = estimate_training_memory(c, 1, MatmulPrecision::int8);
  EXPECT_NEAR(double(int8.total()) / double(gb), 9.99, 0.01);
  std::printf("1.5B int8: device %.2f GiB (weights %.2f), host %.2f GiB\n", double(int8.total()) / double(gb),
              double(int8.weights) / double(gb), double(int8.host) / double(gb));
  std::printf("1.5B bf16, B 2, full recompute: device %.2f GiB (weights %.2f), host %.2f GiB\n",
              double(offloaded.total()) / double(gb), double(offloaded.weights) / double(gb),
              double(offloaded.host) / double(gb));
  EXPECT_EQ(memory_problem("training", offloaded, device, "RTX 4090", 64 * gb, 1), "")
      << "device " << offloaded.total() / double(gb) << " GiB";
  const std::string host = memory_problem("training", offloaded, device, "RTX 4090", 16 * gb, 1);
  EXPECT_NE(host.find("training on the host needs about"), std::string::npos) << host;
  EXPECT_NE(host.find("offloaded optimizer"), std::string::npos) << host;
  EXPECT_NE(host.find("this host (MemAvailable) has 16.0 GiB available"), std::string::npos) << host;
  // Without a device (the CPU backend) the two share the host.
  EXPECT_NE(memory_problem("training", offloaded, std::nullopt, "cpu", offloaded.total() + offloaded.host - 1, 1), "");
  EXPECT_EQ(memory_problem("training", offloaded, std::nullopt, "cpu", offloaded.total() + offloaded.host, 1), "");
}

TEST(MemoryEstimate, HostAvailableIsReadable) {
  const std::optional<size_t> avail = host_available_bytes();
  ASSERT_TRUE(avail.has_value());  // Linux: /proc/meminfo
  EXPECT_GT(*avail, 0u);
}

}  // namespace
}  // namespace ember
