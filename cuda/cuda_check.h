// Check macros for the CUDA runtime and cuBLAS, built on EMBER_CHECK_GEN: each evaluates its call once and reports
// the statement, file:line, rank, host and the library's own message, with a hint, through ember::fail_check.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "core/error.h"

namespace ember::cuda {

inline std::string cuda_error_string(cudaError_t rc) {
  return std::string(cudaGetErrorName(rc)) + ": " + cudaGetErrorString(rc);
}
inline std::string cublas_error_string(cublasStatus_t rc) { return cublasGetStatusString(rc); }

}  // namespace ember::cuda

#define EMBER_CUDA_CHECK(stmt)                                                           \
  EMBER_CHECK_GEN("CUDA", stmt, ember_rc_ == cudaSuccess, ::ember::cuda::cuda_error_string(ember_rc_), \
                  "check that a GPU is visible (nvidia-smi, CUDA_VISIBLE_DEVICES), has free memory, and that the "  \
                  "driver supports this CUDA toolkit")
#define EMBER_CUBLAS_CHECK(stmt)                                                                            \
  EMBER_CHECK_GEN("cuBLAS", stmt, ember_rc_ == CUBLAS_STATUS_SUCCESS, ::ember::cuda::cublas_error_string(ember_rc_), \
                  "check GPU memory (cuBLAS needs workspace) and the matrix sizes passed to the GEMM")
// After a kernel launch: catches bad launch configurations at once (asynchronous faults surface at the next sync).
#define EMBER_CUDA_LAUNCH_CHECK() EMBER_CUDA_CHECK(cudaGetLastError())
