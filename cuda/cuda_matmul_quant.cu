// CUDA backend: the dense layers' quantized products under matmul precisions int8 and fp8 (backend.h): int8 bit for bit
// the CPU backend's (backend/cpu/cpu_matmul_int8.h), fp8 the same codes and scales as its (cpu_matmul_fp8.h) with the
// tensor cores' sums. Each product is three launches: the operands quantized (cuda_quant.cuh; the weight's copies once
// per step, by the caller), the GEMM (cuBLAS's int8 one, exact int32 sums on the int8 tensor cores; cuBLASLt's fp8
// one, fp32 sums, cuda_gemm_fp8.cu), and an epilogue that scales each sum by its row's and its column's scale (or the
// tensors' one scale each), adds the bias (or the earlier value) and stores the result, each operation rounded on its
// own in the CPU's order. From sm_80 the int8 products are two launches: the GEMM and its epilogue are one kernel
// (cuda_gemm_s8.cuh: mma.sync with the scales applied in registers), so no int32 product passes through memory.
//
// cuBLAS and cuBLASLt take int8 and fp8 on the tensor cores only in the "TN" form (A transposed, B not: both operands
// with the summed dimension contiguous), with sizes and leading dimensions multiples of 4 (int8) or 16 (fp8): so every
// quantized operand here is laid out with the summed dimension contiguous and padded with zeros to a multiple of
// kQuantPad, and the GEMM's other dimensions are padded too; zeros add nothing to the sums, and the epilogue reads only
// the real rows and columns.
#include <cublas_v2.h>

#include <algorithm>
#include <cstdint>

#include "core/error.h"
#include "cuda_check.h"
#include "cuda_common.cuh"
#include "cuda_gemm_s8.cuh"
#include "cuda_ops.h"

namespace ember {
namespace cuda {
namespace {

// C (m, n) = A^T B in int32, column-major (cuda_matmul.cu's convention): A stored (k, m) with leading dimension lda,
// B (k, n) with ldb, both int8 with the k values of a row of A^T (a column of B) contiguous; C (m, n) with ldc.
void gemm_s8(cublasHandle_t handle, int m, int n, int k, const int8_t* a, int lda, const int8_t* b, int ldb, int32_t* c,
             int ldc) {
  EMBER_ASSERT(m % 4 == 0 && k % 4 == 0 && lda % 4 == 0 && ldb % 4 == 0 && ldc % 4 == 0,
               "int8 GEMM: m, k and the leading dimensions must be multiples of 4");
  report_launch("gemm_s8", double(m) * k + double(k) * n, 4.0 * double(m) * n, 2.0 * double(m) * n * k,
                /*gemm=*/true, FlopUnit::int8);
  const int32_t alpha = 1, beta = 0;
  EMBER_CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, a, CUDA_R_8I, lda, b, CUDA_R_8I,
                                  ldb, &beta, c, CUDA_R_32I, ldc, CUBLAS_COMPUTE_32I, CUBLAS_GEMM_DEFAULT));
}

// out (M, Nc) with leading dimension ldo = the int8 product of A (M, K) and B (Nc, K) with its scales and bias
// applied in one kernel (cuda_gemm_s8.cuh); or, `accumulate`, out plus the products of `parts` such pairs one after
// another (the int8 weight gradient's tiles, the last one last_k long), summed in registers. K, last_k and the
// leading dimensions are multiples of kQuantPad.
void gemm_s8_scaled(TensorOut out, int ldo, S8Operand a, S8Operand b, TensorIn bias, int M, int Nc, int K, int parts,
                    int last_k, bool accumulate, cudaStream_t stream) {
  EMBER_ASSERT(
      K % kQuantPad == 0 && last_k % kQuantPad == 0 && last_k <= K && a.ld % kQuantPad == 0 && b.ld % kQuantPad == 0,
      "int8 GEMM: k and the leading dimensions must be multiples of 16");
  EMBER_ASSERT(accumulate ? !out.bf16 && !bias.ptr : parts == 1, "int8 GEMM: parts accumulate into fp32, with no bias");
  const double out_bytes = out.bf16 ? 2.0 : 4.0, mn = double(M) * Nc, summed = double(K) * (parts - 1) + last_k;
  report_launch(accumulate ? "gemm_s8_scaled+accumulate" : "gemm_s8_scaled",
                (double(M) + Nc) * summed + 4.0 * parts * (M + Nc) + (bias.ptr ? out_bytes * Nc : 0.0) +
                    (accumulate ? 4.0 * mn : 0.0),
                out_bytes * mn, 2.0 * mn * summed, /*gemm=*/true, FlopUnit::int8);
  const dim3 grid(unsigned((Nc + kS8Tile - 1) / kS8Tile), unsigned((M + kS8Tile - 1) / kS8Tile));
  const float* b32 = bias.ptr && !bias.bf16 ? bias.f32() : nullptr;
  const __nv_bfloat16* b16 = bias.ptr && bias.bf16 ? device_bf16(bias) : nullptr;
  if (accumulate)
    EMBER_KERNEL_LAUNCH((gemm_s8_scaled_kernel<float, true>), grid, kS8Threads, stream, out.f32(), ldo, a, b, b32, b16,
                        M, Nc, K, parts, last_k);
  else if (out.bf16)
    EMBER_KERNEL_LAUNCH((gemm_s8_scaled_kernel<__nv_bfloat16, false>), grid, kS8Threads, stream, device_bf16(out), ldo,
                        a, b, b32, b16, M, Nc, K, parts, last_k);
  else
    EMBER_KERNEL_LAUNCH((gemm_s8_scaled_kernel<float, false>), grid, kS8Threads, stream, out.f32(), ldo, a, b, b32, b16,
                        M, Nc, K, parts, last_k);
  EMBER_CUDA_LAUNCH_CHECK();
}

// out (rows, cols) = (float(acc[r, c]) * row_scales[r]) * col_scales[c], plus the bias (fp32 or bf16, or neither) or,
// with kAccumulate, plus out's fp32 value; stored in fp32 or bf16 (rounded once). acc is (rows, ld_acc) row-major,
// int32 (int8 products) or fp32 (fp8 ones). A scale's stride is 1 (per row or column) or 0 (one for the tensor).
template <typename AccT, typename OutT, bool kAccumulate>
__global__ void quantized_epilogue_kernel(OutT* out, const AccT* acc, int ld_acc, const float* row_scales,
                                          int row_stride, const float* col_scales, int col_stride, const float* bias32,
                                          const __nv_bfloat16* bias16, int rows, int cols) {
  const size_t total = size_t(rows) * cols;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += size_t(gridDim.x) * blockDim.x) {
    const int r = int(i / cols), c = int(i % cols);
    float v = __fmul_rn(__fmul_rn(float(acc[size_t(r) * ld_acc + c]), row_scales[r * row_stride]),
                        col_scales[c * col_stride]);
    if (bias32) v = __fadd_rn(v, bias32[c]);
    if (bias16) v = __fadd_rn(v, __bfloat162float(bias16[c]));
    if constexpr (kAccumulate) v = __fadd_rn(load(&out[i]), v);
    store(&out[i], v);
  }
}

// The scales of one operand of a quantized product: per row (or column) of it, or one for the tensor.
struct Scales {
  const float* at;
  bool per_tensor;
};

template <typename AccT>
void quantized_epilogue(TensorOut out, const AccT* acc, int ld_acc, Scales row, Scales col, TensorIn bias, int rows,
                        int cols, bool accumulate, cudaStream_t stream) {
  EMBER_ASSERT(!accumulate || (!out.bf16 && !bias.ptr), "quantized epilogue: it accumulates into fp32, no bias");
  const size_t total = size_t(rows) * cols;
  const double out_bytes = out.bf16 ? 2.0 : 4.0;
  report_launch(accumulate ? "quantized_epilogue+accumulate" : "quantized_epilogue",
                4.0 * double(total) + 4.0 * (rows + cols) + (bias.ptr ? out_bytes * cols : 0.0) +
                    (accumulate ? 4.0 * double(total) : 0.0),
                out_bytes * double(total), 4.0 * double(total));
  const float* b32 = bias.ptr && !bias.bf16 ? bias.f32() : nullptr;
  const __nv_bfloat16* b16 = bias.ptr && bias.bf16 ? device_bf16(bias) : nullptr;
  const int rs = row.per_tensor ? 0 : 1, cs = col.per_tensor ? 0 : 1;
  if (accumulate)
    EMBER_KERNEL_LAUNCH((quantized_epilogue_kernel<AccT, float, true>), elementwise_blocks(total), kElementwiseThreads,
                        stream, out.f32(), acc, ld_acc, row.at, rs, col.at, cs, b32, b16, rows, cols);
  else if (out.bf16)
    EMBER_KERNEL_LAUNCH((quantized_epilogue_kernel<AccT, __nv_bfloat16, false>), elementwise_blocks(total),
                        kElementwiseThreads, stream, device_bf16(out), acc, ld_acc, row.at, rs, col.at, cs, b32, b16,
                        rows, cols);
  else
    EMBER_KERNEL_LAUNCH((quantized_epilogue_kernel<AccT, float, false>), elementwise_blocks(total), kElementwiseThreads,
                        stream, out.f32(), acc, ld_acc, row.at, rs, col.at, cs, b32, b16, rows, cols);
  EMBER_CUDA_LAUNCH_CHECK();
}

// Pieces of scratch taken one after another (each 256-byte aligned, piece_bytes).
struct Carve {
  char* at;
  size_t left;
  template <typename T>
  T* take(size_t count) {
    const size_t bytes = piece_bytes(count * sizeof(T));
    EMBER_ASSERT(bytes <= left, "int8 matmul: the scratch is too small");
    T* p = reinterpret_cast<T*>(at);
    at += bytes, left -= bytes;
    return p;
  }
};

// A quantized operand of n rows of k values (k padded), its scales and the int32 product of m rows.
size_t operand_bytes(size_t rows, int k) { return piece_bytes(rows * size_t(quant_padded(k))) + piece_bytes(4 * rows); }

// The int8 weight gradient's tiles of tokens for N tokens.
int weight_gradient_tiles(int N) { return (N + kInt8WeightGradientTile - 1) / kInt8WeightGradientTile; }

// The weight gradient's tiles: x and dout quantized per channel (transposed: IC and OCp rows of a tile's padded token
// count), every tile's at once where fused, else one tile's and its int32 product (IC x OCp).
size_t weight_gradient_int8_bytes(int N, int IC, int OC, bool fused) {
  const size_t k = size_t(quant_padded(kInt8WeightGradientTile)), tiles = fused ? size_t(weight_gradient_tiles(N)) : 1;
  return piece_bytes(tiles * IC * k) + piece_bytes(4 * tiles * IC) + piece_bytes(tiles * quant_padded(OC) * k) +
         piece_bytes(4 * tiles * OC) + (fused ? 0 : piece_bytes(4 * size_t(IC) * quant_padded(OC)));
}

}  // namespace

size_t int8_weight_copy_bytes(int IC, int OC, bool forward) {
  const int rows = forward ? OC : IC, cols = forward ? IC : OC;
  return piece_bytes(size_t(quant_padded(rows)) * quant_padded(cols)) + piece_bytes(4 * size_t(rows));
}

Int8WeightCopy int8_weight_copy_at(char* at, int IC, int OC, bool forward) {
  const int rows = forward ? OC : IC, cols = forward ? IC : OC;
  return {reinterpret_cast<int8_t*>(at),
          reinterpret_cast<float*>(at + piece_bytes(size_t(quant_padded(rows)) * quant_padded(cols)))};
}

void launch_int8_weight_copy(Int8WeightCopy copy, TensorIn weight, int IC, int OC, bool forward, cudaStream_t stream) {
  if (forward)  // W^T per output channel: row o of the copy is column o of the weight
    launch_quantize_int8_columns_transposed(copy.q, quant_padded(IC), quant_padded(OC), copy.scales, weight, IC, OC,
                                            false, nullptr, 0, stream);
  else  // W per input channel, as stored
    launch_quantize_int8_rows(copy.q, quant_padded(OC), quant_padded(IC), copy.scales, weight, IC, OC, false, nullptr,
                              stream);
}

size_t matmul_int8_forward_scratch_bytes(int N, int IC, int OC, bool fused) {
  return operand_bytes(size_t(N), IC) + (fused ? 0 : piece_bytes(4 * size_t(N) * quant_padded(OC)));
}

void launch_matmul_forward_int8(TensorOut out, TensorIn inp, Int8WeightCopy weight, TensorIn bias, int N, int IC,
                                int OC, bool fused, cublasHandle_t handle, void* scratch, size_t scratch_bytes,
                                cudaStream_t stream) {
  EMBER_ASSERT(N > 0 && IC > 0 && OC > 0, "matmul_forward: N, IC and OC must be positive");
  EMBER_ASSERT(!bias.ptr || bias.bf16 == out.bf16, "matmul_forward: the bias must be stored as out is");
  const int ICp = quant_padded(IC), OCp = quant_padded(OC);
  Carve s{static_cast<char*>(scratch), scratch_bytes};
  auto* qx = s.take<int8_t>(size_t(N) * ICp);
  auto* sx = s.take<float>(size_t(N));
  // inp's bf16 values per token row, to nearest; out (N, OC) = qx (N, ICp) @ Wq^T, Wq^T stored (OCp, ICp).
  launch_quantize_int8_rows(qx, ICp, N, sx, inp, N, IC, true, nullptr, stream);
  if (fused) {
    gemm_s8_scaled(out, OC, {qx, ICp, 0, sx, 0}, {weight.q, ICp, 0, weight.scales, 0}, bias, N, OC, ICp, 1, ICp, false,
                   stream);
    return;
  }
  auto* acc = s.take<int32_t>(size_t(N) * OCp);  // out^T (OCp, N) = Wq^T (OCp, ICp) @ qx^T (ICp, N) in cuBLAS's terms
  gemm_s8(handle, OCp, N, ICp, weight.q, ICp, qx, ICp, acc, OCp);
  quantized_epilogue(out, acc, OCp, {sx, false}, {weight.scales, false}, bias, N, OC, false, stream);
}

size_t matmul_int8_backward_scratch_bytes(TensorIn dout, TensorIn inp, bool dbias, bool int8_weight_gradient, int N,
                                          int IC, int OC, bool fused, size_t dout_block_bytes) {
  size_t bytes = operand_bytes(size_t(N), OC) + (fused ? 0 : piece_bytes(4 * size_t(N) * quant_padded(IC)));
  if (int8_weight_gradient)
    return bytes + weight_gradient_int8_bytes(N, IC, OC, fused) + (dbias ? column_sum_scratch_bytes(N, OC) : 0);
  // The weight gradient in bf16: launch_matmul_backward's scratch without the weight's copy.
  return bytes + matmul_scratch_bytes(true, inp, size_t(N) * IC, 0, N, OC, dout.bf16, dbias, dout_block_bytes);
}

void launch_matmul_backward_int8(TensorOut dinp, float* dweight, float* dbias, TensorIn dout, TensorIn inp,
                                 Int8WeightCopy weight, int N, int IC, int OC, const DitherKey* dither,
                                 bool int8_weight_gradient, bool fused, cublasHandle_t handle, LtGemm* lt,
                                 float* bias_grad, size_t bias_grad_capacity, void* scratch, size_t scratch_bytes,
                                 cudaStream_t stream) {
  EMBER_ASSERT(N > 0 && IC > 0 && OC > 0, "matmul_backward: N, IC and OC must be positive");
  const int ICp = quant_padded(IC), OCp = quant_padded(OC);
  Carve s{static_cast<char*>(scratch), scratch_bytes};
  auto* qd = s.take<int8_t>(size_t(N) * OCp);
  auto* sd = s.take<float>(size_t(N));
  // dout's bf16 values per token row, dithered (or to nearest); dinp (N, IC) = qd (N, OCp) @ Wq^T, Wq stored (ICp,
  // OCp).
  launch_quantize_int8_rows(qd, OCp, N, sd, dout, N, OC, true, dither, stream);
  if (fused) {
    gemm_s8_scaled(dinp, IC, {qd, OCp, 0, sd, 0}, {weight.q, OCp, 0, weight.scales, 0}, nullptr, N, IC, OCp, 1, OCp,
                   false, stream);
  } else {
    auto* acc = s.take<int32_t>(size_t(N) * ICp);  // dinp^T (ICp, N) = Wq (ICp, OCp) @ qd^T (OCp, N)
    gemm_s8(handle, ICp, N, OCp, weight.q, OCp, qd, OCp, acc, ICp);
    quantized_epilogue(dinp, acc, ICp, {sd, false}, {weight.scales, false}, nullptr, N, IC, false, stream);
  }
  if (!int8_weight_gradient) {  // dweight and dbias as under bf16, from the rest of the scratch
    launch_matmul_backward(TensorOut(), dweight, dbias, dout, nullptr, inp, nullptr, N, IC, OC, true, handle, lt,
                           bias_grad, bias_grad_capacity, s.at, s.left, stream);
    return;
  }
  // dweight^T (OCp, IC) += qd_tile^T (OCp, k) @ qx_tile (k, IC) over tiles of tokens, each operand quantized per
  // channel over the tile's tokens (dout dithered by its element's place in the whole tensor, after the stream's N OC
  // values the input-gradient product drew), scaled and added tile after tile. Fused: every tile quantized first
  // (each padded to k tokens), then one kernel sums the tiles' scaled products in registers and adds them to dweight
  // once; otherwise each tile's int32 product and an epilogue pass in turn.
  const int k = quant_padded(kInt8WeightGradientTile), tiles = fused ? weight_gradient_tiles(N) : 1;
  auto* qxt = s.take<int8_t>(size_t(tiles) * IC * k);
  auto* sxt = s.take<float>(size_t(tiles) * IC);
  auto* qdt = s.take<int8_t>(size_t(tiles) * OCp * k);
  auto* sdt = s.take<float>(size_t(tiles) * OC);
  auto* wacc = fused ? nullptr : s.take<int32_t>(size_t(IC) * OCp);
  for (int t0 = 0, t = 0; t0 < N; t0 += kInt8WeightGradientTile, ++t) {
    const int R = std::min(kInt8WeightGradientTile, N - t0), kt = fused ? k : quant_padded(R), part = fused ? t : 0;
    int8_t* qx = qxt + size_t(part) * IC * k;
    int8_t* qdo = qdt + size_t(part) * OCp * k;
    float* sx = sxt + size_t(part) * IC;
    float* sdo = sdt + size_t(part) * OC;
    launch_quantize_int8_columns_transposed(qx, kt, IC, sx, inp.at(size_t(t0) * IC), R, IC, true, nullptr, 0, stream);
    launch_quantize_int8_columns_transposed(qdo, kt, OCp, sdo, dout.at(size_t(t0) * OC), R, OC, true, dither,
                                            uint64_t(N) * OC + uint64_t(t0) * OC, stream);
    if (fused) continue;
    gemm_s8(handle, OCp, IC, kt, qdo, kt, qx, kt, wacc, OCp);
    quantized_epilogue(TensorOut(dweight), wacc, OCp, {sx, false}, {sdo, false}, nullptr, IC, OC, true, stream);
  }
  if (fused)  // dweight (IC, OC) += sum over tiles of qx_tile^T (IC, k) @ qd_tile (k, OC), both stored transposed
    gemm_s8_scaled(TensorOut(dweight), OC, {qxt, k, size_t(IC) * k, sxt, IC}, {qdt, k, size_t(OCp) * k, sdt, OC},
                   nullptr, IC, OC, k, tiles, quant_padded(N - (tiles - 1) * kInt8WeightGradientTile), true, stream);
  if (dbias) launch_column_sum(dbias, dout, N, OC, s.take<float>(column_sum_scratch_bytes(N, OC) / 4), stream);
}

// --- fp8 ---

size_t fp8_weight_copy_bytes(int IC, int OC) {
  return 2 * piece_bytes(size_t(quant_padded(IC)) * quant_padded(OC)) + piece_bytes(8) +
         piece_bytes(4 * size_t(kFp8AmaxBlocks));
}

Fp8WeightCopy fp8_weight_copy_at(char* at, int IC, int OC) {
  const size_t q = piece_bytes(size_t(quant_padded(IC)) * quant_padded(OC));
  return {reinterpret_cast<uint8_t*>(at), reinterpret_cast<uint8_t*>(at + q), reinterpret_cast<float*>(at + 2 * q),
          reinterpret_cast<float*>(at + 2 * q + piece_bytes(8))};
}

void launch_fp8_weight_copy(Fp8WeightCopy copy, TensorIn weight, int IC, int OC, bool scaled, cudaStream_t stream) {
  const int ICp = quant_padded(IC), OCp = quant_padded(OC);
  launch_fp8_tensor_scale(copy.scale_inverse, copy.partial, weight, size_t(IC) * OC, Fp8Format::e4m3, false, scaled,
                          stream);
  launch_fp8_codes(copy.forward, ICp, OCp, weight, IC, OC, true, false, copy.scale_inverse, Fp8Format::e4m3, stream);
  launch_fp8_codes(copy.backward, OCp, ICp, weight, IC, OC, false, false, copy.scale_inverse, Fp8Format::e4m3, stream);
}

size_t matmul_fp8_forward_scratch_bytes(int N, int IC, int OC) {
  const size_t Np = size_t(quant_padded(N));
  return piece_bytes(Np * quant_padded(IC)) + piece_bytes(8) + piece_bytes(4 * size_t(kFp8AmaxBlocks)) +
         piece_bytes(4 * Np * quant_padded(OC));
}

void launch_matmul_forward_fp8(TensorOut out, TensorIn inp, Fp8WeightCopy weight, TensorIn bias, int N, int IC, int OC,
                               bool scaled, LtGemm* lt, void* scratch, size_t scratch_bytes, cudaStream_t stream) {
  EMBER_ASSERT(N > 0 && IC > 0 && OC > 0, "matmul_forward: N, IC and OC must be positive");
  EMBER_ASSERT(!bias.ptr || bias.bf16 == out.bf16, "matmul_forward: the bias must be stored as out is");
  const int Np = quant_padded(N), ICp = quant_padded(IC), OCp = quant_padded(OC);
  Carve s{static_cast<char*>(scratch), scratch_bytes};
  auto* qx = s.take<uint8_t>(size_t(Np) * ICp);
  auto* sx = s.take<float>(2);
  auto* partial = s.take<float>(kFp8AmaxBlocks);
  auto* acc = s.take<float>(size_t(Np) * OCp);
  // inp's bf16 values in E4M3 with one scale; out^T (OCp, Np) = Wq^T (OCp, ICp) @ qx^T (ICp, Np).
  launch_fp8_tensor_scale(sx, partial, inp, size_t(N) * IC, Fp8Format::e4m3, true, scaled, stream);
  launch_fp8_codes(qx, ICp, Np, inp, N, IC, false, true, sx, Fp8Format::e4m3, stream);
  launch_gemm_fp8(lt, OCp, Np, ICp, weight.forward, Fp8Format::e4m3, ICp, qx, Fp8Format::e4m3, ICp, acc, OCp, stream);
  quantized_epilogue(out, acc, OCp, {sx, true}, {weight.scale_inverse, true}, bias, N, OC, false, stream);
}

size_t matmul_fp8_backward_scratch_bytes(bool dbias, int N, int IC, int OC) {
  const size_t Np = size_t(quant_padded(N)), ICp = size_t(quant_padded(IC)), OCp = size_t(quant_padded(OC));
  return 2 * piece_bytes(Np * OCp) + piece_bytes(ICp * Np) + 2 * piece_bytes(8) +
         piece_bytes(4 * size_t(kFp8AmaxBlocks)) + piece_bytes(4 * Np * ICp) + piece_bytes(4 * ICp * OCp) +
         (dbias ? column_sum_scratch_bytes(N, OC) : 0);
}

void launch_matmul_backward_fp8(TensorOut dinp, float* dweight, float* dbias, TensorIn dout, TensorIn inp,
                                Fp8WeightCopy weight, int N, int IC, int OC, bool scaled, LtGemm* lt, void* scratch,
                                size_t scratch_bytes, cudaStream_t stream) {
  EMBER_ASSERT(N > 0 && IC > 0 && OC > 0, "matmul_backward: N, IC and OC must be positive");
  const int Np = quant_padded(N), ICp = quant_padded(IC), OCp = quant_padded(OC);
  Carve s{static_cast<char*>(scratch), scratch_bytes};
  auto* qd = s.take<uint8_t>(size_t(Np) * OCp);   // dout (Np, OCp), E5M2
  auto* qdt = s.take<uint8_t>(size_t(OCp) * Np);  // dout^T (OCp, Np)
  auto* qxt = s.take<uint8_t>(size_t(ICp) * Np);  // inp^T (ICp, Np), E4M3
  auto* sd = s.take<float>(2);
  auto* sx = s.take<float>(2);
  auto* partial = s.take<float>(kFp8AmaxBlocks);
  auto* acc = s.take<float>(size_t(Np) * ICp);
  auto* wacc = s.take<float>(size_t(ICp) * OCp);
  // dout's bf16 values in E5M2 with one scale; dinp^T (ICp, Np) = Wq (ICp, OCp) @ qd^T (OCp, Np).
  launch_fp8_tensor_scale(sd, partial, dout, size_t(N) * OC, Fp8Format::e5m2, true, scaled, stream);
  launch_fp8_codes(qd, OCp, Np, dout, N, OC, false, true, sd, Fp8Format::e5m2, stream);
  launch_gemm_fp8(lt, ICp, Np, OCp, weight.backward, Fp8Format::e4m3, OCp, qd, Fp8Format::e5m2, OCp, acc, ICp, stream);
  quantized_epilogue(dinp, acc, ICp, {sd, true}, {weight.scale_inverse, true}, nullptr, N, IC, false, stream);
  // dweight^T (OCp, ICp) += qd^T (OCp, Np) @ qx (Np, ICp): both operands transposed, tokens contiguous; inp quantized
  // again as the forward pass quantized it (the same values, scale and codes).
  launch_fp8_codes(qdt, Np, OCp, dout, N, OC, true, true, sd, Fp8Format::e5m2, stream);
  launch_fp8_tensor_scale(sx, partial, inp, size_t(N) * IC, Fp8Format::e4m3, true, scaled, stream);
  launch_fp8_codes(qxt, Np, ICp, inp, N, IC, true, true, sx, Fp8Format::e4m3, stream);
  launch_gemm_fp8(lt, OCp, ICp, Np, qdt, Fp8Format::e5m2, Np, qxt, Fp8Format::e4m3, Np, wacc, OCp, stream);
  quantized_epilogue(TensorOut(dweight), wacc, OCp, {sx, true}, {sd, true}, nullptr, IC, OC, true, stream);
  if (dbias) launch_column_sum(dbias, dout, N, OC, s.take<float>(column_sum_scratch_bytes(N, OC) / 4), stream);
}

}  // namespace cuda
}  // namespace ember
