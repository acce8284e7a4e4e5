// Validation loss, as every kind of run measures it: the mean loss over the first eval.batches batches of the val
// split (fewer when the split is smaller), which the ranks of a run may share out among themselves.
#pragma once

#include "data/data_loader.h"
#include "model/gpt.h"
#include "train/local_step.h"
#include "train/run_config.h"

namespace ember {

class Evaluator {
 public:
  // Opens data.dir's val split at training.seq_len (checked now, before anything is written).
  explicit Evaluator(const RunConfig& config);

  // Batches one evaluation covers: eval.batches, at most what the split holds, at least 1.
  int batches() const;

  // Sum of the losses of batches first, first + stride, ... (below batches()) of training.batch_size sequences.
  double loss_sum(GPT& model, int first, int stride);

 private:
  int batches_;
  DataLoader val_;
  TokenBatch batch_;
};

}  // namespace ember
