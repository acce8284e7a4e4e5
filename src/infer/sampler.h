// Choosing the next token from a row of logits: greedy, or sampling with temperature, top-k and top-p (nucleus),
// each draw keyed by (seed, index of the token in its sequence) so a request's output depends on its seed alone.
#pragma once

#include <cstdint>
#include <vector>

namespace ember {

struct SamplingParams {
  float temperature = 1.0f;  // 0: greedy (the most likely token; the lowest id on ties)
  int top_k = 0;             // keep the k most likely tokens (0: all)
  float top_p = 1.0f;        // then the smallest set of them whose probability reaches top_p (1: all)
  uint64_t seed = 0;
};

class Sampler {
 public:
  // The token for draw `index` of a sequence sampled with `params` from logits[0..candidates) (ids beyond the
  // tokenizer's vocabulary, padding rows of the model, are never chosen).
  int32_t sample(const float* logits, int candidates, const SamplingParams& params, uint64_t index);

 private:
  std::vector<int> order_;     // candidate ids, most likely first
  std::vector<double> probs_;  // their unnormalised probabilities
};

}  // namespace ember
