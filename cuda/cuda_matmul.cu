// CUDA backend: dense layers (out = inp @ weight + bias) and the tied lm_head (out = inp @ wte^T), both directions.
// GEMMs are cuBLAS: plain fp32 products (no TF32), or with matmul precision bf16 bf16 products (CUDA_R_16BF inputs,
// fp32 accumulation on the tensor cores). bf16 inputs are rounded to nearest even by this code, never by cuBLAS:
// those the model stores in bf16 already are, fp32-stored ones are cast into scratch first, and dout is cast in blocks
// of rows in the backward passes. (CUBLAS_COMPUTE_32F_FAST_16BF would convert fp32 inputs itself, but "to bfloat16
// or TF32" as cuBLAS sees fit, which the CPU backend's emulation could not follow.) The dense layers go through
// cuBLASLt (cuda_lt_gemm.cu) where it offers the fused bias epilogue; elsewhere the bias broadcast and the dbias column
// sum are small kernels here, and dbias is always the column sum of the fp32 dout under bf16, as on the CPU. Under bf16
// a dense layer's output may be stored in bf16 (CUDA_R_16BF D, its bias in bf16 seeded into D, the sum rounded once).
#include <cublas_v2.h>

#include <algorithm>
#include <cstdint>

#include "core/error.h"
#include "core/log.h"
#include "cuda_check.h"
#include "cuda_common.cuh"
#include "cuda_gelu.cuh"
#include "cuda_ops.h"

namespace ember {
namespace cuda {
namespace {

// cuBLAS is column-major. A row-major (R, K) matrix is, to cuBLAS, its transpose (K, R) with leading dimension K,
// so every product below is written for the transposes: row-major out = A @ B becomes out^T = B^T @ A^T.
// A and B are both fp32 or, with `ab_bf16`, both bf16; the products accumulate in fp32 either way. C is fp32 or, with
// `c_bf16` (bf16 inputs only), bf16: then alpha A B + beta C is formed in fp32 and rounded once.
void gemm(cublasHandle_t handle, bool ab_bf16, cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k,
          const void* a, int lda, const void* b, int ldb, float beta, void* c, int ldc, bool c_bf16 = false) {
  const float alpha = 1.0f;
  EMBER_ASSERT(ab_bf16 || !c_bf16, "matmul: a bf16 output needs bf16 inputs");
  report_gemm("gemm", ab_bf16, m, n, k, beta, c_bf16);
  if (ab_bf16) {
    EMBER_CUBLAS_CHECK(cublasGemmEx(handle, op_a, op_b, m, n, k, &alpha, a, CUDA_R_16BF, lda, b, CUDA_R_16BF, ldb,
                                    &beta, c, c_bf16 ? CUDA_R_16BF : CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                                    CUBLAS_GEMM_DEFAULT));
  } else {
    EMBER_CUBLAS_CHECK(cublasSgemm(handle, op_a, op_b, m, n, k, &alpha, static_cast<const float*>(a), lda,
                                   static_cast<const float*>(b), ldb, &beta, static_cast<float*>(c), ldc));
  }
}

// The GEMM inputs as the products read them: as stored, or under bf16 fp32-stored ones rounded into the front of
// `scratch`; `rest` is the scratch after those copies (for dout's blocks).
struct GemmInputs {
  TensorIn inp, weight;
  bool bf16 = false;  // the products take bf16
  char* rest = nullptr;
  size_t rest_bytes = 0;
};
GemmInputs gemm_inputs(bool bf16, TensorIn inp, size_t inp_numel, TensorIn weight, size_t weight_numel, void* scratch,
                       size_t scratch_bytes, cudaStream_t stream) {
  EMBER_ASSERT(!weight.ptr || inp.bf16 == weight.bf16, "matmul: inp and weight must be stored alike");
  EMBER_ASSERT(!inp.bf16 || bf16, "matmul: bf16-stored inputs need matmul precision bf16");
  GemmInputs g{inp, weight, bf16, static_cast<char*>(scratch), scratch_bytes};
  if (bf16 && !inp.bf16) {  // without a weight (a backward pass's dweight only), inp alone
    const size_t a = piece_bytes(inp_numel * sizeof(BFloat16)),
                 b = weight.ptr ? piece_bytes(weight_numel * sizeof(BFloat16)) : 0;
    EMBER_ASSERT(scratch_bytes >= a + b, "matmul: the scratch must hold bf16 copies of inp and weight");
    auto* xi = reinterpret_cast<BFloat16*>(g.rest);
    auto* wi = reinterpret_cast<BFloat16*>(g.rest + a);
    launch_cast_to_bf16(xi, inp.f32(), inp_numel, stream);
    if (weight.ptr) launch_cast_to_bf16(wi, weight.f32(), weight_numel, stream);
    g.inp = xi, g.weight = weight.ptr ? TensorIn(wi) : TensorIn(), g.rest += a + b, g.rest_bytes -= a + b;
  }
  return g;
}

// Rows of dout per block of a bf16 backward pass: as many as `bytes` holds in bf16, at least one.
int rows_per_block(size_t bytes, int cols, int N) {
  const size_t rows = bytes / (size_t(cols) * sizeof(BFloat16));
  EMBER_ASSERT(rows >= 1, "matmul backward: the bf16 scratch must hold at least one row of dout");
  return int(rows < size_t(N) ? rows : size_t(N));
}

template <typename T>
__global__ void broadcast_rows_kernel(T* out,         // (N, OC)
                                      const T* bias,  // (OC)
                                      int OC, size_t total) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += size_t(gridDim.x) * blockDim.x)
    out[i] = bias[i % OC];
}

// dbias as a column sum in two stages, so that a narrow dbias still spreads over the GPU: chunks of kSumChunkRows
// rows, each a column-sum block of cuda_common.cuh (kColTile columns x kRowLanes row lanes) writing its partial sums,
// then one pass adding the chunks in order. At 16K tokens that is 64 chunks: a 768-wide dbias takes 24 x 64 blocks,
// ~12 per H100 SM, where one pass over all rows would have 24 in all. Fixed orders throughout: deterministic.
constexpr int kSumChunkRows = 256;
int sum_chunks(int N) { return int(ceil_div(size_t(N), kSumChunkRows)); }

// partial[y, c] = sum of v[r, c] over the rows r of chunk y, where v = src (fp32 or bf16) or, with kGelu,
// src * gelu'(pre) (the gradient at a GELU's input, formed as gelu_backward forms it); with kCast, each v is also
// written to `cast` rounded to bf16 (the bf16 backward passes' copy of dout, made in the same pass over it).
template <bool kCast, bool kGelu, typename PreT, typename SrcT = float>
__global__ void column_partial_sums_kernel(float* partial,       // (chunks, C)
                                           __nv_bfloat16* cast,  // (N, C), or null without kCast
                                           const SrcT* src,      // (N, C)
                                           const PreT* pre,      // (N, C), or null without kGelu
                                           int N, int C) {
  __shared__ float part[kRowLanes][kColTile];
  const int c = blockIdx.x * kColTile + threadIdx.x;
  const int r0 = blockIdx.y * kSumChunkRows, r1 = min(r0 + kSumChunkRows, N);
  float acc = 0.0f;
  if (c < C)
    for (int r = r0 + threadIdx.y; r < r1; r += kRowLanes) {
      float v = load(&src[size_t(r) * C + c]);
      if constexpr (kGelu) v = v * gelu_grad(load(&pre[size_t(r) * C + c]));
      if constexpr (kCast) cast[size_t(r) * C + c] = __float2bfloat16_rn(v);
      acc += v;
    }
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float s = 0.0f;
    for (int y = 0; y < kRowLanes; ++y) s += part[y][threadIdx.x];
    partial[size_t(blockIdx.y) * C + c] = s;
  }
}

// dst[c] += sum over chunks y, in order, of partial[y, c].
__global__ void add_partial_sums_kernel(float* dst,            // (C) +=
                                        const float* partial,  // (chunks, C)
                                        int chunks, int C) {
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < C; c += gridDim.x * blockDim.x) {
    float s = 0.0f;
    for (int y = 0; y < chunks; ++y) s += partial[size_t(y) * C + c];
    dst[c] += s;
  }
}

// dst (C) += the column sums of src (N, C), through `partial` (sum_chunks(N) x C floats of scratch); with `cast`,
// src rounded to bf16 lands there in the same pass. With `gelu_pre` (and `cast`), src is the gradient at a GELU's
// output and what is summed and cast is src * gelu'(gelu_pre).
void column_sum_accumulate(float* dst, BFloat16* cast, TensorIn src, int N, int C, float* partial, cudaStream_t stream,
                           TensorIn gelu_pre = nullptr) {
  const dim3 grid(ceil_div(size_t(C), kColTile), unsigned(sum_chunks(N))), block(kColTile, kRowLanes);
  EMBER_ASSERT(grid.y <= 65535u, "column sum: too many rows");
  EMBER_ASSERT(!gelu_pre.ptr || cast, "column sum: the GELU's gradient is formed only with the cast");
  EMBER_ASSERT(!src.bf16 || !cast || gelu_pre.ptr, "column sum: a bf16 src needs no cast");
  const double nc = double(N) * C, partials = double(grid.y) * C;
  if (gelu_pre.ptr)
    report_launch("column_partial_sums+gelu_backward+cast", ((src.bf16 ? 2.0 : 4.0) + (gelu_pre.bf16 ? 2.0 : 4.0)) * nc,
                  4.0 * partials + 2.0 * nc, 26.0 * nc);
  else
    report_launch(cast ? "column_partial_sums+cast" : "column_partial_sums", (src.bf16 ? 2.0 : 4.0) * nc,
                  4.0 * partials + (cast ? 2.0 * nc : 0.0), nc);
  report_launch("add_partial_sums", 4.0 * (partials + C), 4.0 * C, partials);
  auto* const cast16 = reinterpret_cast<__nv_bfloat16*>(cast);
  auto* const gelu16 = column_partial_sums_kernel<true, true, __nv_bfloat16>;  // one macro argument each
  auto* const gelu32 = column_partial_sums_kernel<true, true, float>;
  auto* const gelu16_16 = column_partial_sums_kernel<true, true, __nv_bfloat16, __nv_bfloat16>;
  auto* const gelu32_16 = column_partial_sums_kernel<true, true, float, __nv_bfloat16>;
  auto* const plain =
      cast ? column_partial_sums_kernel<true, false, float> : column_partial_sums_kernel<false, false, float>;
  auto* const sum16 = column_partial_sums_kernel<false, false, float, __nv_bfloat16>;
  if (gelu_pre.ptr && src.bf16 && gelu_pre.bf16)
    EMBER_KERNEL_LAUNCH(gelu16_16, grid, block, stream, partial, cast16, device_bf16(src), device_bf16(gelu_pre), N, C);
  else if (gelu_pre.ptr && src.bf16)
    EMBER_KERNEL_LAUNCH(gelu32_16, grid, block, stream, partial, cast16, device_bf16(src), gelu_pre.f32(), N, C);
  else if (gelu_pre.bf16)
    EMBER_KERNEL_LAUNCH(gelu16, grid, block, stream, partial, cast16, src.f32(), device_bf16(gelu_pre), N, C);
  else if (gelu_pre.ptr)
    EMBER_KERNEL_LAUNCH(gelu32, grid, block, stream, partial, cast16, src.f32(), gelu_pre.f32(), N, C);
  else if (src.bf16)
    EMBER_KERNEL_LAUNCH(sum16, grid, block, stream, partial, nullptr, device_bf16(src), nullptr, N, C);
  else
    EMBER_KERNEL_LAUNCH(plain, grid, block, stream, partial, cast16, src.f32(), nullptr, N, C);
  EMBER_CUDA_LAUNCH_CHECK();
  EMBER_KERNEL_LAUNCH(add_partial_sums_kernel, elementwise_blocks(size_t(C)), kElementwiseThreads, stream, dst, partial,
                      int(grid.y), C);
  EMBER_CUDA_LAUNCH_CHECK();
}

}  // namespace

size_t column_sum_scratch_bytes(int N, int C) { return piece_bytes(size_t(sum_chunks(N)) * size_t(C) * sizeof(float)); }

void launch_column_sum(float* dst, TensorIn src, int N, int C, float* partial, cudaStream_t stream) {
  column_sum_accumulate(dst, nullptr, src, N, C, partial, stream);
}

size_t matmul_scratch_bytes(bool bf16, TensorIn inp, size_t inp_numel, size_t weight_numel, int N, int dout_cols,
                            bool dout_bf16, bool dbias, size_t dout_block_bytes) {
  size_t bytes = dbias ? piece_bytes(size_t(sum_chunks(N)) * size_t(dout_cols) * sizeof(float)) : 0;
  if (!bf16) return bytes;
  if (!inp.bf16) bytes += piece_bytes(inp_numel * sizeof(BFloat16)) + piece_bytes(weight_numel * sizeof(BFloat16));
  if (dout_cols > 0 && !dout_bf16) {  // a backward pass: whole rows of dout, all N of them if they fit in the block
    const size_t row = size_t(dout_cols) * sizeof(BFloat16), all = row * size_t(N);
    bytes += all <= dout_block_bytes ? all : std::max(row, dout_block_bytes / row * row);
  }
  return bytes;
}

void launch_matmul_forward(TensorOut out, TensorIn inp, TensorIn weight, TensorIn bias, int N, int IC, int OC,
                           bool bf16, cublasHandle_t handle, LtGemm* lt, void* scratch, size_t scratch_bytes,
                           cudaStream_t stream) {
  EMBER_ASSERT(N > 0 && IC > 0 && OC > 0, "matmul_forward: N, IC and OC must be positive");
  EMBER_ASSERT(!out.bf16 || bf16, "matmul_forward: a bf16-stored output needs matmul precision bf16");
  EMBER_ASSERT(!bias.ptr || bias.bf16 == out.bf16, "matmul_forward: the bias must be stored as out is");
  const GemmInputs in = gemm_inputs(bf16, inp, size_t(N) * IC, weight, size_t(IC) * OC, scratch, scratch_bytes, stream);
  // out^T (OC, N) = weight^T (OC, IC) @ inp^T (IC, N) + bias on every column, in the GEMM's epilogue. Not for a
  // bf16 D: on an H200 (cuBLAS 13.0) that epilogue rounds twice, and 27% of the stored values differed from the
  // product and bias summed in fp32 and rounded once (CudaOps.Bf16StorageMatchesTheCpu), some by a bf16 ulp of the
  // product where the bias cancels most of it.
  if (bias.ptr && lt && !out.bf16 &&
      lt->run(LtGemm::Epilogue::bias, in.bf16, false, false, OC, N, IC, in.weight.ptr, OC, in.inp.ptr, IC, 0.0f,
              out.ptr, out.bf16, OC, const_cast<void*>(bias.ptr)))
    return;
  if (bias.ptr) {
    // Seed out with the bias and let the GEMM accumulate onto it (beta = 1), as the CPU backend does; in bf16 the
    // bias is exactly a bf16 value, so the sum is still formed in fp32 and rounded once.
    const size_t total = size_t(N) * OC;
    const double size = out.bf16 ? 2.0 : 4.0;
    report_launch("broadcast_rows", size * double(OC), size * double(total), 0.0);
    if (out.bf16)
      EMBER_KERNEL_LAUNCH(broadcast_rows_kernel<__nv_bfloat16>, elementwise_blocks(total), kElementwiseThreads, stream,
                          device_bf16(out), device_bf16(bias), OC, total);
    else
      EMBER_KERNEL_LAUNCH(broadcast_rows_kernel<float>, elementwise_blocks(total), kElementwiseThreads, stream,
                          out.f32(), bias.f32(), OC, total);
    EMBER_CUDA_LAUNCH_CHECK();
  }
  // out^T (OC, N) = weight^T (OC, IC) @ inp^T (IC, N)
  gemm(handle, in.bf16, CUBLAS_OP_N, CUBLAS_OP_N, OC, N, IC, in.weight.ptr, OC, in.inp.ptr, IC, bias.ptr ? 1.0f : 0.0f,
       out.ptr, OC, out.bf16);
}

void launch_matmul_backward(TensorOut dinp, float* dweight, float* dbias, TensorIn dout, TensorIn gelu_pre,
                            TensorIn inp, TensorIn weight, int N, int IC, int OC, bool bf16, cublasHandle_t handle,
                            LtGemm* lt, float* bias_grad, size_t bias_grad_capacity, void* scratch,
                            size_t scratch_bytes, cudaStream_t stream) {
  EMBER_ASSERT(N > 0 && IC > 0 && OC > 0, "matmul_backward: N, IC and OC must be positive");
  EMBER_ASSERT(!gelu_pre.ptr || (bf16 && dbias), "matmul_backward: the GELU is fused only into the bf16 dbias pass");
  EMBER_ASSERT((!dout.bf16 && !dinp.bf16) || bf16, "matmul_backward: bf16-stored dout or dinp need precision bf16");
  GemmInputs in = gemm_inputs(bf16, inp, size_t(N) * IC, weight, size_t(IC) * OC, scratch, scratch_bytes, stream);
  // The partial sums of dbias's column sum come next in the scratch (matmul_scratch_bytes' order).
  float* partial = reinterpret_cast<float*>(in.rest);
  if (dbias) {
    const size_t p = piece_bytes(size_t(sum_chunks(N)) * OC * sizeof(float));
    EMBER_ASSERT(in.rest_bytes >= p, "matmul_backward: the scratch must hold dbias's partial sums");
    in.rest += p, in.rest_bytes -= p;
  }
  // fp32, or a bf16-stored dout: one block of all N rows, dout read as it is (dbias summing its values). bf16 over an
  // fp32 dout, or with gelu_pre: blocks of rows of dout rounded into the scratch left, with dbias's column sums taken
  // in the same pass (and, with gelu_pre, dout multiplied by the GELU's derivative first: the gradient at this layer's
  // output, never stored).
  const bool cast = in.bf16 && (!dout.bf16 || gelu_pre.ptr);
  const int rows = cast ? rows_per_block(in.rest_bytes, OC, N) : N;
  auto* dout_bf16 = reinterpret_cast<BFloat16*>(in.rest);
  for (int r0 = 0; r0 < N; r0 += rows) {
    const int R = N - r0 < rows ? N - r0 : rows;
    const TensorIn d = dout.at(size_t(r0) * OC);  // (R, OC)
    const float* g32 = d.f32();
    const void* g = d.ptr;
    if (cast) {
      if (dbias)
        column_sum_accumulate(dbias, dout_bf16, d, R, OC, partial, stream,
                              gelu_pre.ptr ? gelu_pre.at(size_t(r0) * OC) : nullptr);
      else
        launch_cast_to_bf16(dout_bf16, g32, size_t(R) * OC, stream);
      g = dout_bf16;
    }
    const TensorIn x = in.inp.at(size_t(r0) * IC);  // (R, IC)
    // dinp^T (IC, R) = weight (IC, OC) @ dout^T (OC, R); weight as stored is (OC, IC) column-major, hence op T.
    // Without dinp (the int8 products' bf16 weight gradient), none.
    void* dx = dinp.bf16 ? static_cast<void*>(dinp.b16() + size_t(r0) * IC) : dinp.f32() + size_t(r0) * IC;
    if (dinp.ptr)
      gemm(handle, in.bf16, CUBLAS_OP_T, CUBLAS_OP_N, IC, R, OC, in.weight.ptr, OC, g, OC, 0.0f, dx, IC, dinp.bf16);
    // dweight^T (OC, IC) += dout^T (OC, R) @ inp (R, IC); inp as stored is (IC, R) column-major, hence op T. In fp32
    // the epilogue's bias gradient is the sum of A = dout^T over k = R, i.e. this block's dbias, which it writes (not
    // adds): it lands in bias_grad and is added to dbias after. In bf16 A is the rounded dout, and dbias must be the
    // sum of dout itself, as on the CPU: the column sum above.
    if (dbias && lt && !in.bf16 && size_t(OC) <= bias_grad_capacity &&
        lt->run(LtGemm::Epilogue::bias_grad_a, false, false, true, OC, IC, R, g, OC, x.ptr, IC, 1.0f, dweight, false,
                OC, bias_grad)) {
      launch_accumulate(dbias, bias_grad, size_t(OC), stream);
      continue;
    }
    gemm(handle, in.bf16, CUBLAS_OP_N, CUBLAS_OP_T, OC, IC, R, g, OC, x.ptr, IC, 1.0f, dweight, OC);
    if (dbias && !cast) column_sum_accumulate(dbias, nullptr, d, R, OC, partial, stream);
  }
}

void launch_matmul_forward_transposed(TensorOut out, TensorIn inp, TensorIn wte, int N, int C, int V, bool bf16,
                                      cublasHandle_t handle, void* scratch, size_t scratch_bytes, cudaStream_t stream) {
  EMBER_ASSERT(N > 0 && C > 0 && V > 0, "matmul_forward_transposed: N, C and V must be positive");
  EMBER_ASSERT(!out.bf16 || bf16, "matmul_forward_transposed: a bf16-stored output needs matmul precision bf16");
  const GemmInputs in = gemm_inputs(bf16, inp, size_t(N) * C, wte, size_t(V) * C, scratch, scratch_bytes, stream);
  // out^T (V, N) = wte (V, C) @ inp^T (C, N); wte as stored is (C, V) column-major, hence op T.
  gemm(handle, in.bf16, CUBLAS_OP_T, CUBLAS_OP_N, V, N, C, in.weight.ptr, C, in.inp.ptr, C, 0.0f, out.ptr, V, out.bf16);
}

void launch_matmul_backward_transposed(TensorOut dinp, float* dwte, TensorIn dout, TensorIn inp, TensorIn wte, int N,
                                       int C, int V, bool bf16, cublasHandle_t handle, void* scratch,
                                       size_t scratch_bytes, cudaStream_t stream) {
  EMBER_ASSERT(N > 0 && C > 0 && V > 0, "matmul_backward_transposed: N, C and V must be positive");
  EMBER_ASSERT((!dout.bf16 && !dinp.bf16) || bf16,
               "matmul_backward_transposed: bf16-stored dout or dinp need matmul precision bf16");
  const GemmInputs in = gemm_inputs(bf16, inp, size_t(N) * C, wte, size_t(V) * C, scratch, scratch_bytes, stream);
  // A bf16-stored dout is read as it is, all rows at once; an fp32 one under bf16 is cast in blocks of rows, as in
  // launch_matmul_backward.
  const bool cast = in.bf16 && !dout.bf16;
  const int rows = cast ? rows_per_block(in.rest_bytes, V, N) : N;
  auto* dout_bf16 = reinterpret_cast<BFloat16*>(in.rest);
  for (int r0 = 0; r0 < N; r0 += rows) {
    const int R = N - r0 < rows ? N - r0 : rows;
    const void* g = dout.at(size_t(r0) * V).ptr;  // (R, V)
    if (cast) {
      launch_cast_to_bf16(dout_bf16, dout.f32() + size_t(r0) * V, size_t(R) * V, stream);
      g = dout_bf16;
    }
    // dinp^T (C, R) = wte^T (C, V) @ dout^T (V, R)
    void* dx = dinp.bf16 ? static_cast<void*>(dinp.b16() + size_t(r0) * C) : dinp.f32() + size_t(r0) * C;
    gemm(handle, in.bf16, CUBLAS_OP_N, CUBLAS_OP_N, C, R, V, in.weight.ptr, C, g, V, 0.0f, dx, C, dinp.bf16);
    // dwte^T (C, V) += inp^T (C, R) @ dout (R, V); dout as stored is (V, R) column-major, hence op T.
    gemm(handle, in.bf16, CUBLAS_OP_N, CUBLAS_OP_T, C, V, R, in.inp.at(size_t(r0) * C).ptr, C, g, V, 1.0f, dwte, C);
  }
}

}  // namespace cuda

}  // namespace ember
