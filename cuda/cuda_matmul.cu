// CUDA backend: dense layers (out = inp @ weight + bias) and the tied lm_head (out = inp @ wte^T), both directions.
// GEMMs are cuBLAS in fp32 storage: plain fp32 products (no TF32), or with matmul precision bf16 the compute type
// CUBLAS_COMPUTE_32F_FAST_16BF, which rounds both inputs to bf16 and accumulates in fp32 on the tensor cores (the CPU
// backend emulates the same rounding). The dense layers go through cuBLASLt where it offers the fused epilogues: the
// bias added as the GEMM writes out, and dbias summed from dout as the dweight GEMM reads it; elsewhere the bias
// broadcast and the dbias column sum are small kernels here.
#include <cublasLt.h>

#include <array>
#include <cstdint>
#include <map>

#include "core/error.h"
#include "core/log.h"
#include "cuda_backend.h"
#include "cuda_check.h"
#include "cuda_common.cuh"
#include "cuda_ops.h"

namespace ember {
namespace cuda {
namespace {

// cuBLAS is column-major. A row-major (R, K) matrix is, to cuBLAS, its transpose (K, R) with leading dimension K,
// so every product below is written for the transposes: row-major out = A @ B becomes out^T = B^T @ A^T.
void sgemm(cublasHandle_t handle, bool bf16, cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k,
           const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  const float alpha = 1.0f;
  if (!bf16) {
    EMBER_CUBLAS_CHECK(cublasSgemm(handle, op_a, op_b, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc));
    return;
  }
  EMBER_CUBLAS_CHECK(cublasGemmEx(handle, op_a, op_b, m, n, k, &alpha, a, CUDA_R_32F, lda, b, CUDA_R_32F, ldb, &beta,
                                  c, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F_FAST_16BF, CUBLAS_GEMM_DEFAULT));
}

__global__ void broadcast_rows_kernel(float* out,         // (N, OC)
                                      const float* bias,  // (OC)
                                      int OC, size_t total) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += size_t(gridDim.x) * blockDim.x)
    out[i] = bias[i % OC];
}

// dst[c] += sum_r src[r, c], in the column-sum blocks of cuda_common.cuh.
__global__ void column_sum_kernel(float* dst,        // (C) +=
                                  const float* src,  // (N, C)
                                  int N, int C) {
  __shared__ float part[kRowLanes][kColTile];
  const int c = blockIdx.x * kColTile + threadIdx.x;
  float acc = 0.0f;
  if (c < C)
    for (int r = threadIdx.y; r < N; r += kRowLanes) acc += src[size_t(r) * C + c];
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float s = 0.0f;
    for (int y = 0; y < kRowLanes; ++y) s += part[y][threadIdx.x];
    dst[c] += s;
  }
}

// The largest power of two up to 256 that divides the address: cuBLASLt's heuristic assumes 256-byte alignment
// unless told otherwise, and parameter tensors sit at arbitrary float offsets in the arena.
uint32_t alignment_of(const void* ptr) {
  const auto addr = reinterpret_cast<uintptr_t>(ptr);
  uint32_t align = 256;
  while (align > 1 && addr % align != 0) align /= 2;
  return align;
}

// The descriptors of one cuBLASLt call, destroyed on every path out.
struct LtDescriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtDescriptors() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

template <typename T>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value) {
  EMBER_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
}
template <typename T>
void set_pref(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const T& value) {
  EMBER_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)));
}

}  // namespace

struct LtGemm::Plan {
  bool found = false;
  cublasLtMatmulAlgo_t algo{};
};
struct LtGemm::Cache {
  std::map<std::array<int64_t, 15>, Plan> plans;
};

LtGemm::LtGemm(cudaStream_t stream, void* workspace, size_t workspace_bytes)
    : stream_(stream), workspace_(workspace), workspace_bytes_(workspace_bytes), cache_(new Cache) {
  cublasLtHandle_t handle = nullptr;
  EMBER_CUBLAS_CHECK(cublasLtCreate(&handle));
  handle_ = handle;
}

LtGemm::~LtGemm() {
  cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_));
  delete cache_;
}

bool LtGemm::run(Epilogue epilogue, bool bf16, bool trans_a, bool trans_b, int m, int n, int k, const float* a,
                 int lda, const float* b, int ldb, float beta, float* d, int ldd, void* bias) {
  const auto handle = static_cast<cublasLtHandle_t>(handle_);
  LtDescriptors desc;
  EMBER_CUBLAS_CHECK(
      cublasLtMatmulDescCreate(&desc.op, bf16 ? CUBLAS_COMPUTE_32F_FAST_16BF : CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_desc(desc.op, CUBLASLT_MATMUL_DESC_TRANSA, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N);
  set_desc(desc.op, CUBLASLT_MATMUL_DESC_TRANSB, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N);
  const cublasLtEpilogue_t ep = epilogue == Epilogue::bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_BGRADA;
  set_desc(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(ep));
  set_desc(desc.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);  // read by the heuristic for its alignment
  // Layouts as stored: A is (m, k), or (k, m) when transposed; B is (k, n), or (n, k).
  EMBER_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.a, CUDA_R_32F, trans_a ? k : m, trans_a ? m : k, lda));
  EMBER_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.b, CUDA_R_32F, trans_b ? n : k, trans_b ? k : n, ldb));
  EMBER_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.d, CUDA_R_32F, m, n, ldd));

  const std::array<int64_t, 15> key = {int64_t(epilogue), bf16, trans_a, trans_b, m, n, k, lda, ldb, ldd,
                                       beta != 0.0f, alignment_of(a), alignment_of(b), alignment_of(d),
                                       alignment_of(bias)};
  auto it = cache_->plans.find(key);
  if (it == cache_->plans.end()) {
    EMBER_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&desc.pref));
    set_pref(desc.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t(workspace_bytes_));
    set_pref(desc.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment_of(a));
    set_pref(desc.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment_of(b));
    set_pref(desc.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment_of(d));
    set_pref(desc.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment_of(d));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t rc =
        cublasLtMatmulAlgoGetHeuristic(handle, desc.op, desc.a, desc.b, desc.d, desc.d, desc.pref, 1, &result, &found);
    // NOT_SUPPORTED: no kernel for this epilogue with these types, shape or alignment. Any other refusal also leaves
    // the call to the plain path, which computes the same thing, but is worth a line in the log.
    if (rc != CUBLAS_STATUS_SUCCESS && rc != CUBLAS_STATUS_NOT_SUPPORTED)
      log_warn("cuBLASLt heuristic refused a %dx%dx%d GEMM with a fused %s epilogue (%s); using cuBLAS and a kernel",
               m, n, k, epilogue == Epilogue::bias ? "bias" : "bias-gradient", cublasGetStatusString(rc));
    Plan plan;
    plan.found = rc == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS;
    if (plan.found) plan.algo = result.algo;
    it = cache_->plans.emplace(key, plan).first;
  }
  if (!it->second.found) return false;
  const float alpha = 1.0f;
  EMBER_CUBLAS_CHECK(cublasLtMatmul(handle, desc.op, &alpha, a, desc.a, b, desc.b, &beta, d, desc.d, d, desc.d,
                                    &it->second.algo, workspace_, workspace_bytes_, stream_));
  return true;
}

void launch_column_sum_accumulate(float* dst, const float* src, int N, int C, cudaStream_t stream) {
  EMBER_ASSERT(N > 0 && C > 0, "column sum: N and C must be positive");
  EMBER_KERNEL_LAUNCH(column_sum_kernel, ceil_div(size_t(C), kColTile), dim3(kColTile, kRowLanes), stream, dst, src, N,
                      C);
  EMBER_CUDA_LAUNCH_CHECK();
}

void launch_matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int IC, int OC,
                           bool bf16, cublasHandle_t handle, LtGemm* lt, cudaStream_t stream) {
  EMBER_ASSERT(N > 0 && IC > 0 && OC > 0, "matmul_forward: N, IC and OC must be positive");
  // out^T (OC, N) = weight^T (OC, IC) @ inp^T (IC, N) + bias on every column, in the GEMM's epilogue.
  if (bias && lt &&
      lt->run(LtGemm::Epilogue::bias, bf16, false, false, OC, N, IC, weight, OC, inp, IC, 0.0f, out, OC,
              const_cast<float*>(bias)))
    return;
  if (bias) {
    // Seed out with the bias and let the GEMM accumulate onto it (beta = 1), as the CPU backend does.
    const size_t total = size_t(N) * OC;
    EMBER_KERNEL_LAUNCH(broadcast_rows_kernel, elementwise_blocks(total), kElementwiseThreads, stream, out, bias, OC,
                        total);
    EMBER_CUDA_LAUNCH_CHECK();
  }
  // out^T (OC, N) = weight^T (OC, IC) @ inp^T (IC, N)
  sgemm(handle, bf16, CUBLAS_OP_N, CUBLAS_OP_N, OC, N, IC, weight, OC, inp, IC, bias ? 1.0f : 0.0f, out, OC);
}

void launch_matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                            const float* weight, int N, int IC, int OC, bool bf16, cublasHandle_t handle, LtGemm* lt,
                            float* bias_grad, size_t bias_grad_capacity, cudaStream_t stream) {
  EMBER_ASSERT(N > 0 && IC > 0 && OC > 0, "matmul_backward: N, IC and OC must be positive");
  // dinp^T (IC, N) += weight (IC, OC) @ dout^T (OC, N); weight as stored is (OC, IC) column-major, hence op T.
  sgemm(handle, bf16, CUBLAS_OP_T, CUBLAS_OP_N, IC, N, OC, weight, OC, dout, OC, 1.0f, dinp, IC);
  // dweight^T (OC, IC) += dout^T (OC, N) @ inp (N, IC); inp as stored is (IC, N) column-major, hence op T. The
  // epilogue's bias gradient is the sum of A = dout^T over k = N, i.e. dbias, which it writes (not adds): it lands
  // in bias_grad and is added to dbias after.
  if (dbias && lt && size_t(OC) <= bias_grad_capacity &&
      lt->run(LtGemm::Epilogue::bias_grad_a, bf16, false, true, OC, IC, N, dout, OC, inp, IC, 1.0f, dweight, OC,
              bias_grad)) {
    launch_accumulate(dbias, bias_grad, size_t(OC), stream);
    return;
  }
  sgemm(handle, bf16, CUBLAS_OP_N, CUBLAS_OP_T, OC, IC, N, dout, OC, inp, IC, 1.0f, dweight, OC);
  if (dbias) launch_column_sum_accumulate(dbias, dout, N, OC, stream);
}

void launch_matmul_forward_transposed(float* out, const float* inp, const float* wte, int N, int C, int V, bool bf16,
                                      cublasHandle_t handle) {
  EMBER_ASSERT(N > 0 && C > 0 && V > 0, "matmul_forward_transposed: N, C and V must be positive");
  // out^T (V, N) = wte (V, C) @ inp^T (C, N); wte as stored is (C, V) column-major, hence op T.
  sgemm(handle, bf16, CUBLAS_OP_T, CUBLAS_OP_N, V, N, C, wte, C, inp, C, 0.0f, out, V);
}

void launch_matmul_backward_transposed(float* dinp, float* dwte, const float* dout, const float* inp,
                                       const float* wte, int N, int C, int V, bool bf16, cublasHandle_t handle) {
  EMBER_ASSERT(N > 0 && C > 0 && V > 0, "matmul_backward_transposed: N, C and V must be positive");
  // dinp^T (C, N) += wte^T (C, V) @ dout^T (V, N)
  sgemm(handle, bf16, CUBLAS_OP_N, CUBLAS_OP_N, C, N, V, wte, C, dout, V, 1.0f, dinp, C);
  // dwte^T (C, V) += inp^T (C, N) @ dout (N, V); dout as stored is (V, N) column-major, hence op T.
  sgemm(handle, bf16, CUBLAS_OP_N, CUBLAS_OP_T, C, V, N, inp, C, dout, V, 1.0f, dwte, C);
}

}  // namespace cuda

void CudaBackend::matmul_forward(float* out,           // (N, OC)
                                 const float* inp,     // (N, IC)
                                 const float* weight,  // (IC, OC)
                                 const float* bias,    // (OC) or null
                                 int N, int IC, int OC) {
  cuda::launch_matmul_forward(out, inp, weight, bias, N, IC, OC, bf16(), cublas_, lt_.get(), stream_);
}

void CudaBackend::matmul_backward(float* dinp,          // (N, IC) +=
                                  float* dweight,       // (IC, OC) +=
                                  float* dbias,         // (OC) += or null
                                  const float* dout,    // (N, OC)
                                  const float* inp,     // (N, IC)
                                  const float* weight,  // (IC, OC)
                                  int N, int IC, int OC) {
  cuda::launch_matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, IC, OC, bf16(), cublas_, lt_.get(),
                               bias_grad_, kBiasGradCapacity, stream_);
}

void CudaBackend::matmul_forward_transposed(float* out,        // (N, V)
                                            const float* inp,  // (N, C)
                                            const float* wte,  // (V, C)
                                            int N, int C, int V) {
  cuda::launch_matmul_forward_transposed(out, inp, wte, N, C, V, bf16(), cublas_);
}

void CudaBackend::matmul_backward_transposed(float* dinp,        // (N, C) +=
                                             float* dwte,        // (V, C) +=
                                             const float* dout,  // (N, V)
                                             const float* inp,   // (N, C)
                                             const float* wte,   // (V, C)
                                             int N, int C, int V) {
  cuda::launch_matmul_backward_transposed(dinp, dwte, dout, inp, wte, N, C, V, bf16(), cublas_);
}

}  // namespace ember
