// CUDA backend: dense layers (out = inp @ weight + bias) and the tied lm_head (out = inp @ wte^T), both directions.
// GEMMs are cuBLAS in fp32 storage: plain fp32 products (no TF32), or with matmul precision bf16 the compute type
// CUBLAS_COMPUTE_32F_FAST_16BF, which rounds both inputs to bf16 and accumulates in fp32 on the tensor cores (the CPU
// backend emulates the same rounding). Bias broadcast and the dbias column sum are small kernels here.
#include "core/error.h"
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

// dst[c] += sum_r src[r, c]. Block (32 columns, 16 row lanes): lane y sums rows y, y+16, ... in order, then the 16
// partials are added in lane order; the split depends only on the shape, so results are deterministic.
constexpr int kColTile = 32, kRowLanes = 16;
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

}  // namespace

void launch_column_sum_accumulate(float* dst, const float* src, int N, int C, cudaStream_t stream) {
  EMBER_ASSERT(N > 0 && C > 0, "column sum: N and C must be positive");
  column_sum_kernel<<<ceil_div(size_t(C), kColTile), dim3(kColTile, kRowLanes), 0, stream>>>(dst, src, N, C);
  EMBER_CUDA_LAUNCH_CHECK();
}

void launch_matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int IC, int OC,
                           bool bf16, cublasHandle_t handle, cudaStream_t stream) {
  EMBER_ASSERT(N > 0 && IC > 0 && OC > 0, "matmul_forward: N, IC and OC must be positive");
  if (bias) {
    // Seed out with the bias and let the GEMM accumulate onto it (beta = 1), as the CPU backend does.
    const size_t total = size_t(N) * OC;
    broadcast_rows_kernel<<<elementwise_blocks(total), kElementwiseThreads, 0, stream>>>(out, bias, OC, total);
    EMBER_CUDA_LAUNCH_CHECK();
  }
  // out^T (OC, N) = weight^T (OC, IC) @ inp^T (IC, N)
  sgemm(handle, bf16, CUBLAS_OP_N, CUBLAS_OP_N, OC, N, IC, weight, OC, inp, IC, bias ? 1.0f : 0.0f, out, OC);
}

void launch_matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                            const float* weight, int N, int IC, int OC, bool bf16, cublasHandle_t handle,
                            cudaStream_t stream) {
  EMBER_ASSERT(N > 0 && IC > 0 && OC > 0, "matmul_backward: N, IC and OC must be positive");
  // dinp^T (IC, N) += weight (IC, OC) @ dout^T (OC, N); weight as stored is (OC, IC) column-major, hence op T.
  sgemm(handle, bf16, CUBLAS_OP_T, CUBLAS_OP_N, IC, N, OC, weight, OC, dout, OC, 1.0f, dinp, IC);
  // dweight^T (OC, IC) += dout^T (OC, N) @ inp (N, IC); inp as stored is (IC, N) column-major, hence op T.
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
  cuda::launch_matmul_forward(out, inp, weight, bias, N, IC, OC, bf16(), cublas_, stream_);
}

void CudaBackend::matmul_backward(float* dinp,          // (N, IC) +=
                                  float* dweight,       // (IC, OC) +=
                                  float* dbias,         // (OC) += or null
                                  const float* dout,    // (N, OC)
                                  const float* inp,     // (N, IC)
                                  const float* weight,  // (IC, OC)
                                  int N, int IC, int OC) {
  cuda::launch_matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, IC, OC, bf16(), cublas_, stream_);
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
