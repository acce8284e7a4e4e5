// `ember generate`: samples text from a checkpoint with temperature and top-k, reproducibly from a seed.
// Each new token runs the model over the last block_size tokens (no KV cache: fine for the small models here).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <vector>

#include "app/cli.h"
#include "app/commands.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/philox.h"
#include "data/tokenizer.h"

namespace po = boost::program_options;

namespace ember {

int cmd_generate(int argc, char** argv) {
  std::string checkpoint, prompt, device;
  int max_new_tokens = 0, top_k = 0;
  float temperature = 1.0f;
  uint64_t seed = 0;
  po::options_description desc("ember generate options");
  desc.add_options()("help,h", "print this help")("checkpoint", po::value(&checkpoint), "checkpoint file (.h5)")(
      "prompt", po::value(&prompt)->default_value(""), "text to continue")(
      "max-new-tokens", po::value(&max_new_tokens)->default_value(200), "tokens to generate")(
      "temperature", po::value(&temperature)->default_value(1.0f), "softmax temperature (0: greedy)")(
      "top-k", po::value(&top_k)->default_value(0), "sample among the k most likely tokens (0: all)")(
      "seed", po::value(&seed)->default_value(1337), "sampling seed")(
      "device", po::value(&device)->default_value("cpu"), "cpu, cuda or auto (cuda when a GPU is visible)");
  po::variables_map vm;
  if (!parse_command(argc, argv, desc, "usage: ember generate --checkpoint F --prompt TEXT [--max-new-tokens N]", vm))
    return EXIT_CODE_OK;
  require_option(vm, "checkpoint", "give a checkpoint, e.g. --checkpoint runs/demo/checkpoints/step_00000500.h5");
  if (max_new_tokens < 0 || temperature < 0.0f || top_k < 0)
    throw_error("--max-new-tokens, --temperature and --top-k must be >= 0", "fix the option values");

  auto backend = backend_for_device(parse_device_option(device));
  LoadedModel loaded = load_model(checkpoint, *backend, 1, 0);
  const ModelConfig& mc = loaded.meta.model;
  auto tokenizer =
      make_tokenizer(ini_value(loaded.meta.config_ini, "data.tokenizer", tokenizer_kind_name(TokenizerKind::bytes)));
  if (tokenizer->vocab_size() > mc.vocab_size)
    throw_error("checkpoint " + checkpoint + ": vocab_size " + std::to_string(mc.vocab_size) + " is smaller than the " +
                    tokenizer->name() + " tokenizer's " + std::to_string(tokenizer->vocab_size()),
                "use a checkpoint trained with this tokenizer");
  std::vector<int32_t> tokens = tokenizer->encode(prompt);
  if (tokens.empty()) tokens.push_back(int32_t('\n'));  // an empty prompt starts from a newline
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
    tokens.push_back(next);
    generated.push_back(next);
  }
  const std::string text = prompt + tokenizer->decode(generated);
  fwrite(text.data(), 1, text.size(), stdout);
  printf("\n");
  return EXIT_CODE_OK;
}

}  // namespace ember
