// The DataLoader: batches of (inputs, targets) of shape (B, T) from token shards. Sample order is a pure function
// of (seed, global sample index), so a run can be split across ranks and resumed anywhere from a single cursor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ember {

// A sample is T+1 consecutive tokens inside one shard: sample s of a shard covers tokens [s*T, s*T + T + 1).
// Training order: epoch e = g / n_samples visits all samples once in a permutation drawn from Philox keyed by
// (seed, epoch); the global sample index g fully determines the sample. Validation order is sequential.
class DataLoader {
 public:
  // Opens every shard named `split` ("train" or "val") in `dir`, validates headers and that every token is
  // < vocab_size. Errors (no shards, bad shard, vocab too large, shards shorter than T+1 tokens) throw ember::Error
  // naming the file and with a hint. `shuffle` = false gives the sequential order used for validation.
  DataLoader(const std::string& dir, const std::string& split, int T, int vocab_size, uint64_t seed, bool shuffle);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Fills inputs and targets (each B*T int32) with samples g, g+1, ..., g+B-1, where g = cursor(), then advances
  // the cursor by B.
  void next_batch(int32_t* inputs, int32_t* targets, int B);
  // Fills with the B samples starting at global index g; does not touch the cursor.
  void batch_at(uint64_t g, int32_t* inputs, int32_t* targets, int B) const;

  uint64_t cursor() const { return cursor_; }  // next global sample index
  void set_cursor(uint64_t g) { cursor_ = g; }
  uint64_t num_samples() const { return total_samples_; }  // samples per epoch
  uint64_t num_tokens() const { return total_tokens_; }

 private:
  struct Shard;
  void sample_tokens(uint64_t g, int32_t* inputs, int32_t* targets) const;
  const std::vector<uint32_t>& permutation(uint64_t epoch) const;

  std::vector<Shard*> shards_;
  std::vector<uint64_t> shard_first_sample_;  // prefix sums of samples per shard
  int T_;
  uint64_t seed_;
  bool shuffle_;
  uint64_t total_samples_ = 0;
  uint64_t total_tokens_ = 0;
  uint64_t cursor_ = 0;
  mutable uint64_t perm_epoch_ = UINT64_MAX;
  mutable std::vector<uint32_t> perm_;
};

}  // namespace ember
