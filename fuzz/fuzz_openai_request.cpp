// Fuzz target: a POST /v1/completions body as `ember serve` parses it, with the byte tokenizer and a context of 64.
// A request that parses must be within every limit; anything refused is an ApiError with a 4xx status.
#include <cstdint>

#include "fuzz_util.h"
#include "infer/openai_api.h"

using namespace ember;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ByteTokenizer tokenizer;
  static const std::vector<int32_t> empty_prompt = {10};
  CompletionLimits limits;
  limits.model_name = "fuzz";
  limits.max_T = 64;
  limits.max_tokens_limit = 256;
  try {
    const CompletionRequest r = parse_completion_request(std::string(reinterpret_cast<const char*>(data), size),
                                                         tokenizer, empty_prompt, limits);
    if (r.prompts.empty() || int64_t(r.prompts.size()) * r.n > limits.max_choices)
      fuzz::broken("choices out of bounds");
    for (const auto& p : r.prompts) {
      if (p.empty() || int(p.size()) > limits.max_T) fuzz::broken("a prompt outside [1, max_T] tokens");
      for (int32_t id : p)
        if (id < 0 || id >= tokenizer.vocab_size()) fuzz::broken("a prompt id outside the vocabulary");
    }
    if (r.max_tokens < 0 || r.max_tokens > limits.max_tokens_limit) fuzz::broken("max_tokens out of bounds");
    if (!(r.temperature >= 0 && r.temperature <= 2) || !(r.top_p > 0 && r.top_p <= 1)) fuzz::broken("sampling");
    if (int(r.stop.size()) > limits.max_stop) fuzz::broken("too many stop sequences");
    (void)error_json(ApiError(400, "invalid_request_error", "x"));
  } catch (const ApiError& e) {
    if (e.status < 400 || e.status >= 500) fuzz::broken("an ApiError that is not 4xx");
    (void)error_json(e);
  }
  return 0;
}
