// CUDA backend: the fp8 GEMM of the dense layers' fp8 products, through cuBLASLt (LtGemm::run_fp8, which keeps its
// descriptors and heuristic answer per call shape). Its own file because the kernel model replaces it with a model
// computed from the definition (tests/kernel_model/kernel_model_backend.cpp), as it replaces cuBLAS's entry points.
#include "core/error.h"
#include "cuda_ops.h"
#include "launch_cost.h"

namespace ember {
namespace cuda {

void launch_gemm_fp8(LtGemm* lt, int m, int n, int k, const uint8_t* a, Fp8Format fa, int lda, const uint8_t* b,
                     Fp8Format fb, int ldb, float* d, int ldd, cudaStream_t) {
  EMBER_ASSERT(lt, "fp8 GEMM: it runs on cuBLASLt");
  report_launch("gemm_fp8", double(m) * k + double(k) * n, 4.0 * double(m) * n, 2.0 * double(m) * n * k,
                /*gemm=*/true, FlopUnit::fp8);
  lt->run_fp8(m, n, k, a, fa, lda, b, fb, ldb, d, ldd);
}

}  // namespace cuda
}  // namespace ember
