// Low-precision number formats. bf16 keeps fp32's 8 exponent bits and the top 7 of its 23 mantissa bits; rounding
// an fp32 value to bf16 and back (what the CPU backend does to emulate bf16 GEMM inputs) is done here, bit-exactly
// as the hardware conversions round: to nearest, ties to even, NaN kept a NaN.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

namespace ember {

// The nearest bf16 value to x, as an fp32 (its low 16 bits zero).
inline float round_to_bf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) {
    bits |= 0x00400000u;  // NaN: keep it a (quiet) NaN whatever the dropped payload bits were
  } else {
    bits += 0x7fffu + ((bits >> 16) & 1u);  // ties to even; a carry into the exponent rounds up to inf correctly
  }
  bits &= 0xffff0000u;
  float out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}

// A bf16 value as stored (2 bytes): the top half of the fp32 it stands for. Storage only; arithmetic is in fp32.
struct BFloat16 {
  uint16_t bits;
};
static_assert(sizeof(BFloat16) == 2, "BFloat16 is two bytes, as the GPU's bf16");
inline BFloat16 to_bf16(float x) {  // rounded to nearest, ties to even
  uint32_t bits;
  const float r = round_to_bf16(x);
  std::memcpy(&bits, &r, sizeof(bits));
  return BFloat16{uint16_t(bits >> 16)};
}
inline float from_bf16(BFloat16 x) {  // exact
  const uint32_t bits = uint32_t(x.bits) << 16;
  float out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}

// dst[i] = src[i] widened, for i < n.
inline void widen_bf16(float* dst, const BFloat16* src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = from_bf16(src[i]);
}

// A tensor an op reads (TensorIn) or writes (TensorOut) that may be stored in fp32 or in bf16: under matmul precision
// bf16 the GEMM inputs (the layernorm and GELU outputs the dense layers read, and the working copy of the weights) and
// the outputs of c_attn and c_fc. Both convert implicitly from a typed pointer, so fp32 callers pass float* as before.
struct TensorIn {
  const void* ptr = nullptr;
  bool bf16 = false;
  TensorIn() = default;
  TensorIn(std::nullptr_t) {}                          // NOLINT(google-explicit-constructor): none (a bias)
  TensorIn(const float* p) : ptr(p) {}                 // NOLINT(google-explicit-constructor)
  TensorIn(const BFloat16* p) : ptr(p), bf16(true) {}  // NOLINT(google-explicit-constructor)
  const float* f32() const { return bf16 ? nullptr : static_cast<const float*>(ptr); }
  const BFloat16* b16() const { return bf16 ? static_cast<const BFloat16*>(ptr) : nullptr; }
  // The tensor from element `offset` on.
  TensorIn at(size_t offset) const { return bf16 ? TensorIn(b16() + offset) : TensorIn(f32() + offset); }
};
struct TensorOut {
  void* ptr = nullptr;
  bool bf16 = false;
  TensorOut() = default;
  TensorOut(float* p) : ptr(p) {}                 // NOLINT(google-explicit-constructor)
  TensorOut(BFloat16* p) : ptr(p), bf16(true) {}  // NOLINT(google-explicit-constructor)
  float* f32() const { return bf16 ? nullptr : static_cast<float*>(ptr); }
  BFloat16* b16() const { return bf16 ? static_cast<BFloat16*>(ptr) : nullptr; }
  operator TensorIn() const {  // NOLINT(google-explicit-constructor): what one op writes, the next reads
    return bf16 ? TensorIn(b16()) : TensorIn(static_cast<const float*>(ptr));
  }
};

// The precision of GEMM inputs (training.precision). fp32: plain fp32 products. bf16: both operands of every dense
// layer's and the lm_head's GEMMs (forward and backward) are rounded to bf16 and products accumulate in fp32; master
// weights, gradients and AdamW stay fp32. The model then also stores the GEMM inputs in bf16 (TensorIn above), which
// changes no value: they are rounded to bf16 as they are written rather than as read. And, as PyTorch's bf16 autocast
// and llm.c do, it keeps the outputs of c_attn (where attention is bf16, below) and c_fc in bf16, bias added in bf16:
// the one rounding that bf16 storage adds, to the pre-activations that attention and GELU read.
// int8: everything bf16 does, except that the four dense layers' forward products and their input-gradient products
// are int8 x int8 summed exactly in int32 (core/int8_quant.h, backend/backend.h): activations quantized per token row
// from their bf16 values, weights per output (forward) or input (backward) channel from the fp32 masters, output
// gradients per row with dithering; and (unless the backend is told otherwise) their weight-gradient products, with
// scales per channel and tile of tokens (backend/cpu/cpu_matmul_int8.h). The lm_head, attention, layernorms, the loss
// and AdamW stay as under bf16.
// fp8: everything bf16 does, except that all three products of the four dense layers (forward, input gradient,
// weight gradient) multiply fp8 operands with one scale per tensor (core/fp8_quant.h): activations and weights in
// E4M3, output gradients in E5M2; the rest stays as under bf16.
enum class MatmulPrecision { fp32, bf16, int8, fp8 };
inline constexpr MatmulPrecision kMatmulPrecisions[] = {MatmulPrecision::fp32, MatmulPrecision::bf16,
                                                        MatmulPrecision::int8, MatmulPrecision::fp8};
std::string matmul_precision_name(MatmulPrecision p);  // "fp32", "bf16", "int8" or "fp8": the one place spelled
std::optional<MatmulPrecision> parse_matmul_precision(const std::string& name);  // nothing for any other text
// GEMM inputs are stored in bf16 (and fp32-stored ones rounded to bf16 as read): under bf16, int8 and fp8.
inline bool gemm_inputs_in_bf16(MatmulPrecision p) { return p != MatmulPrecision::fp32; }
// The dense layers' products quantize their weights from the fp32 masters (int8, fp8), not from the bf16 copy.
inline bool dense_weights_quantized(MatmulPrecision p) {
  return p == MatmulPrecision::int8 || p == MatmulPrecision::fp8;
}

// A requested precision (training.precision): auto (written "auto"), fp32, bf16, int8 or fp8. auto is bf16 on a GPU,
// where tensor cores make it the fast path and mixed-precision training is the norm, and fp32 on the CPU, which has
// no bf16 arithmetic and only emulates its rounding.
enum class PrecisionRequest { automatic, fp32, bf16, int8, fp8 };
inline constexpr PrecisionRequest kPrecisionRequests[] = {PrecisionRequest::automatic, PrecisionRequest::fp32,
                                                          PrecisionRequest::bf16, PrecisionRequest::int8,
                                                          PrecisionRequest::fp8};
const char* precision_request_name(PrecisionRequest p);  // "auto", "fp32", "bf16", "int8", "fp8"
std::optional<PrecisionRequest> parse_precision_request(const std::string& name);  // nothing for any other text
// The precision a request means on a GPU (on_gpu) or on the CPU.
MatmulPrecision resolve_precision(PrecisionRequest p, bool on_gpu);

// Under matmul precision bf16 (and int8, fp8), attention's products (q k^T, P v and the backward's four) take bf16
// inputs too, with fp32 softmax statistics and accumulation, for the head sizes the CUDA backend has tensor-core
// kernels for (16, 32 and 64; GPT-2's is 64 at every size). Other head sizes keep fp32 attention, on every backend
// alike.
inline bool attention_in_bf16(MatmulPrecision p, int head_size) {
  return gemm_inputs_in_bf16(p) && (head_size == 16 || head_size == 32 || head_size == 64);
}

}  // namespace ember
