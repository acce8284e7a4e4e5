// `ember generate`: samples text from a checkpoint with temperature and top-k, reproducibly from a seed.
// Each new token runs the model over the last block_size tokens (no KV cache: fine for the small models here).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <optional>
#include <vector>

#include "app/cli.h"
#include "app/commands.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/philox.h"
#include "data/tokenizer.h"

namespace po = boost::program_options;

namespace ember {
namespace {

constexpr int kMaxNewTokens = 1 << 20;
constexpr size_t kMaxPromptBytes = 1 << 20;  // only the last block_size tokens of it reach the model anyway

}  // namespace

int cmd_generate(int argc, char** argv) {
  std::string checkpoint, prompt, device;
  int max_new_tokens = 200, top_k = 0;
  float temperature = 1.0f;
  uint64_t seed = 1337;
  po::options_description desc("ember generate options");
  NumericOptions numbers;
  desc.add_options()("help,h", "print this help")("checkpoint", po::value(&checkpoint), "checkpoint file (.h5)")(
      "prompt", po::value(&prompt)->default_value(""), "text to continue (quote it: one argument)");
  // 2^20 tokens: each runs the model over a whole block, so even that many take hours on the models here.
  numbers.add(desc, "max-new-tokens", &max_new_tokens, {0, kMaxNewTokens}, "tokens to generate");
  numbers.add(desc, "temperature", &temperature, {0.0f, 100.0f}, "softmax temperature (0: greedy)");
  numbers.add(desc, "top-k", &top_k, {0, 65536}, "sample among the k most likely tokens (0: all)");
  numbers.add(desc, "seed", &seed, {0, UINT64_MAX}, "sampling seed");
  desc.add_options()("device", po::value(&device)->default_value("cpu"),
                     "cpu, cuda or auto (cuda when a GPU is visible)");
  po::variables_map vm;
  if (!parse_command(argc, argv, desc,
                     "usage: ember generate --checkpoint F --prompt TEXT [--max-new-tokens N]\n"
                     "Encodes the prompt and decodes the output with the tokenizer recorded in the checkpoint; stops "
                     "early when it samples that tokenizer's end-of-text token (<|endoftext|>).",
                     vm, &numbers))
    return EXIT_CODE_OK;
  require_option(vm, "checkpoint", "give a checkpoint, e.g. --checkpoint runs/demo/checkpoints/step_00000500.h5");
  if (prompt.size() > kMaxPromptBytes)
    throw_error("ember generate: --prompt of " + std::to_string(prompt.size()) + " bytes is longer than " +
                    std::to_string(kMaxPromptBytes),
                "give a shorter prompt: only the last block_size tokens reach the model");

  const DeviceRequest request = parse_device_option(device);
  const CheckpointMeta meta = read_checkpoint_meta(checkpoint);
  const ModelConfig& mc = meta.model;
  const std::unique_ptr<Tokenizer> tokenizer = checkpoint_tokenizer(checkpoint, meta);
  const std::optional<int32_t> eot = tokenizer->eot_id();
  auto backend = backend_for_device(request);
  // The buffers the loop grows: every token twice (context and output, 4 bytes each) and the decoded text (a
  // tokenizer's token is at most 16 bytes of text here), the prompt's tokens, and the logits and sort order.
  const size_t buffers = (size_t(max_new_tokens) + prompt.size()) * (2 * sizeof(int32_t) + 16) +
                         size_t(mc.vocab_size) * (2 * sizeof(float) + sizeof(int));
  LoadedModel loaded = load_model(checkpoint, meta, *backend, 1, 0, buffers);
  std::vector<int32_t> tokens = tokenizer->encode(prompt);
  // An empty prompt starts a new document: after <|endoftext|> where the tokenizer has one, else from a newline.
  if (tokens.empty()) tokens = eot ? std::vector<int32_t>{*eot} : tokenizer->encode("\n");
  const int V = mc.vocab_size, tok_V = tokenizer->vocab_size();

  Philox rng(seed, 0, 0, RNG_PURPOSE_SAMPLE);
  std::vector<float> logits(V), probs(V);
  std::vector<int> order(tok_V);
  std::vector<int32_t> generated;
  for (int i = 0; i < max_new_tokens; ++i) {
    const int T = int(std::min<size_t>(tokens.size(), size_t(mc.block_size)));
    const int32_t* ctx = tokens.data() + tokens.size() - T;
    loaded.model->forward(ctx, nullptr, 1, T);
    const TensorIn last = loaded.model->logits().at(size_t(T - 1) * V);
    if (last.bf16) {
      std::vector<BFloat16> stored(V);
      backend->copy_to_host(stored.data(), last.b16(), V * sizeof(BFloat16));
      widen_bf16(logits.data(), stored.data(), V);
    } else {
      backend->copy_to_host(logits.data(), last.f32(), V * sizeof(float));
    }
    // Only ids the tokenizer can decode are candidates (the model may have padding rows beyond them).
    std::iota(order.begin(), order.end(), 0);
    const int k = top_k > 0 ? std::min(top_k, tok_V) : tok_V;
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
    int next = order[0];
    if (temperature > 0.0f) {
      double total = 0.0;
      for (int j = 0; j < k; ++j)
        total += probs[j] = float(std::exp((logits[order[j]] - logits[order[0]]) / temperature));
      double u = rng.uniform_double() * total;
      for (int j = 0; j < k; ++j) {
        next = order[j];
        if ((u -= probs[j]) < 0.0) break;
      }
    }
    if (eot && next == *eot) break;  // the model ended the document
    tokens.push_back(next);
    generated.push_back(next);
  }
  const std::string text = prompt + tokenizer->decode(generated);
  fwrite(text.data(), 1, text.size(), stdout);
  printf("\n");
  return EXIT_CODE_OK;
}

}  // namespace ember
