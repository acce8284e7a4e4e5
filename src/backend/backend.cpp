// The op interface (implementation): the memory accounting and argument checks every backend shares.
#include "backend/backend.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"

namespace ember {

void Backend::check_gemm_inputs(TensorIn inp, TensorIn weight, const char* op) const {
  if (!inp.bf16 && !weight.bf16) return;
  EMBER_ASSERT(gemm_inputs_in_bf16(matmul_precision_),
               std::string(op) + ": bf16-stored GEMM inputs need a matmul precision other than fp32");
  EMBER_ASSERT(inp.bf16 && (weight.bf16 || dense_weights_quantized(matmul_precision_)),
               std::string(op) +
                   ": inp and weight must be stored alike (both bf16 or fp32; under int8 and fp8 a bf16 inp may "
                   "meet an fp32 weight)");
}

void Backend::check_gemm_output(TensorOut out, TensorIn bias, const char* op) const {
  EMBER_ASSERT(!bias.ptr || bias.bf16 == out.bf16, std::string(op) + ": the bias must be stored as out is");
  EMBER_ASSERT(!out.bf16 || gemm_inputs_in_bf16(matmul_precision_),
               std::string(op) + ": a bf16-stored output needs a matmul precision other than fp32");
}

void Backend::check_gemm_dout(TensorIn dout, const char* op) const {
  EMBER_ASSERT(!dout.bf16 || gemm_inputs_in_bf16(matmul_precision_),
               std::string(op) + ": a bf16-stored dout needs a matmul precision other than fp32");
}

void Backend::check_attention_grad_storage(TensorOut dqkv, TensorIn dout, TensorIn qkv, const char* op) const {
  EMBER_ASSERT(!dqkv.bf16 || qkv.bf16, std::string(op) + ": a bf16-stored dqkv needs a bf16-stored qkv");
  EMBER_ASSERT(!dout.bf16 || qkv.bf16, std::string(op) + ": a bf16-stored dout needs bf16-stored qkv and out");
}

void Backend::check_attention_storage(TensorIn qkv, TensorIn out, int C, int NH, const char* op) const {
  EMBER_ASSERT(NH > 0 && C % NH == 0, std::string(op) + ": C must be a multiple of the number of heads NH");
  EMBER_ASSERT(qkv.bf16 == out.bf16, std::string(op) + ": qkv and out must be stored alike (both bf16 or fp32)");
  EMBER_ASSERT(!out.bf16 || attention_in_bf16(matmul_precision_, C / NH),
               std::string(op) + ": bf16-stored qkv and out need bf16 attention (attention_in_bf16)");
}

void Backend::check_attention_layer(const AttentionLayer& layer, int C, int NH, const char* op) const {
  EMBER_ASSERT(layer.window >= 0, std::string(op) + ": the window must be 0 (full) or positive");
  EMBER_ASSERT(layer.alibi_slope >= 0.0f, std::string(op) + ": the ALiBi slope must not be negative");
  EMBER_ASSERT(layer.rope_theta == 0.0f || (C / NH) % 2 == 0, std::string(op) + ": rope needs an even head size");
}

size_t quantized_copy_bytes(MatmulPrecision precision, size_t in, size_t out, bool forward_only) {
  if (precision == MatmulPrecision::fp8) return in * out + sizeof(float);
  if (precision != MatmulPrecision::int8) return 0;
  const size_t forward = in * out + out * sizeof(float);
  return forward_only ? forward : forward + in * out + in * sizeof(float);
}

void* Backend::alloc_host(size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64 + (bytes == 0 ? 64 : 0);  // aligned_alloc's size rule
  void* ptr = std::aligned_alloc(64, rounded);
  if (!ptr)
    throw_error("out of host memory allocating " + std::to_string(bytes) + " bytes",
                "free host memory, or leave training.offload at none");
  std::memset(ptr, 0, rounded);
  return ptr;
}

void Backend::free_host(void* ptr) { std::free(ptr); }

void Backend::track_alloc(const void* ptr, size_t bytes) {
  if (!ptr) return;
  EMBER_ASSERT(live_.emplace(ptr, bytes).second, "backend memory accounting: a pointer was allocated twice");
  allocated_ += bytes;
  peak_ = std::max(peak_, allocated_);
}

void Backend::track_free(const void* ptr) {
  if (!ptr) return;
  const auto it = live_.find(ptr);
  EMBER_ASSERT(it != live_.end(), "backend memory accounting: freeing a pointer this backend did not allocate");
  allocated_ -= it->second;
  live_.erase(it);
}

}  // namespace ember
