// How async mode puts a delta on the wire (docs/architecture.md, "Asynchronous mode"): 1-bit signs with one fp32
// scale per block (onebit_codec.h), or plain fp32 values (compression none, a baseline for measurements), and the
// error feedback that keeps what a lossy message lost for the next one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ember {

enum class DeltaCompression { onebit, none };
inline constexpr DeltaCompression kDeltaCompressions[] = {DeltaCompression::onebit, DeltaCompression::none};
const char* delta_compression_name(DeltaCompression c);  // "onebit" or "none": the one place these names are spelled
std::optional<DeltaCompression> parse_delta_compression(const std::string& name);

// The message format of n values: what the sender packs and the receiver unpacks. Every function accepts n == 0.
class DeltaCodec {
 public:
  DeltaCodec(DeltaCompression compression, size_t n, size_t block_size);

  DeltaCompression compression() const { return compression_; }
  size_t size() const { return n_; }
  size_t block_size() const { return block_size_; }
  size_t packed_bytes() const;  // of one message
  bool lossy() const { return compression_ != DeltaCompression::none; }

  // x (n) -> out (packed_bytes()).
  void pack(const float* x, uint8_t* out) const;
  // in (packed_bytes()) -> out (n) = the values the message carries.
  void unpack(const uint8_t* in, float* out) const;
  // out (n) += scale x the values the message carries.
  void unpack_add(const uint8_t* in, float* out, float scale = 1.0f) const;
  // x (n) -= the values the message carries (the sender's residual update).
  void unpack_sub(const uint8_t* in, float* x) const { unpack_add(in, x, -1.0f); }

 private:
  DeltaCompression compression_;
  size_t n_, block_size_;
};

// The error-feedback state of one sender (a worker for its deltas). Each compress sends c = delta + residual and
// keeps residual = c - unpack(message), so over any run of steps
//   sum(unpacked messages) = sum(deltas) + first residual - last residual   (up to fp32 rounding per step):
// nothing is lost, only delayed. With a lossless codec the residual stays zero.
class ErrorFeedback {
 public:
  explicit ErrorFeedback(const DeltaCodec& codec);  // the residual starts at 0

  // delta (n) -> out (packed_bytes()); updates the residual. delta must not point into residual().
  void compress(const float* delta, uint8_t* out);

  const DeltaCodec& codec() const { return codec_; }
  size_t size() const { return codec_.size(); }
  size_t packed_bytes() const { return codec_.packed_bytes(); }

  const std::vector<float>& residual() const { return residual_; }  // (n)
  // Restores a residual (n), e.g. from a checkpoint: dropping it would lose what it still owes the receiver.
  void set_residual(const float* residual);
  // Back to a zero residual, e.g. after the receiver's state was reset.
  void reset();

 private:
  DeltaCodec codec_;
  std::vector<float> residual_;  // (n) what was meant but not yet sent
};

}  // namespace ember
