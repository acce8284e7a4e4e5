// CUDA backend: token + position embedding, forward and backward.
// Backward is deterministic without atomics: every dwte/dwpe element is summed by one thread, in token order; for
// dwte the token positions are sorted stably by id first (cuda_sort.cu), so that each thread walks only its token's.
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
    out[i] = wpe ? wte[size_t(inp[bt]) * C + c] + wpe[(bt % T) * C + c] : wte[size_t(inp[bt]) * C + c];
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

// positions[i] = i: the values the sort carries along with the token ids.
__global__ void iota_kernel(int32_t* positions, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) positions[i] = i;
}

// dwte[v, c] += dout[p, c] for every position p of token v, in token order, from the positions sorted stably by token
// id (ids[i] ascending, pos[i] ascending among equal ids). Block x is sorted index i and works only where a run of
// one id starts, one thread per column of its block y; so every element of dwte has one thread, whose sum runs in
// token order as the CPU's does (bitwise the same), and the work spreads over the distinct tokens and columns however
// many tokens there are. A run is read kUnroll positions at a time, their loads issued before the adds.
constexpr int kUnroll = 8;
__global__ void encoder_backward_wte_kernel(float* dwte,         // (V, C) +=
                                            const float* dout,   // (B, T, C)
                                            const int32_t* ids,  // (B T) token ids, sorted
                                            const int32_t* pos,  // (B T) their positions
                                            int BT, int C) {
  const int i = blockIdx.x;
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  const int v = ids[i];
  if (c >= C || (i > 0 && ids[i - 1] == v)) return;
  int end = i + 1;
  while (end < BT && ids[end] == v) ++end;
  float* te = dwte + size_t(v) * C + c;
  float acc = *te;
  for (int j = i; j < end; j += kUnroll) {
    float g[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) g[u] = j + u < end ? dout[size_t(pos[j + u]) * C + c] : 0.0f;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (j + u < end) acc += g[u];
  }
  *te = acc;
}

constexpr int kEncoderThreads = 128;

}  // namespace

void launch_encoder_forward(float* out, const int32_t* inp, const float* wte, const float* wpe, int B, int T, int C,
                            cudaStream_t stream) {
  EMBER_ASSERT(B > 0 && T > 0 && C > 0, "encoder_forward: B, T and C must be positive");
  const size_t total = size_t(B) * T * C;
  // Per element: a token id (one per row), a wte and a wpe value read, the sum written.
  report_launch("encoder_forward", 4.0 * (double(B) * T + (wpe ? 2.0 : 1.0) * double(total)), 4.0 * double(total),
                wpe ? double(total) : 0.0);
  EMBER_KERNEL_LAUNCH(encoder_forward_kernel, elementwise_blocks(total), kElementwiseThreads, stream, out, inp, wte,
                      wpe, T, C, total);
  EMBER_CUDA_LAUNCH_CHECK();
}

size_t encoder_backward_scratch_bytes(int BT) {
  return 3 * piece_bytes(sizeof(int32_t) * size_t(BT)) + piece_bytes(sort_pairs_temp_bytes(BT));
}

void launch_encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp, int B, int T, int C,
                             void* scratch, size_t scratch_bytes, cudaStream_t stream) {
  EMBER_ASSERT(B > 0 && T > 0 && C > 0, "encoder_backward: B, T and C must be positive");
  EMBER_ASSERT(size_t(B) * T <= 0x7fffffffu, "encoder_backward: too many tokens");
  const int BT = B * T;
  EMBER_ASSERT(scratch_bytes >= encoder_backward_scratch_bytes(BT), "encoder_backward: scratch too small");
  const double btc = double(BT) * C, tc = double(T) * C;
  if (dwpe) {  // null for a model without learned positions
    report_launch("encoder_backward_wpe", 4.0 * (btc + tc), 4.0 * tc, btc);
    EMBER_KERNEL_LAUNCH(encoder_backward_wpe_kernel, ceil_div(size_t(T) * C, kEncoderThreads), kEncoderThreads, stream,
                        dwpe, dout, B, T, C);
    EMBER_CUDA_LAUNCH_CHECK();
  }
  // The positions sorted stably by token id: ids, positions before and after, then the sort's working space.
  char* at = static_cast<char*>(scratch);
  const size_t piece = piece_bytes(sizeof(int32_t) * size_t(BT));
  auto* ids = reinterpret_cast<int32_t*>(at);
  auto* positions = reinterpret_cast<int32_t*>(at + piece);
  auto* sorted = reinterpret_cast<int32_t*>(at + 2 * piece);
  report_launch("iota", 0.0, 4.0 * BT, 0.0);
  EMBER_KERNEL_LAUNCH(iota_kernel, elementwise_blocks(size_t(BT)), kElementwiseThreads, stream, positions, BT);
  EMBER_CUDA_LAUNCH_CHECK();
  launch_sort_pairs(ids, sorted, inp, positions, BT, at + 3 * piece, scratch_bytes - 3 * piece, stream);
  // Per block two ids, and the run's starts their run's ids and positions (at most 16 bytes per block in all); dout's
  // rows and dwte's (each distinct token once, at most B T of them) read, dwte's written.
  const dim3 grid(unsigned(BT), ceil_div(size_t(C), kEncoderThreads));
  report_launch("encoder_backward_wte", 16.0 * BT * grid.y + 8.0 * btc, 4.0 * btc, btc);
  EMBER_KERNEL_LAUNCH(encoder_backward_wte_kernel, grid, kEncoderThreads, stream, dwte, dout, ids, sorted, BT, C);
  EMBER_CUDA_LAUNCH_CHECK();
}

}  // namespace cuda

}  // namespace ember
