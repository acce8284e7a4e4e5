// Validation loss, as every kind of run measures it: the mean loss over the first eval.batches batches of the val
// split (fewer when the split is smaller), which the ranks of a run may share out among themselves; and its bits per
// byte, which compares runs with different tokenizers.
#pragma once

#include "data/data_loader.h"
#include "model/gpt.h"
#include "tokenizer/tokenizer.h"
#include "train/local_step.h"
#include "train/run_config.h"

namespace ember {

class Evaluator {
 public:
  // Opens data.dir's val split at training.seq_len (checked now, before anything is written), and counts the bytes
  // its batches' targets decode to with the run's tokenizer.
  Evaluator(const RunConfig& config, const Tokenizer& tokenizer);

  // Batches one evaluation covers: eval.batches, at most what the split holds, at least 1.
  int batches() const;

  // Sum of the losses of batches first, first + stride, ... (below batches()) of training.batch_size sequences.
  double loss_sum(GPT& model, int first, int stride);

  // Bits per byte of a mean loss over the batches, as `ember eval` computes it: the nats of all their targets, in
  // bits, over the bytes those targets decode to.
  double bits_per_byte(double mean_loss) const;

 private:
  int batches_;
  double target_bytes_ = 0.0;
  DataLoader val_;
  TokenBatch batch_;
};

}  // namespace ember
