// `ember generate`: samples text from a checkpoint with temperature, top-k and top-p, reproducibly from a seed, on the
// KV-cache engine that `serve` uses: the prompt is prefilled in one pass, then each new token costs one row.
#include <cstdint>
#include <cstdio>
#include <optional>
#include <vector>

#include "app/cli.h"
#include "app/commands.h"
#include "core/error.h"
#include "infer/engine.h"
#include "infer/kv_model.h"
#include "tokenizer/tokenizer.h"

namespace po = boost::program_options;

namespace ember {
namespace {

constexpr int kMaxNewTokens = 1 << 20;
constexpr size_t kMaxPromptBytes = 1 << 20;

}  // namespace

int cmd_generate(int argc, char** argv) {
  std::string checkpoint, prompt, device, precision;
  int max_new_tokens = 200, top_k = 0;
  float temperature = 1.0f, top_p = 1.0f;
  uint64_t seed = 1337;
  po::options_description desc("ember generate options");
  NumericOptions numbers;
  desc.add_options()("help,h", "print this help")("checkpoint", po::value(&checkpoint), "checkpoint file (.h5)")(
      "prompt", po::value(&prompt)->default_value(""), "text to continue (quote it: one argument)");
  // 2^20 tokens: a long output slides its context (below), so any count works; this bounds a typo's cost.
  numbers.add(desc, "max-new-tokens", &max_new_tokens, {0, kMaxNewTokens}, "tokens to generate");
  numbers.add(desc, "temperature", &temperature, {0.0f, 100.0f}, "softmax temperature (0: greedy)");
  numbers.add(desc, "top-k", &top_k, {0, 65536}, "sample among the k most likely tokens (0: all)");
  numbers.add(desc, "top-p", &top_p, {1e-6f, 1.0f},
              "then among the fewest most likely tokens whose probability reaches p (1: all)");
  numbers.add(desc, "seed", &seed, {0, UINT64_MAX}, "sampling seed");
  desc.add_options()("device", po::value(&device)->default_value("cpu"),
                     "cpu, cuda or auto (cuda when a GPU is visible)")(
      "precision", po::value(&precision)->default_value("fp32"),
      "fp32; bf16: weights and GEMM inputs in bf16 (half the bytes per token; logits within bf16 rounding); or "
      "int8: as bf16, with the dense layers' weights in int8 per output channel and their products in int8");
  po::variables_map vm;
  if (!parse_command(
          argc, argv, desc,
          "usage: ember generate --checkpoint F --prompt TEXT [--max-new-tokens N]\n"
          "Encodes the prompt and decodes the output with the tokenizer recorded in the checkpoint; stops "
          "early when it samples that tokenizer's end-of-text token (<|endoftext|>). When prompt and output "
          "outgrow the model's block_size, the last block_size/2 tokens are kept and generation goes on (a model "
          "with rotary positions goes on without recomputing: each token attends to the block_size - 1 "
          "before it).",
          vm, &numbers))
    return EXIT_CODE_OK;
  require_option(vm, "checkpoint", "give a checkpoint, e.g. --checkpoint runs/demo/checkpoints/step_00000500.h5");
  if (prompt.size() > kMaxPromptBytes)
    throw_error("ember generate: --prompt of " + std::to_string(prompt.size()) + " bytes is longer than " +
                    std::to_string(kMaxPromptBytes),
                "give a shorter prompt: at most block_size tokens of it reach the model");

  DecodingSetup setup = open_for_decoding(checkpoint, device, precision);
  const CheckpointMeta& meta = setup.meta;
  const Tokenizer& tokenizer = *setup.tokenizer;
  // One sequence; its prompt is prefilled in one step of up to block_size rows.
  KvModelShape shape;
  shape.max_slots = 1;
  shape.max_rows = meta.model.block_size;
  shape.max_logit_rows = 1;
  // Host buffers: the prompt's tokens and the logits of one row.
  const size_t buffers = prompt.size() * sizeof(int32_t) + size_t(meta.model.vocab_size) * 2 * sizeof(double);
  std::unique_ptr<KvModel> model = load_kv_model(checkpoint, meta, *setup.backend, shape, buffers);
  EngineOptions options;
  options.max_queue = 1;
  options.max_step_tokens = shape.max_rows;
  Engine engine(*model, tokenizer, options);

  GenerationRequest r;
  r.prompt = tokenizer.encode(prompt);
  if (r.prompt.empty()) r.prompt = document_start_tokens(tokenizer);
  r.max_tokens = max_new_tokens;
  r.sampling = SamplingParams{temperature, top_k, top_p, seed};
  r.context_shift = true;
  bool done = false;
  fwrite(prompt.data(), 1, prompt.size(), stdout);
  r.on_event = [&](const GenerationEvent& e) {
    fwrite(e.text.data(), 1, e.text.size(), stdout);
    fflush(stdout);
    done = e.done;
    return true;
  };
  engine.submit(std::move(r));
  while (!done && engine.step()) {
  }
  printf("\n");
  return EXIT_CODE_OK;
}

}  // namespace ember
