// Low-precision number formats (names of the matmul precisions).
#include "core/dtype.h"

#include "core/enum_names.h"

namespace ember {

std::string matmul_precision_name(MatmulPrecision p) {
  switch (p) {
    case MatmulPrecision::fp32:
      return "fp32";
    case MatmulPrecision::bf16:
      return "bf16";
    case MatmulPrecision::int8:
      return "int8";
    case MatmulPrecision::fp8:
      return "fp8";
  }
  return "?";
}

std::optional<MatmulPrecision> parse_matmul_precision(const std::string& name) {
  return find_by_name(kMatmulPrecisions, matmul_precision_name, name);
}

const char* precision_request_name(PrecisionRequest p) {
  switch (p) {
    case PrecisionRequest::automatic:
      return "auto";
    case PrecisionRequest::fp32:
      return "fp32";
    case PrecisionRequest::bf16:
      return "bf16";
    case PrecisionRequest::int8:
      return "int8";
    case PrecisionRequest::fp8:
      return "fp8";
  }
  return "?";
}

std::optional<PrecisionRequest> parse_precision_request(const std::string& name) {
  return find_by_name(kPrecisionRequests, precision_request_name, name);
}

MatmulPrecision resolve_precision(PrecisionRequest p, bool on_gpu) {
  switch (p) {
    case PrecisionRequest::fp32:
      return MatmulPrecision::fp32;
    case PrecisionRequest::bf16:
      return MatmulPrecision::bf16;
    case PrecisionRequest::int8:
      return MatmulPrecision::int8;
    case PrecisionRequest::fp8:
      return MatmulPrecision::fp8;
    case PrecisionRequest::automatic:
      break;
  }
  return on_gpu ? MatmulPrecision::bf16 : MatmulPrecision::fp32;
}

}  // namespace ember
