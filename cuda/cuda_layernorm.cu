// CUDA backend: layernorm over the last dim (eps 1e-5, biased variance), forward and backward, and the forward fused
// with the residual add before it. The forward output may be stored in fp32 or bf16 (rounded from the fp32 result).
// One warp per row for the row-wise parts; dweight/dbias are column sums over rows in a fixed order (no atomics).
#include <type_traits>

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
// b is fp32 or bf16 (widened).
template <typename OutT, typename BT>
__global__ void residual_layernorm_forward_kernel(float* residual,      // (N, C)
                                                  OutT* out,            // (N, C)
                                                  float* mean,          // (N)
                                                  float* rstd,          // (N)
                                                  const float* a,       // (N, C)
                                                  const BT* b,          // (N, C)
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
    const float v = a[base + c] + load(&b[base + c]);
    x[c] = v;
    sum += v;
  }
  layernorm_warp_row(out + base, &mean[row], &rstd[row], x, weight, bias, sum, C, lane);
}

// The backward in one pass over dout and inp, a block of kRowsPerBlock warps per chunk of kChunkRows rows, taken in
// groups of kRowsPerBlock rows:
//   dinp: each warp one row of the group, dx += rs * (dn - mean(dn) - xhat * mean(dn * xhat)), dn = g * weight, xhat
//   the normalised input;
//   dweight and dbias: then the group's rows again by column (thread t owns columns t, t + blockDim.x, ...), while
//   they sit in this SM's L1, each thread adding g * xhat and g to its columns' sums in row order. The chunk's sums
//   go to partial[chunk, c] and partial[chunks + chunk, c]; layernorm_backward_params_finish_kernel adds the chunks.
// Fixed orders throughout: deterministic. dout and inp leave DRAM once for both results. dout is fp32 or bf16 (read
// widened: the sums are fp32 either way).
constexpr int kChunkRows = 8 * kRowsPerBlock;  // 64: 256 chunks at N = 16384, two blocks per SM on an H100
constexpr int kBackwardThreads = kRowsPerBlock * kWarpSize;
constexpr int kMaxColsPerThread = 32;  // the column sums' registers per thread: C up to 8192
int param_chunks(int N) { return int(ceil_div(size_t(N), kChunkRows)); }

template <typename DoutT>
__global__ void __launch_bounds__(kBackwardThreads) layernorm_backward_kernel(float* dinp,          // (N, C) +=
                                                                              float* partial,       // (2 chunks, C) out
                                                                              const DoutT* dout,    // (N, C)
                                                                              const float* inp,     // (N, C)
                                                                              const float* weight,  // (C)
                                                                              const float* mean,    // (N)
                                                                              const float* rstd,    // (N)
                                                                              int N, int C) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int r0 = blockIdx.x * kChunkRows, r1 = min(r0 + kChunkRows, N);
  float dw[kMaxColsPerThread] = {}, db[kMaxColsPerThread] = {};
  for (int g0 = r0; g0 < r1; g0 += kRowsPerBlock) {
    const int row = g0 + warp;
    if (row < r1) {  // warp-uniform
      const DoutT* g = dout + size_t(row) * C;
      const float* x = inp + size_t(row) * C;
      const float m = mean[row], rs = rstd[row];
      float dn_sum = 0.0f, dn_xhat_sum = 0.0f;
      for (int c = lane; c < C; c += kWarpSize) {
        const float dn = load(&g[c]) * weight[c];
        dn_sum += dn;
        dn_xhat_sum += dn * (x[c] - m) * rs;
      }
      const float dn_mean = warp_sum(dn_sum) / float(C), dn_xhat_mean = warp_sum(dn_xhat_sum) / float(C);
      float* dx = dinp + size_t(row) * C;
      for (int c = lane; c < C; c += kWarpSize) {
        const float xhat = (x[c] - m) * rs;
        dx[c] += (load(&g[c]) * weight[c] - dn_mean - xhat * dn_xhat_mean) * rs;
      }
    }
    for (int r = g0; r < min(g0 + kRowsPerBlock, r1); ++r) {
      const float m = mean[r], rs = rstd[r];
#pragma unroll
      for (int k = 0; k < kMaxColsPerThread; ++k) {
        const int c = threadIdx.x + k * kBackwardThreads;
        if (c < C) {
          const size_t i = size_t(r) * C + c;
          const float g = load(&dout[i]);
          dw[k] += g * (inp[i] - m) * rs;
          db[k] += g;
        }
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kMaxColsPerThread; ++k) {
    const int c = threadIdx.x + k * kBackwardThreads;
    if (c < C) {
      partial[size_t(blockIdx.x) * C + c] = dw[k];
      partial[size_t(gridDim.x + blockIdx.x) * C + c] = db[k];
    }
  }
}

// dweight[c] += the chunks' dweight sums, dbias[c] += theirs: a column-sum block of cuda_common.cuh per kColTile
// columns, row lane y adding chunks y, y + kRowLanes, ... in order, then the lanes in order.
__global__ void layernorm_backward_params_finish_kernel(float* dweight,        // (C) +=
                                                        float* dbias,          // (C) +=
                                                        const float* partial,  // (2 chunks, C)
                                                        int chunks, int C) {
  __shared__ float dw_part[kRowLanes][kColTile];
  __shared__ float db_part[kRowLanes][kColTile];
  const int c = blockIdx.x * kColTile + threadIdx.x;
  float sw = 0.0f, sb = 0.0f;
  if (c < C)
    for (int y = threadIdx.y; y < chunks; y += kRowLanes) {
      sw += partial[size_t(y) * C + c];
      sb += partial[size_t(chunks + y) * C + c];
    }
  dw_part[threadIdx.y][threadIdx.x] = sw;
  db_part[threadIdx.y][threadIdx.x] = sb;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float tw = 0.0f, tb = 0.0f;
    for (int y = 0; y < kRowLanes; ++y) {
      tw += dw_part[y][threadIdx.x];
      tb += db_part[y][threadIdx.x];
    }
    dweight[c] += tw;
    dbias[c] += tb;
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
                                       TensorIn b, const float* weight, const float* bias, int N, int C,
                                       cudaStream_t stream) {
  EMBER_ASSERT(N > 0 && C > 0, "residual_layernorm_forward: N and C must be positive");
  const unsigned blocks = ceil_div(size_t(N), kRowsPerBlock);
  // a and b read, the residual written (and read back from L1), out written, mean and rstd per row.
  const double nc = double(N) * C;
  report_launch("residual_layernorm_forward", 4.0 * nc + (b.bf16 ? 2.0 : 4.0) * nc + 8.0 * C,
                4.0 * nc + (out.bf16 ? 2.0 * nc : 4.0 * nc) + 8.0 * N, 9.0 * nc);
  auto run = [&](auto* o, const auto* bb) {
    using O = std::remove_cv_t<std::remove_pointer_t<decltype(o)>>;
    using B = std::remove_cv_t<std::remove_pointer_t<decltype(bb)>>;
    auto* const kernel = residual_layernorm_forward_kernel<O, B>;  // one macro argument
    EMBER_KERNEL_LAUNCH(kernel, blocks, kRowsPerBlock * kWarpSize, stream, residual, o, mean, rstd, a, bb, weight, bias,
                        N, C);
  };
  if (out.bf16 && b.bf16)
    run(device_bf16(out), device_bf16(b));
  else if (out.bf16)
    run(device_bf16(out), b.f32());
  else if (b.bf16)
    run(out.f32(), device_bf16(b));
  else
    run(out.f32(), b.f32());
  EMBER_CUDA_LAUNCH_CHECK();
}

void launch_layernorm_backward(float* dinp, float* dweight, float* dbias, TensorIn dout, const float* inp,
                               const float* weight, const float* mean, const float* rstd, int N, int C, float* partial,
                               cudaStream_t stream) {
  EMBER_ASSERT(N > 0 && C > 0, "layernorm_backward: N and C must be positive");
  EMBER_ASSERT(C <= kMaxColsPerThread * kBackwardThreads, "layernorm_backward: C above 8192 is not supported");
  // dout, inp and dinp (+=) read once per row (the warp's second pass and the column pass from L1), weight, mean and
  // rstd; dinp and the chunks' partial sums written. Then the partials read and dweight and dbias (+=) read and
  // written.
  const double nc = double(N) * C, dout_size = dout.bf16 ? 2.0 : 4.0;
  const unsigned chunks = unsigned(param_chunks(N));
  const double partials = 2.0 * chunks * C;
  report_launch("layernorm_backward", dout_size * nc + 4.0 * (2.0 * nc + C + 2.0 * N), 4.0 * (nc + partials),
                17.0 * nc);
  report_launch("layernorm_backward_params_finish", 4.0 * (partials + 2.0 * C), 8.0 * C, partials);
  if (dout.bf16)
    EMBER_KERNEL_LAUNCH(layernorm_backward_kernel<__nv_bfloat16>, chunks, kBackwardThreads, stream, dinp, partial,
                        device_bf16(dout), inp, weight, mean, rstd, N, C);
  else
    EMBER_KERNEL_LAUNCH(layernorm_backward_kernel<float>, chunks, kBackwardThreads, stream, dinp, partial, dout.f32(),
                        inp, weight, mean, rstd, N, C);
  EMBER_CUDA_LAUNCH_CHECK();
  EMBER_KERNEL_LAUNCH(layernorm_backward_params_finish_kernel, ceil_div(size_t(C), kColTile), dim3(kColTile, kRowLanes),
                      stream, dweight, dbias, partial, int(chunks), C);
  EMBER_CUDA_LAUNCH_CHECK();
}

size_t layernorm_backward_scratch_floats(int N, int C) { return 2 * size_t(param_chunks(N)) * size_t(C); }

}  // namespace cuda

}  // namespace ember
