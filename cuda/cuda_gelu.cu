// CUDA backend: tanh-approximate GELU, forward and backward, with the CPU's formulation (cuda_gelu.cuh). The input may
// be stored in fp32 or bf16, and so may the forward output (rounded from the fp32 result).
#include "cuda_check.h"
#include "cuda_common.cuh"
#include "cuda_gelu.cuh"
#include "cuda_ops.h"

namespace ember {
namespace cuda {
namespace {

template <typename OutT, typename InT>
__global__ void gelu_forward_kernel(OutT* out,       // (n)
                                    const InT* inp,  // (n)
                                    size_t n) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float x = load(&inp[i]);
    store(&out[i], x / (1.0f + gelu_exp(x)));
  }
}

template <typename InT>
__global__ void gelu_backward_kernel(float* dinp,        // (n) =, may alias dout
                                     const InT* inp,     // (n)
                                     const float* dout,  // (n)
                                     size_t n) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dinp[i] = dout[i] * gelu_grad(load(&inp[i]));
}

template <typename OutT, typename InT>
void gelu_forward(OutT* out, const InT* inp, size_t n, cudaStream_t stream) {
  auto* const kernel = gelu_forward_kernel<OutT, InT>;  // one macro argument
  report_launch("gelu_forward", double(sizeof(InT)) * double(n), double(sizeof(OutT)) * double(n), 15.0 * double(n));
  EMBER_KERNEL_LAUNCH(kernel, elementwise_blocks(n), kElementwiseThreads, stream, out, inp, n);
  EMBER_CUDA_LAUNCH_CHECK();
}

}  // namespace

void launch_gelu_forward(TensorOut out, TensorIn inp, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (out.bf16 && inp.bf16)
    gelu_forward(device_bf16(out), device_bf16(inp), n, stream);
  else if (out.bf16)
    gelu_forward(device_bf16(out), inp.f32(), n, stream);
  else if (inp.bf16)
    gelu_forward(out.f32(), device_bf16(inp), n, stream);
  else
    gelu_forward(out.f32(), inp.f32(), n, stream);
}

void launch_gelu_backward(float* dinp, TensorIn inp, const float* dout, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  // inp and dout read, dinp written.
  report_launch("gelu_backward", (inp.bf16 ? 2.0 : 4.0) * double(n) + 4.0 * double(n), 4.0 * double(n),
                25.0 * double(n));
  if (inp.bf16)
    EMBER_KERNEL_LAUNCH(gelu_backward_kernel<__nv_bfloat16>, elementwise_blocks(n), kElementwiseThreads, stream, dinp,
                        device_bf16(inp), dout, n);
  else
    EMBER_KERNEL_LAUNCH(gelu_backward_kernel<float>, elementwise_blocks(n), kElementwiseThreads, stream, dinp,
                        inp.f32(), dout, n);
  EMBER_CUDA_LAUNCH_CHECK();
}

}  // namespace cuda

}  // namespace ember
