// CUDA backend: the launchers of the tensor-core attention kernels (cuda_attention_tc.cuh), taken with matmul
// precision bf16 on sm_80 and newer for head sizes 16, 32 and 64.
#include "core/dtype.h"
#include "core/error.h"
#include "cuda_check.h"
#include "cuda_common.cuh"
#include "cuda_ops.h"

// After cuda_common.cuh, which provides what the kernels header expects of its includer.
#include "cuda_attention_tc.cuh"

namespace ember::cuda {
namespace {

using namespace tc;

void check_tc_shape(int B, int T, int C, int NH) {
  EMBER_ASSERT(attention_in_bf16(MatmulPrecision::bf16, C / NH), "attention: no tensor-core kernel for this head size");
  EMBER_ASSERT(ceil_div(size_t(T), kRows) <= 65535u && size_t(B) * NH <= 0x7fffffffu,
               "attention: grid too large for this T or B * NH");
}

// The tile pairs (query tile, key tile) one head's causal attention visits: kRows-row tiles, each query tile with the
// key tiles up to its own.
// Qualified: the kernel model compiles every launcher into one translation unit, where cuda_attention.cu's own kTile
// would be found first.
double causal_tile_pairs(int T) {
  const double nb = double(ceil_div(size_t(T), tc::kRows));
  return nb * (nb + 1.0) / 2.0;
}
// The pairs' products as whole tiles: on each diagonal tile the warps form 1 + 2 + 3 + 4 of the 16 blocks of 16 x 16
// (the others are masked, tc::visible_blocks), 10/16 of a tile.
double causal_tile_products(int T) {
  return causal_tile_pairs(T) - double(ceil_div(size_t(T), tc::kRows)) * (1.0 - 10.0 / 16.0);
}

template <int HS, typename StoreT>
void forward_tc(StoreT* out, float* lse, const StoreT* qkv, int B, int T, int C, int NH, cudaStream_t stream) {
  const dim3 grid(unsigned(B * NH), ceil_div(size_t(T), kRows));
  auto* const kernel = attention_forward_tc_kernel<HS, StoreT>;  // one macro argument
  // Per head: the Q rows read once, a K and a V tile per tile pair, out and lse written; two products per pair.
  const double heads = double(B) * NH, s = sizeof(StoreT), pairs = causal_tile_pairs(T), tile = double(tc::kTile) * HS;
  report_launch("attention_forward_tc", heads * (s * T * HS + 2.0 * s * tile * pairs), heads * (s * T * HS + 4.0 * T),
                heads * causal_tile_products(T) * 4.0 * tc::kRows * tile, false, true);
  EMBER_KERNEL_LAUNCH(kernel, grid, kWarps * kWarpSize, stream, out, lse, qkv, T, C, NH, 1.0f / sqrtf(float(HS)));
  EMBER_CUDA_LAUNCH_CHECK();
}

template <int HS, typename StoreT, typename GradT>
void backward_tc(GradT* dqkv, float* delta, const float* dout, const StoreT* qkv, const StoreT* out, const float* lse,
                 int B, int T, int C, int NH, cudaStream_t stream) {
  const dim3 grid(unsigned(B * NH), ceil_div(size_t(T), kRows));
  const float scale = 1.0f / sqrtf(float(HS));
  auto* const dq_kernel = attention_backward_dq_tc_kernel<HS, StoreT, GradT>;  // one macro argument each
  auto* const dkv_kernel = attention_backward_dkv_tc_kernel<HS, StoreT, GradT>;
  // dQ, per head: Q, O and dO (fp32) rows and lse read once, delta written; K and V tiles per pair; dQ written; three
  // products per pair. dK/dV: K and V rows once; Q, dO, lse and delta per pair; dK and dV written; four products per
  // pair.
  const double heads = double(B) * NH, s = sizeof(StoreT), g = sizeof(GradT), pairs = causal_tile_pairs(T),
               tile = double(tc::kTile) * HS;
  const double rows = double(T) * HS, flops = tc::kRows * tile * causal_tile_products(T) * heads;
  report_launch("attention_backward_dq_tc", heads * (2.0 * s * rows + 4.0 * rows + 4.0 * T + 2.0 * s * tile * pairs),
                heads * (4.0 * T + g * rows), 6.0 * flops, false, true);
  report_launch("attention_backward_dkv_tc",
                heads * (2.0 * s * rows + (s + 4.0) * tile * pairs + 8.0 * tc::kTile * pairs), heads * 2.0 * g * rows,
                8.0 * flops, false, true);
  EMBER_KERNEL_LAUNCH(dq_kernel, grid, kWarps * kWarpSize, stream, dqkv, delta, dout, qkv, out, lse, T, C, NH, scale);
  EMBER_CUDA_LAUNCH_CHECK();
  EMBER_KERNEL_LAUNCH(dkv_kernel, grid, kWarps * kWarpSize, stream, dqkv, delta, dout, qkv, lse, T, C, NH, scale);
  EMBER_CUDA_LAUNCH_CHECK();
}

template <typename StoreT>
void forward_tc_hs(StoreT* out, float* lse, const StoreT* qkv, int B, int T, int C, int NH, cudaStream_t stream) {
  switch (C / NH) {
    case 16:
      forward_tc<16>(out, lse, qkv, B, T, C, NH, stream);
      break;
    case 32:
      forward_tc<32>(out, lse, qkv, B, T, C, NH, stream);
      break;
    default:
      forward_tc<64>(out, lse, qkv, B, T, C, NH, stream);
      break;
  }
}

template <typename StoreT, typename GradT>
void backward_tc_hs(GradT* dqkv, float* delta, const float* dout, const StoreT* qkv, const StoreT* out,
                    const float* lse, int B, int T, int C, int NH, cudaStream_t stream) {
  switch (C / NH) {
    case 16:
      backward_tc<16>(dqkv, delta, dout, qkv, out, lse, B, T, C, NH, stream);
      break;
    case 32:
      backward_tc<32>(dqkv, delta, dout, qkv, out, lse, B, T, C, NH, stream);
      break;
    default:
      backward_tc<64>(dqkv, delta, dout, qkv, out, lse, B, T, C, NH, stream);
      break;
  }
}

}  // namespace

void launch_attention_forward_tc(TensorOut out, float* lse, TensorIn qkv, int B, int T, int C, int NH,
                                 cudaStream_t stream) {
  check_tc_shape(B, T, C, NH);
  EMBER_ASSERT(qkv.bf16 == out.bf16, "attention: qkv and out must be stored alike");
  if (out.bf16)
    forward_tc_hs(device_bf16(out), lse, device_bf16(qkv), B, T, C, NH, stream);
  else
    forward_tc_hs(out.f32(), lse, qkv.f32(), B, T, C, NH, stream);
}

void launch_attention_backward_tc(TensorOut dqkv, float* delta, const float* dout, TensorIn qkv, TensorIn out,
                                  const float* lse, int B, int T, int C, int NH, cudaStream_t stream) {
  check_tc_shape(B, T, C, NH);
  EMBER_ASSERT(qkv.bf16 == out.bf16, "attention: qkv and out must be stored alike");
  EMBER_ASSERT(!dqkv.bf16 || qkv.bf16, "attention: a bf16-stored dqkv needs a bf16-stored qkv");
  if (dqkv.bf16)
    backward_tc_hs(device_bf16(dqkv), delta, dout, device_bf16(qkv), device_bf16(out), lse, B, T, C, NH, stream);
  else if (out.bf16)
    backward_tc_hs(dqkv.f32(), delta, dout, device_bf16(qkv), device_bf16(out), lse, B, T, C, NH, stream);
  else
    backward_tc_hs(dqkv.f32(), delta, dout, qkv.f32(), out.f32(), lse, B, T, C, NH, stream);
}

}  // namespace ember::cuda
