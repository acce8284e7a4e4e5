// The whole GPT on the CPU backend: gradients against central finite differences of the loss, the init loss
// against ln(V), determinism, activation recomputation (bitwise equal gradients, less memory), the padded vocabulary,
// bf16 matmuls and storage, the memory a step allocates, and forward_tail's losses.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/philox.h"
#include "model/gpt.h"
#include "model/param_table.h"
#include "model_test_util.h"
#include "train/adamw.h"
#include "train_steps.h"

namespace ember {
namespace {

// The padded vocabulary takes no part: wte's padding rows start zero, and whatever they hold (here huge values, as
// an asynchronous exchange could leave in any arena gap) changes no loss and no gradient but their own, which stays
// zero; AdamW leaves them as they are; and the logits' padding columns, which the lm_head computes from them, are
// zero while the rows are.
TEST(GPT, VocabularyPaddingTakesNoPart) {
  const ModelConfig c = tiny_config();
  const int B = 2, T = 7, C = c.n_embd, V = c.vocab_size, Vp = c.padded_vocab_size();
  ASSERT_GT(Vp, V);
  auto backend = make_cpu_backend();
  GPT model(c, *backend, B, T);
  model.init_weights(5);
  const size_t n = model.table().total_numel(), pad0 = model.table().wte().offset + size_t(V) * C,
               pad1 = model.table().wte().offset + size_t(Vp) * C;
  std::vector<float> params(n);
  backend->copy_to_host(params.data(), std::as_const(model).params(), n * sizeof(float));
  for (size_t i = pad0; i < pad1; ++i) ASSERT_EQ(params[i], 0.0f) << "padding element " << i - pad0;
  const auto in = random_tokens(size_t(B) * T, V, 9), tg = random_tokens(size_t(B) * T, V, 10);
  auto run = [&](std::vector<float>& grads) {
    model.zero_grad();
    const double loss = model.forward(in.data(), tg.data(), B, T);
    std::vector<float> logits(size_t(B) * T * Vp);
    backend->copy_to_host(logits.data(), model.logits().f32(), logits.size() * sizeof(float));
    model.backward(1.0f);
    grads.resize(n);
    backend->copy_to_host(grads.data(), model.grads(), n * sizeof(float));
    return std::make_pair(loss, logits);
  };
  std::vector<float> g0, g1;
  const auto [loss0, logits0] = run(g0);
  for (size_t r = 0; r < size_t(B) * T; ++r)
    for (int j = V; j < Vp; ++j) ASSERT_EQ(logits0[r * Vp + j], 0.0f) << "logits padding, row " << r;
  Philox rng(17, 0, 0, RNG_PURPOSE_TEST);
  for (size_t i = pad0; i < pad1; ++i) params[i] = 1e3f * rng.normal();
  backend->copy_to_device(model.params(), params.data(), n * sizeof(float));
  const auto [loss1, logits1] = run(g1);
  EXPECT_EQ(loss1, loss0) << "the padding rows changed the loss";
  EXPECT_EQ(g1, g0) << "the padding rows changed a gradient";
  for (size_t i = pad0; i < pad1; ++i) ASSERT_EQ(g1[i], 0.0f) << "padding gradient " << i - pad0;
  OptimizerConfig oc;
  AdamW adam(*backend, model.table(), oc, 0, model.arena_numel());
  adam.step(model.params(), model.grads(), 1e-2f);
  std::vector<float> after(n);
  backend->copy_to_host(after.data(), std::as_const(model).params(), n * sizeof(float));
  for (size_t i = pad0; i < pad1; ++i) ASSERT_EQ(after[i], params[i]) << "AdamW moved padding element " << i - pad0;
}

TEST(GPT, InitialLossIsNearLogVocab) {
  ModelConfig c = tiny_config();
  auto backend = make_cpu_backend();
  GPT model(c, *backend, 4, 16);
  model.init_weights(1);
  auto in = random_tokens(64, c.vocab_size, 1), tg = random_tokens(64, c.vocab_size, 2);
  const double loss = model.forward(in.data(), tg.data(), 4, 16);
  // With N(0, 0.02) weights the logits are within ~0.1 of each other, so the loss is ln(V) to within ~0.05.
  EXPECT_NEAR(loss, std::log(double(c.vocab_size)), 0.05);
}

// Every parameter's gradient against central differences of the loss, at four coordinates per tensor.
void expect_gradients_match_finite_differences(const ModelConfig& c) {
  auto backend = make_cpu_backend();
  const int B = 2, T = 7;  // T deliberately not a multiple of anything
  GPT model(c, *backend, B, T);
  model.init_weights(3);
  const size_t n = model.table().total_numel();
  // Larger-than-init weights so every gradient is well above fp32 noise.
  {
    std::vector<float> p(n);
    backend->copy_to_host(p.data(), model.params(), n * sizeof(float));
    Philox rng(11, 0, 0, RNG_PURPOSE_TEST);
    for (auto& x : p) x += 0.2f * rng.normal();
    backend->copy_to_device(model.params(), p.data(), n * sizeof(float));
  }
  auto in = random_tokens(size_t(B) * T, c.vocab_size, 3), tg = random_tokens(size_t(B) * T, c.vocab_size, 4);
  model.zero_grad();
  model.forward(in.data(), tg.data(), B, T);
  model.backward(1.0f);
  std::vector<float> grads(n), params(n);
  backend->copy_to_host(grads.data(), model.grads(), n * sizeof(float));
  backend->copy_to_host(params.data(), model.params(), n * sizeof(float));

  // Central differences with h = 1e-2 on fp32: truncation error ~h^2 |f'''| ~ 1e-4 and rounding error
  // ~eps32 |L| / h ~ 4e-6 * 4 / 1e-2 ~ 2e-3 relative to unit-size gradients; tolerance 2e-3 + 5e-2 |g| covers both.
  const float h = 1e-2f;
  Philox pick(13, 0, 0, RNG_PURPOSE_TEST);
  int checked = 0;
  for (const ParamInfo& p : model.table().params()) {
    for (int k = 0; k < 4; ++k) {
      const size_t i = p.offset + pick.below(p.numel);
      const float saved = params[i];
      auto loss_with = [&](float value) {
        params[i] = value;
        backend->copy_to_device(model.params(), params.data(), n * sizeof(float));
        return model.forward(in.data(), tg.data(), B, T);
      };
      const double fd = (loss_with(saved + h) - loss_with(saved - h)) / (2.0 * h);
      loss_with(saved);
      EXPECT_NEAR(grads[i], fd, 2e-3 + 5e-2 * std::fabs(fd)) << p.name << " index " << i - p.offset;
      ++checked;
    }
  }
  EXPECT_EQ(checked, int(model.table().params().size()) * 4);
}

TEST(GPT, GradientsMatchFiniteDifferences) { expect_gradients_match_finite_differences(tiny_config()); }

// With rotary positions (no wpe), a window of one token in the first layer and ALiBi in the second.
TEST(GPT, GradientsMatchFiniteDifferencesWithAnAttentionSchedule) {
  ModelConfig c = tiny_config();
  c.position = PositionEncoding::rope;
  c.attention_windows = {1, 0};
  c.alibi_slopes = {0.0f, 0.5f};
  expect_gradients_match_finite_differences(c);
}

TEST(GPT, ForwardBackwardIsBitwiseDeterministic) {
  ModelConfig c = tiny_config();
  auto backend = make_cpu_backend();
  const int B = 3, T = 11;
  auto run = [&]() {
    GPT model(c, *backend, B, T);
    model.init_weights(5);
    auto in = random_tokens(size_t(B) * T, c.vocab_size, 5), tg = random_tokens(size_t(B) * T, c.vocab_size, 6);
    model.zero_grad();
    const double loss = model.forward(in.data(), tg.data(), B, T);
    model.backward(1.0f);
    std::vector<float> g(model.table().total_numel());
    backend->copy_to_host(g.data(), model.grads(), g.size() * sizeof(float));
    return std::make_pair(loss, g);
  };
  auto a = run(), b = run();
  EXPECT_EQ(a.first, b.first);
  EXPECT_EQ(a.second, b.second);
}

// forward_tail forms logits only at each row's last `scored` positions before its end: its losses there are bitwise
// forward's, at fp32 and bf16 storage, with rows ending anywhere (one shorter than `scored`, whose missing positions
// hold 0); forward's own losses are left as they were.
TEST(GPT, ForwardTailIsForwardAtTheScoredPositions) {
  for (MatmulPrecision p : {MatmulPrecision::fp32, MatmulPrecision::bf16}) {
    SCOPED_TRACE(matmul_precision_name(p));
    const ModelConfig c = tiny_config();
    auto backend = make_cpu_backend();
    backend->set_matmul_precision(p);
    const int B = 3, T = 11, scored = 4;
    const int ends[B] = {11, 7, 3};
    GPT model(c, *backend, B, T, /*with_grads=*/false);
    model.init_weights(5);
    const auto in = random_tokens(size_t(B) * T, c.vocab_size, 5), tg = random_tokens(size_t(B) * T, c.vocab_size, 6);
    model.forward(in.data(), tg.data(), B, T);
    const std::vector<float> full(model.token_losses().begin(), model.token_losses().end());
    ASSERT_EQ(full.size(), size_t(B) * T);
    std::vector<int32_t> tail(size_t(B) * scored, 0);
    for (int r = 0; r < B; ++r)
      for (int j = 0; j < scored; ++j)
        if (ends[r] - scored + j >= 0) tail[size_t(r) * scored + j] = tg[size_t(r) * T + ends[r] - scored + j];
    model.forward_tail(in.data(), tail.data(), B, T, ends, scored);
    const std::span<const float> got = model.token_losses();
    ASSERT_EQ(got.size(), size_t(B) * scored);
    for (int r = 0; r < B; ++r)
      for (int j = 0; j < scored; ++j) {
        const int t = ends[r] - scored + j;
        EXPECT_EQ(got[size_t(r) * scored + j], t >= 0 ? full[size_t(r) * T + t] : 0.0f) << r << " " << j;
      }
  }
}

// forward_backward takes the loss and its gradient in one op (the fused classifier), which on the CPU is the two
// plain ops: bitwise forward + backward, at every precision and over two accumulated micro-batches.
TEST(GPT, ForwardBackwardIsBitwiseForwardThenBackward) {
  ModelConfig c = tiny_config();
  const int B = 3, T = 11;
  for (MatmulPrecision precision : kMatmulPrecisions) {
    auto backend = make_cpu_backend();
    backend->set_matmul_precision(precision);
    auto run = [&](bool fused) {
      GPT model(c, *backend, B, T);
      model.init_weights(5);
      model.zero_grad();
      double loss = 0.0;
      for (uint32_t m = 0; m < 2; ++m) {
        auto in = random_tokens(size_t(B) * T, c.vocab_size, 5 + 2 * m);
        auto tg = random_tokens(size_t(B) * T, c.vocab_size, 6 + 2 * m);
        if (fused) {
          loss += model.forward_backward(in.data(), tg.data(), B, T, 0.5f);
        } else {
          loss += model.forward(in.data(), tg.data(), B, T);
          model.backward(0.5f);
        }
      }
      std::vector<float> g(model.table().total_numel());
      backend->copy_to_host(g.data(), model.grads(), g.size() * sizeof(float));
      return std::make_pair(loss, g);
    };
    const auto plain = run(false), fused = run(true);
    EXPECT_EQ(fused.first, plain.first) << matmul_precision_name(precision);
    EXPECT_EQ(fused.second, plain.second) << matmul_precision_name(precision);
  }
}

// Recomputation reruns the same deterministic ops on the same inputs, so losses, gradients and (over two micro-batches
// accumulated, with a parameter change between) everything must be bitwise those of Recompute::none; each mode must
// keep fewer activation bytes than the one before.
TEST(GPT, RecomputeGivesBitwiseEqualGradientsWithLessMemory) {
  ModelConfig c = tiny_config();
  c.n_layer = 3;
  auto backend = make_cpu_backend();
  const int B = 3, T = 11;
  auto run = [&](Recompute r, size_t* activation_bytes) {
    GPT model(c, *backend, B, T, /*with_grads=*/true, r);
    EXPECT_EQ(model.recompute(), r);
    *activation_bytes = model.activation_bytes();
    model.init_weights(5);
    const size_t n = model.table().total_numel();
    std::vector<float> p(n);
    backend->copy_to_host(p.data(), model.params(), n * sizeof(float));
    Philox rng(17, 0, 0, RNG_PURPOSE_TEST);
    for (auto& x : p) x += 0.1f * rng.normal();
    backend->copy_to_device(model.params(), p.data(), n * sizeof(float));
    std::vector<double> losses;
    model.zero_grad();
    for (uint32_t k = 0; k < 2; ++k) {
      auto in = random_tokens(size_t(B) * T, c.vocab_size, 20 + k),
           tg = random_tokens(size_t(B) * T, c.vocab_size, 30 + k);
      losses.push_back(model.forward(in.data(), tg.data(), B, T));
      model.backward(0.5f);
    }
    std::vector<float> grads(n);
    backend->copy_to_host(grads.data(), model.grads(), n * sizeof(float));
    return std::make_pair(losses, grads);
  };
  size_t bytes_none = 0, bytes_attention = 0, bytes_full = 0;
  const auto none = run(Recompute::none, &bytes_none);
  const auto attention = run(Recompute::attention, &bytes_attention);
  const auto full = run(Recompute::full, &bytes_full);
  EXPECT_EQ(attention.first, none.first);
  EXPECT_EQ(full.first, none.first);
  ASSERT_EQ(attention.second.size(), none.second.size());
  size_t differ_attention = 0, differ_full = 0, nonzero = 0;
  for (size_t i = 0; i < none.second.size(); ++i) {
    differ_attention += attention.second[i] != none.second[i];
    differ_full += full.second[i] != none.second[i];
    nonzero += none.second[i] != 0.0f;
  }
  EXPECT_EQ(differ_attention, 0u);
  EXPECT_EQ(differ_full, 0u);
  EXPECT_GT(nonzero, none.second.size() / 2);
  // Per layer and token, none keeps 16 C + NH + 4 floats, attention 11 C + 2, full C: with 3 layers the savings
  // are far above the one layer of scratch the recomputing modes add.
  EXPECT_LT(bytes_attention, bytes_none);
  EXPECT_LT(bytes_full, bytes_attention);
  EXPECT_EQ(parse_recompute("attention"), Recompute::attention);
  EXPECT_STREQ(recompute_name(Recompute::full), "full");
  EXPECT_EQ(parse_recompute("selective"), std::nullopt);
}

// Matmul precisions bf16, int8 and fp8 on the whole model: 50 AdamW steps on one fixed batch (the loss falls by more
// than half as the model memorises it) track the fp32 run. bf16 keeps 8 significant bits, so each GEMM input is off by
// up to 2^-8 relative; the products average those errors over their sums. int8 keeps about 7 bits of each row's
// largest value, so small values lose more. The losses must agree within 2% at every step (measured: 0.5% at worst
// for bf16, 0.6% for int8). fp8 keeps 4 significant bits (e4m3) and 3 for gradients (e5m2), 16 times bf16's error per
// value, and runs behind: within 5% (measured: 3.1% at worst, in the last steps, where the loss falls fastest). Each
// must still differ from the precision before it (else nothing was rounded, or no product ran in int8 or fp8).
TEST(GPT, LowPrecisionMatmulsTrackTheFp32LossCurve) {
  const ModelConfig c = tiny_config();
  const int B = 4, T = 16, steps = 50;
  const auto in = random_tokens(size_t(B) * T, c.vocab_size, 3), tg = random_tokens(size_t(B) * T, c.vocab_size, 4);
  OptimizerConfig oc;
  oc.lr = 3e-3f;
  oc.weight_decay = 0.0f;
  auto run = [&](MatmulPrecision p) {
    auto backend = make_cpu_backend();
    backend->set_matmul_precision(p);
    GPT model(c, *backend, B, T);
    model.init_weights(1);
    model.set_dither_seed(9);
    AdamW adam(*backend, model.table(), oc, 0, model.arena_numel());
    return test::train_on_one_batch(model, adam, in, tg, B, T, steps, oc.lr);
  };
  std::vector<std::vector<double>> losses;
  for (MatmulPrecision p : kMatmulPrecisions) losses.push_back(run(p));
  const std::vector<double>& fp32 = losses[0];
  EXPECT_LT(fp32.back(), 0.5 * fp32.front()) << "the fp32 run did not learn the batch";
  for (size_t k = 1; k < losses.size(); ++k) {
    const std::string name = matmul_precision_name(kMatmulPrecisions[k]);
    int differ = 0;
    for (int s = 0; s < steps; ++s) {
      EXPECT_NEAR(losses[k][s] / fp32[s], 1.0, kMatmulPrecisions[k] == MatmulPrecision::fp8 ? 0.05 : 0.02)
          << "step " << s << ": " << name << " " << losses[k][s] << ", fp32 " << fp32[s];
      differ += losses[k][s] != losses[k - 1][s];
    }
    EXPECT_GT(differ, steps / 2) << name << " losses equal those of the precision before it";
  }
}

// bf16 storage (GPT's constructor): under matmul precision bf16 the model keeps its GEMM inputs (the ln_1, ln_2, GELU
// and ln_f outputs, attention's with bf16 attention, and a working copy of the weights) in bf16, which changes no
// value (OpsStorage.Bf16StorageChangesNoValue), and the outputs of c_attn, c_fc (their biases in bf16) and the
// lm_head, which rounds them once more (the logits' gradient, which backward writes over them, is rounded as read
// anyway). Five AdamW steps (the weight copy refreshed after each):
//  - recompute attention and full give bitwise the losses and weights of none, as in fp32 (the recomputed tensors are
//    stored as the kept ones are);
//  - they track a model that stores everything in fp32 (built at fp32, then run at bf16) within the 2% of
//    LowPrecisionMatmulsTrackTheFp32LossCurve: the added roundings are one more of the same size as those bf16 already
//    makes (measured: under 0.01%), yet must change some loss (else nothing was rounded);
//  - without recomputation the activations shrink by 2 bytes per element of those outputs, and the weights grow by
//    the 2-byte copy.
TEST(GPT, Bf16StorageHalvesTheActivationsAndTracksFp32Storage) {
  const ModelConfig c = tiny_config();
  const int B = 3, T = 13, steps = 5;
  const auto in = random_tokens(size_t(B) * T, c.vocab_size, 7), tg = random_tokens(size_t(B) * T, c.vocab_size, 8);
  OptimizerConfig oc;
  oc.lr = 3e-3f;
  struct Run {
    std::vector<double> losses;
    std::vector<float> params;
    size_t weight_bytes = 0, activation_bytes = 0;
  };
  auto run = [&](bool storage, Recompute r) {
    auto backend = make_cpu_backend();
    backend->set_matmul_precision(storage ? MatmulPrecision::bf16 : MatmulPrecision::fp32);
    GPT model(c, *backend, B, T, /*with_grads=*/true, r);
    EXPECT_EQ(model.bf16_storage(), storage);
    backend->set_matmul_precision(MatmulPrecision::bf16);
    Run out;
    out.weight_bytes = model.weight_bytes(), out.activation_bytes = model.activation_bytes();
    model.init_weights(3);
    AdamW adam(*backend, model.table(), oc, 0, model.arena_numel());
    out.losses = test::train_on_one_batch(model, adam, in, tg, B, T, steps, oc.lr);
    out.params.resize(model.table().total_numel());
    backend->copy_to_host(out.params.data(), model.params(), out.params.size() * sizeof(float));
    return out;
  };
  const Run fp32 = run(false, Recompute::none), bf16 = run(true, Recompute::none);
  for (Recompute r : {Recompute::attention, Recompute::full}) {
    const Run again = run(true, r);
    EXPECT_EQ(again.losses, bf16.losses) << recompute_name(r);
    EXPECT_EQ(again.params, bf16.params) << recompute_name(r);
    EXPECT_LT(again.activation_bytes, bf16.activation_bytes) << recompute_name(r);
  }
  EXPECT_LT(bf16.losses.back(), bf16.losses.front()) << "the steps did not train";
  int differ = 0;
  for (int s = 0; s < steps; ++s) {
    EXPECT_NEAR(bf16.losses[s] / fp32.losses[s], 1.0, 0.02) << "step " << s;
    differ += bf16.losses[s] != fp32.losses[s];
  }
  EXPECT_GT(differ, 0) << "storing the dense layers' and the lm_head's outputs in bf16 changed no loss: were they "
                          "rounded?";
  const size_t arena = (ParamTable(c).total_numel() + GPT::ARENA_ALIGN - 1) / GPT::ARENA_ALIGN * GPT::ARENA_ALIGN;
  EXPECT_EQ(bf16.weight_bytes - fp32.weight_bytes, arena * sizeof(BFloat16));
  // Per layer and token ln_1, attention's output (HS 16: bf16 attention), ln_2 (C each), qkv (3C), fch and GELU's
  // output (4C each), then the two projections' outputs (scratch, C each), ln_f (C), the logits (the padded
  // vocabulary) and the backward pass's gradients of the dense layers' inputs (C) and of qkv (3C), stored as qkv is,
  // and of GELU's output (4C, stored as GEMM inputs are).
  ASSERT_TRUE(attention_in_bf16(MatmulPrecision::bf16, c.n_embd / c.n_head));
  const size_t halved =
      size_t(B) * T * ((size_t(c.n_layer) * 14 + 2 + 1 + 1 + 3 + 4) * c.n_embd + c.padded_vocab_size());
  EXPECT_EQ(fp32.activation_bytes - bf16.activation_bytes, halved * (sizeof(float) - sizeof(BFloat16)));
}

// Under bf16 storage forward() reads a bf16 working copy of the weights, cast only where params() was taken for
// writing since the last cast: a forward after writes through params() (a load, an AdamW step) gives bitwise the loss
// of a fresh model holding those weights, while the const form leaves the copy alone (weights changed behind it are
// not all seen: the micro-batches of a step share one cast).
TEST(GPT, Bf16WeightCopyIsRecastAfterEveryWriteThroughParams) {
  const ModelConfig c = tiny_config();
  const int B = 2, T = 9;
  const auto in = random_tokens(size_t(B) * T, c.vocab_size, 11), tg = random_tokens(size_t(B) * T, c.vocab_size, 12);
  auto backend = make_cpu_backend();
  backend->set_matmul_precision(MatmulPrecision::bf16);
  const size_t n = ParamTable(c).total_numel();
  auto weights = [&](GPT& m) {
    std::vector<float> w(n);
    backend->copy_to_host(w.data(), std::as_const(m).params(), n * sizeof(float));
    return w;
  };
  auto fresh_loss = [&](const std::vector<float>& w) {
    GPT m(c, *backend, B, T);
    backend->copy_to_device(m.params(), w.data(), n * sizeof(float));
    return m.forward(in.data(), tg.data(), B, T);
  };
  GPT model(c, *backend, B, T);
  ASSERT_TRUE(model.bf16_storage());
  model.init_weights(4);
  const double first = model.forward(in.data(), tg.data(), B, T);
  EXPECT_EQ(first, fresh_loss(weights(model)));
  // A load through params().
  std::vector<float> w = weights(model);
  Philox rng(5, 0, 0, RNG_PURPOSE_TEST);
  for (float& x : w) x += 0.05f * rng.normal();
  backend->copy_to_device(model.params(), w.data(), n * sizeof(float));
  const double loaded = model.forward(in.data(), tg.data(), B, T);
  EXPECT_NE(loaded, first);
  EXPECT_EQ(loaded, fresh_loss(w));
  // An AdamW step through params().
  OptimizerConfig oc;
  AdamW adam(*backend, model.table(), oc, 0, model.arena_numel());
  model.zero_grad();
  model.backward(1.0f);
  adam.step(model.params(), model.grads(), 1e-2f);
  const double stepped = model.forward(in.data(), tg.data(), B, T);
  EXPECT_NE(stepped, loaded);
  EXPECT_EQ(stepped, fresh_loss(weights(model)));
  // Weights changed behind the const form: no recast, so the GEMMs still read the step's weights from the copy (the
  // layernorms, embeddings and fp32 biases read the master weights), and the loss is not that of the new weights.
  backend->copy_to_device(const_cast<float*>(std::as_const(model).params()), w.data(), n * sizeof(float));
  EXPECT_NE(model.forward(in.data(), tg.data(), B, T), loaded);
}

// The start-up memory line is the training peak: every buffer a step uses is allocated when the model and optimizer
// are built (counted by weight_bytes, activation_bytes and the moments), and forward, backward and the AdamW step
// allocate nothing more, with any recompute mode.
TEST(GPT, TrainingStepsAllocateNothingBeyondTheStartUpCount) {
  const ModelConfig c = tiny_config();
  const int B = 3, T = 20;
  const auto in = random_tokens(size_t(B) * T, c.vocab_size, 5), tg = random_tokens(size_t(B) * T, c.vocab_size, 6);
  for (Recompute r : {Recompute::none, Recompute::attention, Recompute::full}) {
    auto backend = make_cpu_backend();
    GPT model(c, *backend, B, T, /*with_grads=*/true, r);
    model.init_weights(1);
    AdamW adam(*backend, model.table(), OptimizerConfig{}, 0, model.arena_numel());
    const size_t held = backend->allocated_bytes();
    const size_t counted = model.weight_bytes() + model.activation_bytes() + 2 * model.arena_numel() * sizeof(float);
    // The CPU backend rounds each allocation up to 64 bytes: under 64 bytes each, a few dozen buffers here.
    EXPECT_GE(held, counted) << recompute_name(r);
    EXPECT_LT(held - counted, 64u * 64u) << recompute_name(r);
    for (int s = 0; s < 2; ++s) {
      model.zero_grad();
      (void)model.forward(in.data(), tg.data(), B, T);
      model.backward(1.0f);
      adam.step(model.params(), model.grads(), 1e-3f);
    }
    EXPECT_EQ(backend->peak_allocated_bytes(), held) << recompute_name(r) << ": a step allocated more";
    EXPECT_EQ(backend->allocated_bytes(), held) << recompute_name(r);
  }
}

}  // namespace
}  // namespace ember
