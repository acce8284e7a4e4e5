// Low-precision number formats (names of the matmul precisions).
#include "core/dtype.h"

#include "core/enum_names.h"

namespace ember {

std::string matmul_precision_name(MatmulPrecision p) { return p == MatmulPrecision::bf16 ? "bf16" : "fp32"; }

std::optional<MatmulPrecision> parse_matmul_precision(const std::string& name) {
  return find_by_name(kMatmulPrecisions, matmul_precision_name, name);
}

}  // namespace ember
