// Low-precision number formats. bf16 keeps fp32's 8 exponent bits and the top 7 of its 23 mantissa bits; rounding
// an fp32 value to bf16 and back (what the CPU backend does to emulate bf16 GEMM inputs) is done here, bit-exactly
// as the hardware conversions round: to nearest, ties to even, NaN kept a NaN.
#pragma once

#include <cstdint>
#include <cstring>
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

// The precision of GEMM inputs (training.precision). fp32: plain fp32 products. bf16: both operands of every dense
// layer's and the lm_head's GEMMs (forward and backward) are rounded to bf16, products accumulate in fp32 and the
// results stay fp32; master weights, gradients and AdamW stay fp32.
enum class MatmulPrecision { fp32, bf16 };
MatmulPrecision parse_matmul_precision(const std::string& name);  // throws on an unknown name
std::string matmul_precision_name(MatmulPrecision p);

// Under matmul precision bf16, attention's products (q k^T, P v and the backward's four) take bf16 inputs too, with
// fp32 softmax statistics and accumulation, for the head sizes the CUDA backend has tensor-core kernels for (16, 32
// and 64; GPT-2's is 64 at every size). Other head sizes keep fp32 attention, on every backend alike.
inline bool attention_in_bf16(MatmulPrecision p, int head_size) {
  return p == MatmulPrecision::bf16 && (head_size == 16 || head_size == 32 || head_size == 64);
}

}  // namespace ember
