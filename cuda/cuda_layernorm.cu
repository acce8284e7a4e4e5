// CUDA backend: layernorm over the last dim (eps 1e-5, biased variance), forward and backward, and the forward fused
// with the residual add before it. The forward output may be stored in fp32 or bf16 (rounded from the fp32 result).
// One warp per row for the row-wise parts; dweight/dbias are column sums over rows in a fixed order (no atomics).
#include "core/error.h"
#include "cuda_check.h"
#include "cuda_common.cuh"
#include "cuda_ops.h"

namespace ember {
namespace cuda {
namespace {

constexpr float kLayerNormEps = 1e-5f;
// 8 warps (rows) per block of 256 threads: at N = 8192 rows that is 1024 blocks, ~8 per SM on an H100.
constexpr int kRowsPerBlock = 8;

// One warp normalises one row x whose lane-strided partial sum (elements lane, lane + 32, ...) the caller has taken,
// so that the fused residual kernel can sum while it adds. The order of every sum depends only on C, which makes the
// plain and the fused forward bitwise equal.
template <typename OutT>
__device__ inline void layernorm_warp_row(OutT* y,              // (C)
                                          float* mean,          // (1)
                                          float* rstd,          // (1)
                                          const float* x,       // (C)
                                          const float* weight,  // (C)
                                          const float* bias,    // (C)
                                          float lane_sum, int C, int lane) {
  const float m = warp_sum(lane_sum) / float(C);
  // Two passes (mean, then squared deviations), as on the CPU: E[x^2] - m^2 cancels badly for large means.
  float var = 0.0f;
  for (int c = lane; c < C; c += kWarpSize) var += (x[c] - m) * (x[c] - m);
  const float rs = 1.0f / sqrtf(warp_sum(var) / float(C) + kLayerNormEps);
  for (int c = lane; c < C; c += kWarpSize) store(&y[c], (x[c] - m) * rs * weight[c] + bias[c]);
  if (lane == 0) {
    *mean = m;
    *rstd = rs;
  }
}

template <typename OutT>
__global__ void layernorm_forward_kernel(OutT* out,            // (N, C)
                                         float* mean,          // (N)
                                         float* rstd,          // (N)
                                         const float* inp,     // (N, C)
                                         const float* weight,  // (C)
                                         const float* bias,    // (C)
                                         int N, int C) {
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (row >= N) return;  // whole warps exit together: no barrier in this kernel
  const float* x = inp + size_t(row) * C;
  float sum = 0.0f;
  for (int c = lane; c < C; c += kWarpSize) sum += x[c];
  layernorm_warp_row(out + size_t(row) * C, &mean[row], &rstd[row], x, weight, bias, sum, C, lane);
}

// residual = a + b, then the layernorm of residual, one warp per row. Each lane later reads back only the elements
// it wrote itself (same c), so no barrier is needed, and those reads come from L1/L2 rather than a second pass over
// DRAM. No __restrict__: residual may alias a or b (each element is read before it is written, by the same lane).
template <typename OutT>
__global__ void residual_layernorm_forward_kernel(float* residual,      // (N, C)
                                                  OutT* out,            // (N, C)
                                                  float* mean,          // (N)
                                                  float* rstd,          // (N)
                                                  const float* a,       // (N, C)
                                                  const float* b,       // (N, C)
                                                  const float* weight,  // (C)
                                                  const float* bias,    // (C)
                                                  int N, int C) {
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (row >= N) return;
  const size_t base = size_t(row) * C;
  float* x = residual + base;
  float sum = 0.0f;
  for (int c = lane; c < C; c += kWarpSize) {
    const float v = a[base + c] + b[base + c];
    x[c] = v;
    sum += v;
  }
  layernorm_warp_row(out + base, &mean[row], &rstd[row], x, weight, bias, sum, C, lane);
}

// dx += rs * (dn - mean(dn) - xhat * mean(dn * xhat)), dn = g * weight, xhat the normalised input.
__global__ void layernorm_backward_dinp_kernel(float* dinp,          // (N, C) +=
                                               const float* dout,    // (N, C)
                                               const float* inp,     // (N, C)
                                               const float* weight,  // (C)
                                               const float* mean,    // (N)
                                               const float* rstd,    // (N)
                                               int N, int C) {
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarpSize;
  if (row >= N) return;
  const float* g = dout + size_t(row) * C;
  const float* x = inp + size_t(row) * C;
  const float m = mean[row], rs = rstd[row];
  float dn_sum = 0.0f, dn_xhat_sum = 0.0f;
  for (int c = lane; c < C; c += kWarpSize) {
    const float dn = g[c] * weight[c];
    dn_sum += dn;
    dn_xhat_sum += dn * (x[c] - m) * rs;
  }
  const float dn_mean = warp_sum(dn_sum) / float(C), dn_xhat_mean = warp_sum(dn_xhat_sum) / float(C);
  float* dx = dinp + size_t(row) * C;
  for (int c = lane; c < C; c += kWarpSize) {
    const float xhat = (x[c] - m) * rs;
    dx[c] += (g[c] * weight[c] - dn_mean - xhat * dn_xhat_mean) * rs;
  }
}

// dweight[c] += sum_r g[r,c] xhat[r,c], dbias[c] += sum_r g[r,c] in two stages, so that the few columns of a
// layernorm (768 at GPT-2 124M: 24 column blocks) still spread over the GPU: chunks of kParamChunkRows rows, each a
// column-sum block of cuda_common.cuh writing its partial sums, then one pass adding the chunks in order. Fixed
// orders throughout: deterministic.
constexpr int kParamChunkRows = 256;
int param_chunks(int N) { return int(ceil_div(size_t(N), kParamChunkRows)); }

// partial[y, c] and partial[chunks + y, c]: the dweight and dbias sums over the rows of chunk y.
__global__ void layernorm_backward_params_partial_kernel(float* partial,     // (2 chunks, C)
                                                         const float* dout,  // (N, C)
                                                         const float* inp,   // (N, C)
                                                         const float* mean,  // (N)
                                                         const float* rstd,  // (N)
                                                         int N, int C) {
  __shared__ float dw_part[kRowLanes][kColTile];
  __shared__ float db_part[kRowLanes][kColTile];
  const int c = blockIdx.x * kColTile + threadIdx.x;
  const int r0 = blockIdx.y * kParamChunkRows, r1 = min(r0 + kParamChunkRows, N);
  float dw = 0.0f, db = 0.0f;
  if (c < C) {
    for (int r = r0 + threadIdx.y; r < r1; r += kRowLanes) {
      const size_t i = size_t(r) * C + c;
      const float g = dout[i];
      dw += g * (inp[i] - mean[r]) * rstd[r];
      db += g;
    }
  }
  dw_part[threadIdx.y][threadIdx.x] = dw;
  db_part[threadIdx.y][threadIdx.x] = db;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float sw = 0.0f, sb = 0.0f;
    for (int y = 0; y < kRowLanes; ++y) {
      sw += dw_part[y][threadIdx.x];
      sb += db_part[y][threadIdx.x];
    }
    partial[size_t(blockIdx.y) * C + c] = sw;
    partial[size_t(gridDim.y + blockIdx.y) * C + c] = sb;
  }
}

// dweight[c] += the chunks' dweight sums in order, dbias[c] += theirs.
__global__ void layernorm_backward_params_finish_kernel(float* dweight,        // (C) +=
                                                        float* dbias,          // (C) +=
                                                        const float* partial,  // (2 chunks, C)
                                                        int chunks, int C) {
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < C; c += gridDim.x * blockDim.x) {
    float sw = 0.0f, sb = 0.0f;
    for (int y = 0; y < chunks; ++y) {
      sw += partial[size_t(y) * C + c];
      sb += partial[size_t(chunks + y) * C + c];
    }
    dweight[c] += sw;
    dbias[c] += sb;
  }
}

}  // namespace

void launch_layernorm_forward(TensorOut out, float* mean, float* rstd, const float* inp, const float* weight,
                              const float* bias, int N, int C, cudaStream_t stream) {
  EMBER_ASSERT(N > 0 && C > 0, "layernorm_forward: N and C must be positive");
  const unsigned blocks = ceil_div(size_t(N), kRowsPerBlock);
  // A row's three passes come from L1 after the first: inp read once, out written, mean and rstd per row.
  const double nc = double(N) * C;
  report_launch("layernorm_forward", 4.0 * (nc + 2.0 * C), out.bf16 ? 2.0 * nc : 4.0 * nc + 8.0 * N, 8.0 * nc);
  if (out.bf16)
    EMBER_KERNEL_LAUNCH(layernorm_forward_kernel<__nv_bfloat16>, blocks, kRowsPerBlock * kWarpSize, stream,
                        device_bf16(out), mean, rstd, inp, weight, bias, N, C);
  else
    EMBER_KERNEL_LAUNCH(layernorm_forward_kernel<float>, blocks, kRowsPerBlock * kWarpSize, stream, out.f32(), mean,
                        rstd, inp, weight, bias, N, C);
  EMBER_CUDA_LAUNCH_CHECK();
}

void launch_residual_layernorm_forward(float* residual, TensorOut out, float* mean, float* rstd, const float* a,
                                       const float* b, const float* weight, const float* bias, int N, int C,
                                       cudaStream_t stream) {
  EMBER_ASSERT(N > 0 && C > 0, "residual_layernorm_forward: N and C must be positive");
  const unsigned blocks = ceil_div(size_t(N), kRowsPerBlock);
  // a and b read, the residual written (and read back from L1), out written, mean and rstd per row.
  const double nc = double(N) * C;
  report_launch("residual_layernorm_forward", 4.0 * (2.0 * nc + 2.0 * C),
                4.0 * nc + (out.bf16 ? 2.0 * nc : 4.0 * nc) + 8.0 * N, 9.0 * nc);
  if (out.bf16)
    EMBER_KERNEL_LAUNCH(residual_layernorm_forward_kernel<__nv_bfloat16>, blocks, kRowsPerBlock * kWarpSize, stream,
                        residual, device_bf16(out), mean, rstd, a, b, weight, bias, N, C);
  else
    EMBER_KERNEL_LAUNCH(residual_layernorm_forward_kernel<float>, blocks, kRowsPerBlock * kWarpSize, stream, residual,
                        out.f32(), mean, rstd, a, b, weight, bias, N, C);
  EMBER_CUDA_LAUNCH_CHECK();
}

void launch_layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                               const float* weight, const float* mean, const float* rstd, int N, int C, float* partial,
                               cudaStream_t stream) {
  EMBER_ASSERT(N > 0 && C > 0, "layernorm_backward: N and C must be positive");
  // dinp: dout, inp and dinp (+=) read once per row (the second pass from L1), dinp written.
  const double nc = double(N) * C;
  report_launch("layernorm_backward_dinp", 4.0 * (3.0 * nc + C + 2.0 * N), 4.0 * nc, 12.0 * nc);
  EMBER_KERNEL_LAUNCH(layernorm_backward_dinp_kernel, ceil_div(size_t(N), kRowsPerBlock), kRowsPerBlock * kWarpSize,
                      stream, dinp, dout, inp, weight, mean, rstd, N, C);
  EMBER_CUDA_LAUNCH_CHECK();
  // params: dout and inp read once, mean and rstd by every column block of each chunk, the chunks' partial sums
  // written; then the partials read and dweight and dbias (+=) read and written.
  const dim3 grid(ceil_div(size_t(C), kColTile), unsigned(param_chunks(N)));
  EMBER_ASSERT(grid.y <= 65535u, "layernorm_backward: too many rows");
  const double partials = 2.0 * grid.y * C;
  report_launch("layernorm_backward_params_partial", 4.0 * (2.0 * nc + 2.0 * N * grid.x), 4.0 * partials, 5.0 * nc);
  report_launch("layernorm_backward_params_finish", 4.0 * (partials + 2.0 * C), 8.0 * C, partials);
  EMBER_KERNEL_LAUNCH(layernorm_backward_params_partial_kernel, grid, dim3(kColTile, kRowLanes), stream, partial, dout,
                      inp, mean, rstd, N, C);
  EMBER_CUDA_LAUNCH_CHECK();
  EMBER_KERNEL_LAUNCH(layernorm_backward_params_finish_kernel, elementwise_blocks(size_t(C)), kElementwiseThreads,
                      stream, dweight, dbias, partial, int(grid.y), C);
  EMBER_CUDA_LAUNCH_CHECK();
}

size_t layernorm_backward_scratch_floats(int N, int C) { return 2 * size_t(param_chunks(N)) * size_t(C); }

}  // namespace cuda

}  // namespace ember
