// Check macros for the CUDA runtime, cuBLAS and (where the build has it) NCCL, built on EMBER_CHECK_GEN: each
// evaluates its call once and reports the statement, file:line, rank, host and the library's own message, with a hint.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#ifdef EMBER_HAVE_NCCL
#include <nccl.h>
#endif

#include <string>

#include "core/error.h"

namespace ember::cuda {

inline std::string cuda_error_string(cudaError_t rc) {
  return std::string(cudaGetErrorName(rc)) + ": " + cudaGetErrorString(rc);
}
inline std::string cublas_error_string(cublasStatus_t rc) { return cublasGetStatusString(rc); }
#ifdef EMBER_HAVE_NCCL
// NCCL's code name plus its last error text, which names the failing transport or peer ("Duplicate GPU detected").
inline std::string nccl_error_string(ncclResult_t rc) {
  std::string s = ncclGetErrorString(rc);
  const char* last = ncclGetLastError(nullptr);
  if (last && *last) s += std::string(": ") + last;
  return s;
}
#endif

}  // namespace ember::cuda

#define EMBER_CUDA_CHECK(stmt)                                                                                     \
  EMBER_CHECK_GEN("CUDA", stmt, ember_rc_ == cudaSuccess, ::ember::cuda::cuda_error_string(ember_rc_),             \
                  "check that a GPU is visible (nvidia-smi, CUDA_VISIBLE_DEVICES), has free memory, and that the " \
                  "driver supports this CUDA toolkit")
#define EMBER_CUBLAS_CHECK(stmt)                                                                                     \
  EMBER_CHECK_GEN("cuBLAS", stmt, ember_rc_ == CUBLAS_STATUS_SUCCESS, ::ember::cuda::cublas_error_string(ember_rc_), \
                  "check GPU memory (cuBLAS needs workspace) and the matrix sizes passed to the GEMM")
// After a kernel launch: catches bad launch configurations at once (asynchronous faults surface at the next sync).
// Under the CPU kernel model (tests/kernel_model/kernel_model.h) there is no launch to check.
#ifdef EMBER_KERNEL_MODEL
#define EMBER_CUDA_LAUNCH_CHECK() ((void)0)
#else
#define EMBER_CUDA_LAUNCH_CHECK() EMBER_CUDA_CHECK(cudaGetLastError())
#endif
#ifdef EMBER_HAVE_NCCL
#define EMBER_NCCL_CHECK(stmt)                                                                                   \
  EMBER_CHECK_GEN("NCCL", stmt, ember_rc_ == ncclSuccess, ::ember::cuda::nccl_error_string(ember_rc_),           \
                  "every rank needs a GPU of its own (ranks sharing one need training.comm = mpi); on consumer " \
                  "GPUs without peer-to-peer set NCCL_P2P_DISABLE=1, on Ethernet NCCL_IB_DISABLE=1 and "         \
                  "NCCL_SOCKET_IFNAME=<interface>; NCCL_DEBUG=INFO shows what NCCL tried")
#endif
