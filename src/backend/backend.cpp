// The op interface (implementation): the memory accounting and argument checks every backend shares.
#include "backend/backend.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace ember {

void Backend::check_gemm_inputs(TensorIn inp, TensorIn weight, const char* op) const {
  if (!inp.bf16 && !weight.bf16) return;
  EMBER_ASSERT(inp.bf16 && weight.bf16, std::string(op) + ": inp and weight must be stored alike (both bf16 or fp32)");
  EMBER_ASSERT(matmul_precision_ == MatmulPrecision::bf16,
               std::string(op) + ": bf16-stored GEMM inputs need matmul precision bf16");
}

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
