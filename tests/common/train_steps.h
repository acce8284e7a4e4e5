// The training loop the model tests share: `steps` AdamW steps of one model on one fixed batch, returning each step's
// loss (before its update).
#pragma once

#include <cstdint>
#include <vector>

#include "model/gpt.h"
#include "train/adamw.h"

namespace ember::test {

inline std::vector<double> train_on_one_batch(GPT& model, AdamW& adam, const std::vector<int32_t>& inputs,
                                              const std::vector<int32_t>& targets, int B, int T, int steps, float lr) {
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    model.zero_grad();
    losses.push_back(model.forward(inputs.data(), targets.data(), B, T));
    model.backward(1.0f);
    adam.step(model.params(), model.grads(), lr);
  }
  return losses;
}

}  // namespace ember::test
