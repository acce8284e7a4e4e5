// CUDA backend: the launchers of the int8 and fp8 quantization kernels (cuda_quant.cuh). The input may be stored in
// fp32 or bf16.
#include <algorithm>

#include "core/error.h"
#include "cuda_check.h"
#include "cuda_common.cuh"
#include "cuda_ops.h"
#include "cuda_quant.cuh"

namespace ember {
namespace cuda {

void launch_quantize_int8_rows(int8_t* q, int ldq, int qrows, float* scales, TensorIn x, int rows, int cols,
                               bool round_bf16, const DitherKey* dither, cudaStream_t stream) {
  if (qrows == 0 || cols == 0) return;
  EMBER_ASSERT(ldq >= cols && qrows >= rows, "quantize_int8_rows: q must hold x's rows of cols values");
  const size_t n = size_t(rows) * size_t(cols), in_bytes = x.bf16 ? 2 : 4;
  // One pass over x where a row fits the threads' registers, else two (its row's largest magnitude, then the
  // values); q and the scales written; a Philox block (about 100 integer operations) per dithered value.
  const double passes = cols <= kQuantRowValues * kQuantThreads ? 1.0 : 2.0;
  report_launch("quantize_int8_rows", passes * double(in_bytes) * double(n), double(qrows) * ldq + 4.0 * rows,
                (dither ? 110.0 : 4.0) * double(n));
  const DitherKey key = dither ? *dither : DitherKey{};
  if (x.bf16 && dither)
    EMBER_KERNEL_LAUNCH((quantize_int8_rows_kernel<__nv_bfloat16, true>), unsigned(qrows), kQuantThreads, stream, q,
                        ldq, scales, device_bf16(x), rows, cols, round_bf16, key);
  else if (x.bf16)
    EMBER_KERNEL_LAUNCH((quantize_int8_rows_kernel<__nv_bfloat16, false>), unsigned(qrows), kQuantThreads, stream, q,
                        ldq, scales, device_bf16(x), rows, cols, round_bf16, key);
  else if (dither)
    EMBER_KERNEL_LAUNCH((quantize_int8_rows_kernel<float, true>), unsigned(qrows), kQuantThreads, stream, q, ldq,
                        scales, x.f32(), rows, cols, round_bf16, key);
  else
    EMBER_KERNEL_LAUNCH((quantize_int8_rows_kernel<float, false>), unsigned(qrows), kQuantThreads, stream, q, ldq,
                        scales, x.f32(), rows, cols, round_bf16, key);
  EMBER_CUDA_LAUNCH_CHECK();
}

void launch_quantize_int8_columns_transposed(int8_t* q, int ldq, int qrows, float* scales, TensorIn x, int rows,
                                             int cols, bool round_bf16, const DitherKey* dither, uint64_t first,
                                             cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  EMBER_ASSERT(ldq >= rows && qrows >= cols,
               "quantize_int8_columns_transposed: q must hold x's columns of rows values");
  const size_t n = size_t(rows) * size_t(cols), in_bytes = x.bf16 ? 2 : 4;
  const double passes = ldq <= kQuantLanes * kQuantHeld ? 1.0 : 2.0;  // x held in registers, or read twice
  report_launch("quantize_int8_columns_transposed", passes * double(in_bytes) * double(n),
                double(qrows) * ldq + 4.0 * cols, (dither ? 110.0 : 4.0) * double(n));
  const DitherKey key = dither ? *dither : DitherKey{};
  const unsigned grid = unsigned(ceil_div(size_t(qrows), kQuantColumns));
  const dim3 block(kQuantColumns, kQuantLanes);
  if (x.bf16 && dither)
    EMBER_KERNEL_LAUNCH((quantize_int8_columns_transposed_kernel<__nv_bfloat16, true>), grid, block, stream, q, ldq,
                        qrows, scales, device_bf16(x), rows, cols, round_bf16, key, first);
  else if (x.bf16)
    EMBER_KERNEL_LAUNCH((quantize_int8_columns_transposed_kernel<__nv_bfloat16, false>), grid, block, stream, q, ldq,
                        qrows, scales, device_bf16(x), rows, cols, round_bf16, key, first);
  else if (dither)
    EMBER_KERNEL_LAUNCH((quantize_int8_columns_transposed_kernel<float, true>), grid, block, stream, q, ldq, qrows,
                        scales, x.f32(), rows, cols, round_bf16, key, first);
  else
    EMBER_KERNEL_LAUNCH((quantize_int8_columns_transposed_kernel<float, false>), grid, block, stream, q, ldq, qrows,
                        scales, x.f32(), rows, cols, round_bf16, key, first);
  EMBER_CUDA_LAUNCH_CHECK();
}

void launch_fp8_tensor_scale(float* scale_inverse, float* partial, TensorIn x, size_t n, Fp8Format f, bool round_bf16,
                             bool scaled, cudaStream_t stream) {
  const double in_bytes = x.bf16 ? 2.0 : 4.0;
  const unsigned blocks = std::max(1u, std::min<unsigned>(kFp8AmaxBlocks, elementwise_blocks(n)));
  report_launch("fp8_amax", in_bytes * double(n), 4.0 * blocks, double(n));
  if (x.bf16)
    EMBER_KERNEL_LAUNCH(amax_partial_kernel<__nv_bfloat16>, blocks, kQuantThreads, stream, partial, device_bf16(x), n,
                        round_bf16);
  else
    EMBER_KERNEL_LAUNCH(amax_partial_kernel<float>, blocks, kQuantThreads, stream, partial, x.f32(), n, round_bf16);
  EMBER_CUDA_LAUNCH_CHECK();
  report_launch("fp8_scale", 4.0 * blocks, 8.0, double(blocks));
  EMBER_KERNEL_LAUNCH(fp8_scale_kernel, 1, kQuantThreads, stream, scale_inverse, partial, blocks, fp8_max_finite(f),
                      scaled);
  EMBER_CUDA_LAUNCH_CHECK();
}

void launch_quantize_fp8(uint8_t* q, float* scale_inverse, float* partial, TensorIn x, size_t n, Fp8Format f,
                         cudaStream_t stream) {
  if (n == 0) return;
  launch_fp8_tensor_scale(scale_inverse, partial, x, n, f, false, true, stream);
  const double in_bytes = x.bf16 ? 2.0 : 4.0;
  report_launch("quantize_fp8", in_bytes * double(n), double(n), 2.0 * double(n));
  if (x.bf16)
    EMBER_KERNEL_LAUNCH(quantize_fp8_kernel<__nv_bfloat16>, elementwise_blocks(n), kElementwiseThreads, stream, q,
                        device_bf16(x), n, scale_inverse, f);
  else
    EMBER_KERNEL_LAUNCH(quantize_fp8_kernel<float>, elementwise_blocks(n), kElementwiseThreads, stream, q, x.f32(), n,
                        scale_inverse, f);
  EMBER_CUDA_LAUNCH_CHECK();
}

void launch_fp8_codes(uint8_t* q, int ldq, int qrows, TensorIn x, int rows, int cols, bool transposed, bool round_bf16,
                      const float* scale_inverse, Fp8Format f, cudaStream_t stream) {
  EMBER_ASSERT(ldq >= (transposed ? rows : cols) && qrows >= (transposed ? cols : rows),
               "fp8_codes: q must hold x's values in its layout");
  if (qrows == 0 || ldq == 0) return;
  const size_t n = size_t(rows) * size_t(cols);
  report_launch(transposed ? "fp8_codes_transposed" : "fp8_codes", (x.bf16 ? 2.0 : 4.0) * double(n),
                double(qrows) * ldq, 2.0 * double(n));
  const dim3 grid(ceil_div(size_t(ldq), kQuantColumns), ceil_div(size_t(qrows), kQuantColumns)),
      block(kQuantColumns, kQuantLanes);
  EMBER_ASSERT(grid.y <= 65535u, "fp8_codes: too many rows");
  if (x.bf16)
    EMBER_KERNEL_LAUNCH(fp8_codes_kernel<__nv_bfloat16>, grid, block, stream, q, ldq, qrows, device_bf16(x), rows, cols,
                        transposed, round_bf16, scale_inverse, f);
  else
    EMBER_KERNEL_LAUNCH(fp8_codes_kernel<float>, grid, block, stream, q, ldq, qrows, x.f32(), rows, cols, transposed,
                        round_bf16, scale_inverse, f);
  EMBER_CUDA_LAUNCH_CHECK();
}

}  // namespace cuda
}  // namespace ember
