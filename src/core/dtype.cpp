// Low-precision number formats (names of the matmul precisions).
#include "core/dtype.h"

#include "core/error.h"

namespace ember {

MatmulPrecision parse_matmul_precision(const std::string& name) {
  if (name == "fp32") return MatmulPrecision::fp32;
  if (name == "bf16") return MatmulPrecision::bf16;
  throw_error("unknown precision '" + name + "'", "use fp32 or bf16");
}

std::string matmul_precision_name(MatmulPrecision p) { return p == MatmulPrecision::bf16 ? "bf16" : "fp32"; }

}  // namespace ember
