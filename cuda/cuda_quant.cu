// CUDA backend: the launchers of the int8 and fp8 quantization kernels (cuda_quant.cuh). The input may be stored in
// fp32 or bf16.
#include <algorithm>

#include "cuda_check.h"
#include "cuda_common.cuh"
#include "cuda_ops.h"
#include "cuda_quant.cuh"

namespace ember {
namespace cuda {

void launch_quantize_int8_rows(int8_t* q, float* scales, TensorIn x, int rows, int cols, const DitherKey* dither,
                               cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  const size_t n = size_t(rows) * size_t(cols), in_bytes = x.bf16 ? 2 : 4;
  // Two passes over x (its row's largest magnitude, then the values), q and the scales written; a Philox block (about
  // 100 integer operations) per dithered value.
  report_launch("quantize_int8_rows", 2.0 * double(in_bytes) * double(n), double(n) + 4.0 * rows,
                (dither ? 110.0 : 4.0) * double(n));
  const DitherKey key = dither ? *dither : DitherKey{};
  if (x.bf16 && dither)
    EMBER_KERNEL_LAUNCH((quantize_int8_rows_kernel<__nv_bfloat16, true>), unsigned(rows), kQuantThreads, stream, q,
                        scales, device_bf16(x), cols, key);
  else if (x.bf16)
    EMBER_KERNEL_LAUNCH((quantize_int8_rows_kernel<__nv_bfloat16, false>), unsigned(rows), kQuantThreads, stream, q,
                        scales, device_bf16(x), cols, key);
  else if (dither)
    EMBER_KERNEL_LAUNCH((quantize_int8_rows_kernel<float, true>), unsigned(rows), kQuantThreads, stream, q, scales,
                        x.f32(), cols, key);
  else
    EMBER_KERNEL_LAUNCH((quantize_int8_rows_kernel<float, false>), unsigned(rows), kQuantThreads, stream, q, scales,
                        x.f32(), cols, key);
  EMBER_CUDA_LAUNCH_CHECK();
}

void launch_quantize_fp8(uint8_t* q, float* scale_inverse, float* partial, TensorIn x, size_t n, Fp8Format f,
                         cudaStream_t stream) {
  if (n == 0) return;
  const double in_bytes = x.bf16 ? 2.0 : 4.0;
  const unsigned blocks = std::min<unsigned>(kFp8AmaxBlocks, elementwise_blocks(n));
  report_launch("fp8_amax", in_bytes * double(n), 4.0 * blocks, double(n));
  if (x.bf16)
    EMBER_KERNEL_LAUNCH(amax_partial_kernel<__nv_bfloat16>, blocks, kQuantThreads, stream, partial, device_bf16(x), n);
  else
    EMBER_KERNEL_LAUNCH(amax_partial_kernel<float>, blocks, kQuantThreads, stream, partial, x.f32(), n);
  EMBER_CUDA_LAUNCH_CHECK();
  report_launch("fp8_scale", 4.0 * blocks, 8.0, double(blocks));
  EMBER_KERNEL_LAUNCH(fp8_scale_kernel, 1, kQuantThreads, stream, scale_inverse, partial, blocks, fp8_max_finite(f));
  EMBER_CUDA_LAUNCH_CHECK();
  report_launch("quantize_fp8", in_bytes * double(n), double(n), 2.0 * double(n));
  if (x.bf16)
    EMBER_KERNEL_LAUNCH(quantize_fp8_kernel<__nv_bfloat16>, elementwise_blocks(n), kElementwiseThreads, stream, q,
                        device_bf16(x), n, scale_inverse, f);
  else
    EMBER_KERNEL_LAUNCH(quantize_fp8_kernel<float>, elementwise_blocks(n), kElementwiseThreads, stream, q, x.f32(), n,
                        scale_inverse, f);
  EMBER_CUDA_LAUNCH_CHECK();
}

}  // namespace cuda
}  // namespace ember
