// CUDA backend: the plain elementwise ops (add, accumulate, scale, casts to and from bf16) as grid-stride loops.
// Each element is one independent fp32 operation (or rounding), so results equal the CPU's bit for bit.
#include "cuda_check.h"
#include "cuda_common.cuh"
#include "cuda_ops.h"

namespace ember {
namespace cuda {
namespace {

template <typename BT>
__global__ void add_kernel(float* out, const float* a, const BT* b, size_t n) {  // (n) each
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    out[i] = a[i] + load(&b[i]);
}

__global__ void accumulate_kernel(float* dst, const float* src, size_t n) {  // (n) each
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dst[i] += src[i];
}

__global__ void scale_kernel(float* x, float s, size_t n) {  // (n)
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) x[i] *= s;
}

__global__ void cast_to_bf16_kernel(__nv_bfloat16* out, const float* inp, size_t n) {  // (n) each
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16_rn(inp[i]);
}

__global__ void widen_bf16_kernel(float* out, const __nv_bfloat16* inp, size_t n) {  // (n) each
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    out[i] = __bfloat162float(inp[i]);
}

}  // namespace

void launch_add(float* out, const float* a, TensorIn b, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  report_launch("add", (b.bf16 ? 6.0 : 8.0) * double(n), 4.0 * double(n), double(n));
  if (b.bf16)
    EMBER_KERNEL_LAUNCH(add_kernel<__nv_bfloat16>, elementwise_blocks(n), kElementwiseThreads, stream, out, a,
                        device_bf16(b), n);
  else
    EMBER_KERNEL_LAUNCH(add_kernel<float>, elementwise_blocks(n), kElementwiseThreads, stream, out, a, b.f32(), n);
  EMBER_CUDA_LAUNCH_CHECK();
}

void launch_accumulate(float* dst, const float* src, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  report_launch("accumulate", 8.0 * double(n), 4.0 * double(n), double(n));
  EMBER_KERNEL_LAUNCH(accumulate_kernel, elementwise_blocks(n), kElementwiseThreads, stream, dst, src, n);
  EMBER_CUDA_LAUNCH_CHECK();
}

void launch_scale(float* x, float s, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  report_launch("scale", 4.0 * double(n), 4.0 * double(n), double(n));
  EMBER_KERNEL_LAUNCH(scale_kernel, elementwise_blocks(n), kElementwiseThreads, stream, x, s, n);
  EMBER_CUDA_LAUNCH_CHECK();
}

void launch_cast_to_bf16(BFloat16* out, const float* inp, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  report_launch("cast_to_bf16", 4.0 * double(n), 2.0 * double(n), 0.0);
  EMBER_KERNEL_LAUNCH(cast_to_bf16_kernel, elementwise_blocks(n), kElementwiseThreads, stream,
                      reinterpret_cast<__nv_bfloat16*>(out), inp, n);
  EMBER_CUDA_LAUNCH_CHECK();
}

void launch_widen_bf16(float* out, const BFloat16* inp, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  report_launch("widen_bf16", 2.0 * double(n), 4.0 * double(n), 0.0);
  EMBER_KERNEL_LAUNCH(widen_bf16_kernel, elementwise_blocks(n), kElementwiseThreads, stream, out,
                      reinterpret_cast<const __nv_bfloat16*>(inp), n);
  EMBER_CUDA_LAUNCH_CHECK();
}

}  // namespace cuda

}  // namespace ember
