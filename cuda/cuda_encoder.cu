// CUDA backend: token + position embedding, forward and backward.
// Backward is deterministic without atomics: every dwte/dwpe element is summed by one thread, in token order.
#include "core/error.h"
#include "cuda_check.h"
#include "cuda_common.cuh"
#include "cuda_ops.h"

namespace ember {
namespace cuda {
namespace {

__global__ void encoder_forward_kernel(float* out,          // (B, T, C)
                                       const int32_t* inp,  // (B, T)
                                       const float* wte,    // (V, C)
                                       const float* wpe,    // (maxT, C)
                                       int T, int C, size_t total) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += size_t(gridDim.x) * blockDim.x) {
    const size_t bt = i / C, c = i % C;
    out[i] = wte[size_t(inp[bt]) * C + c] + wpe[(bt % T) * C + c];
  }
}

// dwpe[t, c] += sum_b dout[b, t, c], b in order: one thread per (t, c).
__global__ void encoder_backward_wpe_kernel(float* dwpe,        // (maxT, C) +=
                                            const float* dout,  // (B, T, C)
                                            int B, int T, int C) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= size_t(T) * C) return;
  float acc = dwpe[i];
  for (int b = 0; b < B; ++b) acc += dout[size_t(b) * T * C + i];
  dwpe[i] = acc;
}

// dwte[v, c] += dout[bt, c] for every token bt with inp[bt] = v, in token order. Thread (bucket, c) owns the rows v
// with v % gridDim.y == bucket, so no two threads touch one element and no sort is needed; every thread of a block
// shares its bucket, so the skip branch is warp-uniform and the inp load is a broadcast.
__global__ void encoder_backward_wte_kernel(float* dwte,         // (V, C) +=
                                            const float* dout,   // (B, T, C)
                                            const int32_t* inp,  // (B, T)
                                            int BT, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  const int bucket = blockIdx.y, buckets = gridDim.y;
  if (c >= C) return;
  for (int bt = 0; bt < BT; ++bt) {
    const int v = inp[bt];
    if (v % buckets != bucket) continue;
    dwte[size_t(v) * C + c] += dout[size_t(bt) * C + c];
  }
}

// 64 vocabulary buckets: at C = 768 that is 6 x 64 = 384 blocks of 128 threads, ~3 per SM on an H100. Each thread
// still reads all B*T token ids (cached broadcasts), so more buckets would mostly add id reads.
constexpr int kWteBuckets = 64;
constexpr int kEncoderThreads = 128;

}  // namespace

void launch_encoder_forward(float* out, const int32_t* inp, const float* wte, const float* wpe, int B, int T, int C,
                            cudaStream_t stream) {
  EMBER_ASSERT(B > 0 && T > 0 && C > 0, "encoder_forward: B, T and C must be positive");
  const size_t total = size_t(B) * T * C;
  // Per element: a token id (one per row), a wte and a wpe value read, the sum written.
  report_launch("encoder_forward", 4.0 * (double(B) * T + 2.0 * double(total)), 4.0 * double(total), double(total));
  EMBER_KERNEL_LAUNCH(encoder_forward_kernel, elementwise_blocks(total), kElementwiseThreads, stream, out, inp, wte,
                      wpe, T, C, total);
  EMBER_CUDA_LAUNCH_CHECK();
}

void launch_encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp, int B, int T, int C,
                             cudaStream_t stream) {
  EMBER_ASSERT(B > 0 && T > 0 && C > 0, "encoder_backward: B, T and C must be positive");
  const double btc = double(B) * T * C, tc = double(T) * C;
  report_launch("encoder_backward_wpe", 4.0 * (btc + tc), 4.0 * tc, btc);
  EMBER_KERNEL_LAUNCH(encoder_backward_wpe_kernel, ceil_div(size_t(T) * C, kEncoderThreads), kEncoderThreads, stream,
                      dwpe, dout, B, T, C);
  EMBER_CUDA_LAUNCH_CHECK();
  const dim3 grid(ceil_div(size_t(C), kEncoderThreads), kWteBuckets);
  // Every warp walks all B*T token ids (one broadcast load each); the rows of its bucket read dout and read and
  // write dwte.
  const double warps = double(grid.x) * kWteBuckets * (kEncoderThreads / kWarpSize);
  report_launch("encoder_backward_wte", 4.0 * (warps * B * T + 2.0 * btc), 4.0 * btc, btc);
  EMBER_KERNEL_LAUNCH(encoder_backward_wte_kernel, grid, kEncoderThreads, stream, dwte, dout, inp, B * T, C);
  EMBER_CUDA_LAUNCH_CHECK();
}

}  // namespace cuda

}  // namespace ember
