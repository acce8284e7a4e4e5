// 1-bit codec with error feedback for async mode (docs/architecture.md, "Asynchronous mode"): each value is sent as
// its sign, plus one fp32 scale per block, and what the compression lost is kept as a residual and added to the next
// message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ember {

// Message layout for n values in blocks of K = block_size (the last block may be shorter):
//   float   scales[ceil(n / K)]   // scale of block b = mean |x| over its actual values
//   uint8_t signs[ceil(n / 8)]    // bit i % 8 of byte i / 8 is set when x[i] >= 0 (so 0 and -0 send +scale)
// Scales come first so they stay 4-byte aligned in an aligned buffer; they are read and written with memcpy, so an
// unaligned buffer also works. Unused high bits of the last sign byte are zero, so equal inputs give equal bytes.
// A decoded value is +scale or -scale of its block. Every function accepts n == 0 (null pointers allowed then);
// block_size must be >= 1.

// Number of blocks, ceil(n / block_size).
size_t onebit_block_count(size_t n, size_t block_size);

// Bytes of a packed message: 4 * ceil(n / block_size) + ceil(n / 8).
size_t onebit_packed_bytes(size_t n, size_t block_size);

// x (n) -> out (onebit_packed_bytes(n, block_size)).
void onebit_pack(const float* x, size_t n, size_t block_size, uint8_t* out);

// in (onebit_packed_bytes(n, block_size)) -> out (n): out[i] = sign_i * scale_of_block(i).
void onebit_unpack(const uint8_t* in, size_t n, size_t block_size, float* out);

// Like onebit_unpack but out[i] += sign_i * scale_of_block(i): the center folds messages into an accumulator.
void onebit_unpack_add(const uint8_t* in, size_t n, size_t block_size, float* out);

// The error-feedback state of one sender (a worker for its deltas, or the center for what it publishes).
// Each compress sends c = delta + residual and keeps residual = c - unpack(message), so over any run of steps
//   sum(unpacked messages) = sum(deltas) + first residual - last residual   (up to fp32 rounding per step):
// nothing is lost, only delayed.
class ErrorFeedback {
 public:
  // The residual starts at 0.
  ErrorFeedback(size_t n, size_t block_size);

  // delta (n) -> out (packed_bytes()); updates the residual. delta must not point into residual().
  void compress(const float* delta, uint8_t* out);

  size_t size() const { return n_; }
  size_t block_size() const { return block_size_; }
  size_t packed_bytes() const { return onebit_packed_bytes(n_, block_size_); }

  const std::vector<float>& residual() const { return residual_; }  // (n)
  // Restores a residual (n), e.g. from a checkpoint: dropping it would lose what it still owes the receiver.
  void set_residual(const float* residual);
  // Back to a zero residual, e.g. after the receiver's state was reset.
  void reset();

 private:
  size_t n_;
  size_t block_size_;
  std::vector<float> residual_;  // (n) what was meant but not yet sent
};

}  // namespace ember
