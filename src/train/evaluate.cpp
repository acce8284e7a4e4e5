// Validation loss (implementation).
#include "train/evaluate.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace ember {

Evaluator::Evaluator(const RunConfig& c, const Tokenizer& tokenizer)
    : batches_(c.eval.batches),
      val_(c.data.dir, "val", c.training.seq_len, c.model.vocab_size, c.training.seed, /*shuffle=*/false),
      batch_(c.training.batch_size, c.training.seq_len) {
  for (int k = 0; k < batches(); ++k) {
    val_.batch_at(uint64_t(k) * batch_.B, batch_.inputs.data(), batch_.targets.data(), batch_.B);
    target_bytes_ += double(tokenizer.decode(batch_.targets).size());
  }
}

double Evaluator::bits_per_byte(double mean_loss) const {
  const double tokens = double(batches()) * batch_.B * batch_.T;
  return mean_loss * tokens / (std::log(2.0) * std::max(target_bytes_, 1.0));
}

int Evaluator::batches() const {
  const uint64_t available = val_.num_samples() / uint64_t(batch_.B);
  return int(std::min<uint64_t>(uint64_t(batches_), std::max<uint64_t>(available, 1)));
}

double Evaluator::loss_sum(GPT& model, int first, int stride) {
  const int n = batches();
  double sum = 0.0;
  for (int k = first; k < n; k += stride) {
    val_.batch_at(uint64_t(k) * batch_.B, batch_.inputs.data(), batch_.targets.data(), batch_.B);
    sum += model.forward(batch_.inputs.data(), batch_.targets.data(), batch_.B, batch_.T);
  }
  return sum;
}

}  // namespace ember
