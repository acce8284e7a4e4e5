// The async message formats and error feedback (implementation); see delta_codec.h.
#include "train/async/delta_codec.h"

#include <cstring>

#include "core/enum_names.h"
#include "core/error.h"
#include "train/async/onebit_codec.h"

namespace ember {
namespace {

// Below this many values a parallel region costs more than it saves (as in onebit_codec.cpp).
constexpr size_t kMinParallelWork = size_t(1) << 15;

}  // namespace

const char* delta_compression_name(DeltaCompression c) { return c == DeltaCompression::none ? "none" : "onebit"; }

std::optional<DeltaCompression> parse_delta_compression(const std::string& name) {
  return find_by_name(kDeltaCompressions, delta_compression_name, name);
}

DeltaCodec::DeltaCodec(DeltaCompression compression, size_t n, size_t block_size)
    : compression_(compression), n_(n), block_size_(block_size) {
  EMBER_ASSERT(block_size >= 1, "DeltaCodec: block_size must be >= 1");
}

size_t DeltaCodec::packed_bytes() const {
  return compression_ == DeltaCompression::none ? n_ * sizeof(float) : onebit_packed_bytes(n_, block_size_);
}

void DeltaCodec::pack(const float* x, uint8_t* out) const {
  if (compression_ == DeltaCompression::onebit) return onebit_pack(x, n_, block_size_, out);
  if (n_ > 0) std::memcpy(out, x, n_ * sizeof(float));
}

void DeltaCodec::unpack(const uint8_t* in, float* out) const {
  if (compression_ == DeltaCompression::onebit) return onebit_unpack(in, n_, block_size_, out);
  if (n_ > 0) std::memcpy(out, in, n_ * sizeof(float));
}

void DeltaCodec::unpack_add(const uint8_t* in, float* out, float scale) const {
  if (compression_ == DeltaCompression::onebit) return onebit_unpack_add(in, n_, block_size_, out, scale);
  const size_t n = n_;
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
  for (size_t i = 0; i < n; ++i) {
    float v;
    std::memcpy(&v, in + i * sizeof(float), sizeof(float));
    out[i] += scale * v;
  }
}

ErrorFeedback::ErrorFeedback(const DeltaCodec& codec) : codec_(codec), residual_(codec.size(), 0.0f) {}

void ErrorFeedback::compress(const float* delta, uint8_t* out) {
  const size_t n = codec_.size();
  if (!codec_.lossy()) return codec_.pack(delta, out);
  float* r = residual_.data();
  // c = delta + residual, built in place of the residual: it is the value sent, and the next residual is c - sent.
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
  for (size_t i = 0; i < n; ++i) r[i] += delta[i];
  codec_.pack(r, out);
  // Subtract exactly what the receiver will decode, so the identity in the header holds up to one rounding of this
  // subtraction per step.
  codec_.unpack_sub(out, r);
}

void ErrorFeedback::set_residual(const float* residual) {
  if (!residual_.empty()) std::memcpy(residual_.data(), residual, residual_.size() * sizeof(float));
}

void ErrorFeedback::reset() { residual_.assign(residual_.size(), 0.0f); }

}  // namespace ember
