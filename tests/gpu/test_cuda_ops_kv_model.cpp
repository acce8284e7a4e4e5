// KV-cache inference on the CUDA backend against the CPU backend: the whole cached forward pass (KvModel) of two
// sequences in different slots, prefilled in chunks and then decoded a token per step, at matmul precisions fp32, bf16
// and int8.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cuda_ops_test_util.h"
#include "infer/kv_model.h"
#include "model/gpt.h"

namespace ember {
namespace {

class CudaOpsKvModel : public CudaOps {};

// HS = 16, an odd vocabulary; positions up to 40 cover more than one of the CUDA attention's key tiles only where the
// tile is smaller, so max_T is 160 and the second sequence runs past 128 positions.
ModelConfig kv_config() {
  ModelConfig c;
  c.n_layer = 2;
  c.n_head = 3;
  c.n_embd = 48;
  c.block_size = 160;
  c.vocab_size = 101;
  return c;
}

// The logits of every step on `be`: sequence 0 (slot 1) prefills 9 tokens then decodes to 20; sequence 1 (slot 0)
// prefills 130 tokens in chunks of 50 beside it, then decodes to 140.
std::vector<float> run_steps(Backend& be, const std::vector<float>& weights, const Ints& tokens0, const Ints& tokens1) {
  const ModelConfig c = kv_config();
  KvModel m(c, be, KvModelShape{2, 64, 2, 0});
  be.copy_to_device(m.params(), weights.data(), weights.size() * sizeof(float));
  std::vector<float> all;
  int done0 = 0, done1 = 0;
  while (done0 < 20 || done1 < 140) {
    Ints tok, slot, pos;
    std::vector<int> rows;
    const int n0 = done0 < 20 ? (done0 == 0 ? 9 : 1) : 0;
    for (int k = 0; k < n0; ++k) tok.push_back(tokens0[size_t(done0 + k)]), slot.push_back(1), pos.push_back(done0 + k);
    if (n0) rows.push_back(int(tok.size()) - 1);
    const int n1 = done1 < 140 ? (done1 < 130 ? std::min(50, 130 - done1) : 1) : 0;
    for (int k = 0; k < n1; ++k) tok.push_back(tokens1[size_t(done1 + k)]), slot.push_back(0), pos.push_back(done1 + k);
    if (n1) rows.push_back(int(tok.size()) - 1);
    done0 += n0;
    done1 += n1;
    std::vector<float> logits(rows.size() * size_t(c.vocab_size));
    m.forward(tok.data(), slot.data(), pos.data(), int(tok.size()), rows.data(), int(rows.size()), logits.data());
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

void expect_kv_model_close(Backend& cpu, Backend& gpu, MatmulPrecision p, double r) {
  const ModelConfig c = kv_config();
  cpu.set_matmul_precision(MatmulPrecision::fp32);
  GPT init(c, cpu, 1, 1, /*with_grads=*/false);
  init.init_weights(7);
  std::vector<float> weights(init.table().total_numel());
  cpu.copy_to_host(weights.data(), init.params(), weights.size() * sizeof(float));
  for (float& w : weights) w *= 4.0f;  // logits spread over several units, so a wrong row shows
  Rng rng(41);
  const Ints t0 = rng.tokens(20, c.vocab_size), t1 = rng.tokens(140, c.vocab_size);
  cpu.set_matmul_precision(p);
  gpu.set_matmul_precision(p);
  const std::vector<float> want = run_steps(cpu, weights, t0, t1), got = run_steps(gpu, weights, t0, t1);
  cpu.set_matmul_precision(MatmulPrecision::fp32);
  gpu.set_matmul_precision(MatmulPrecision::fp32);
  expect_close("KV-cache logits", got, want, {r * rms(want), r});
}

TEST_F(CudaOpsKvModel, KvModelPrefillAndDecode) {
  // Each logit ends a chain of ~10 ops per layer whose sums run over at most 4C = 192 products or 140 positions, in
  // other orders on the two backends: 10x the single-op fp32 bound for K = 192, relative to the logits' RMS.
  const double r = 10.0 * 8.0 * std::sqrt(2.0 * 4 * kv_config().n_embd) * kEps;  // ~1.9e-4
  expect_kv_model_close(*cpu, *gpu, MatmulPrecision::fp32, r);
}

TEST_F(CudaOpsKvModel, KvModelPrefillAndDecodeBf16) {
  // Both backends round the same GEMM inputs to bf16; a value whose last fp32 bits differ can round to the
  // neighbouring bf16 (2^-8 of itself), rarely: 2^-5 of the logits' RMS, while a wrong kernel is off by O(1).
  expect_kv_model_close(*cpu, *gpu, MatmulPrecision::bf16, 1.0 / 32);
}

TEST_F(CudaOpsKvModel, KvModelPrefillAndDecodeInt8) {
  // The dense layers' int8 products are the CPU's bit for bit on the same inputs; a value whose last bits differ (the
  // attention's sums) can cross an int8 rounding boundary, one step of 1/127 of its row's largest value: 2^-4 of the
  // logits' RMS, while a wrong weight copy or layout is off by O(1).
  expect_kv_model_close(*cpu, *gpu, MatmulPrecision::int8, 1.0 / 16);
}

}  // namespace
}  // namespace ember
