// CUDA backend: the launchers of the tensor-core attention kernels (cuda_attention_tc.cuh), taken with matmul
// precision bf16 on sm_80 and newer for head sizes 16, 32 and 64.
#include <algorithm>

#include "core/dtype.h"
#include "core/error.h"
#include "cuda_check.h"
#include "cuda_common.cuh"
#include "cuda_ops.h"

// After cuda_common.cuh, which provides what the kernels header expects of its includer.
#include "cuda_attention_tc.cuh"

namespace ember::cuda {
namespace {

using namespace tc;  // its constants qualified all the same: the kernel model compiles every launcher into one
                     // translation unit, where cuda_attention.cu's own kTile and kForwardRows would be found first

void check_tc_shape(int B, int T, int C, int NH) {
  EMBER_ASSERT(attention_in_bf16(MatmulPrecision::bf16, C / NH), "attention: no tensor-core kernel for this head size");
  EMBER_ASSERT(ceil_div(size_t(T), tc::kRows) <= 65535u && size_t(B) * NH <= 0x7fffffffu,  // kRows < kForwardRows
               "attention: grid too large for this T or B * NH");
}

// What one head's causal attention visits, for the cost ledger, walked as the kernels walk it: the (block of kRows
// rows, tile of kTile) pairs staged, and the 16 x 16 blocks of scores the warps form in them (each block one 16 x 16
// x HS product per product of the pass).
struct CausalWork {
  double pairs = 0.0, blocks = 0.0;
};
// Forward and dQ: each block of query rows (of `warps` warps) with the key tiles from its first row's first key to
// its last row.
CausalWork query_block_work(int T, int warps, const AttentionSchedule& sch) {
  CausalWork w;
  for (int i0 = 0; i0 < T; i0 += 16 * warps)
    for (int j0 = attention_first_key(sch, i0) / tc::kTile * tc::kTile; j0 <= std::min(i0 + 16 * warps, T) - 1;
         j0 += tc::kTile) {
      w.pairs += 1.0;
      for (int warp = 0; warp < warps; ++warp)
        w.blocks += std::max(0, tc::visible_blocks_end(i0, j0, warp) -
                                    tc::visible_blocks_first(attention_first_key(sch, i0 + 16 * warp), j0));
    }
  return w;
}
// dK/dV: each block of key rows with the query tiles from its first row to its last row's last query.
CausalWork key_block_work(int T, const AttentionSchedule& sch) {
  CausalWork w;
  for (int j_first = 0; j_first < T; j_first += tc::kRows) {
    const int i_end = sch.window > 0 ? std::min(T, j_first + tc::kRows + sch.window) : T;
    for (int i0 = j_first; i0 < i_end; i0 += tc::kTile) {
      w.pairs += 1.0;
      for (int warp = 0; warp < tc::kWarps; ++warp)
        w.blocks +=
            std::max(0, tc::seen_blocks_end(j_first, i0, warp, sch.window) - tc::seen_blocks_first(j_first, i0, warp));
    }
  }
  return w;
}

template <int HS, typename StoreT>
void forward_tc(StoreT* out, float* lse, const StoreT* qkv, int B, int T, int C, int NH, const AttentionSchedule& sch,
                cudaStream_t stream) {
  const dim3 grid(unsigned(B * NH), ceil_div(size_t(T), tc::kForwardRows));
  auto* const kernel = attention_forward_tc_kernel<HS, StoreT>;  // one macro argument
  // Per head: the Q rows read once, a K and a V tile per pair (and the rotary table's rows for Q and K), out and lse
  // written; two products per score block.
  const CausalWork work = query_block_work(T, tc::kForwardWarps, sch);
  const double heads = double(B) * NH, s = sizeof(StoreT), tile = double(tc::kTile) * HS;
  const double rope = sch.rope_cos ? sizeof(float) * (double(T) * HS + tile * work.pairs) : 0.0;
  report_launch("attention_forward_tc", heads * (s * T * HS + 2.0 * s * tile * work.pairs + rope),
                heads * (s * T * HS + 4.0 * T), heads * work.blocks * 4.0 * 16 * 16 * HS, false, FlopUnit::bf16);
  EMBER_KERNEL_LAUNCH(kernel, grid, tc::kForwardWarps * kWarpSize, stream, out, lse, qkv, T, C, NH,
                      1.0f / sqrtf(float(HS)), sch);
  EMBER_CUDA_LAUNCH_CHECK();
}

template <int HS, typename StoreT, typename GradT, typename DoutT>
void backward_tc(GradT* dqkv, float* delta, const DoutT* dout, const StoreT* qkv, const StoreT* out, const float* lse,
                 int B, int T, int C, int NH, const AttentionSchedule& sch, cudaStream_t stream) {
  const dim3 grid(unsigned(B * NH), ceil_div(size_t(T), tc::kRows));
  const float scale = 1.0f / sqrtf(float(HS));
  auto* const dq_kernel = attention_backward_dq_tc_kernel<HS, StoreT, GradT, DoutT>;  // one macro argument each
  auto* const dkv_kernel = attention_backward_dkv_tc_kernel<HS, StoreT, GradT, DoutT>;
  // dQ, per head: Q, O and dO rows and lse read once, delta written; K and V tiles per pair; dQ written; three
  // products per score block. dK/dV: K and V rows once; Q, dO, lse and delta per pair; dK and dV written; four
  // products per score block. Under rope each rotated row (Q and K: the block's rows and each pair's tile) also reads
  // its row of the rotary table, and each gradient row carried back (dQ, dK) reads it again.
  const CausalWork qw = query_block_work(T, tc::kWarps, sch), kw = key_block_work(T, sch);
  const double heads = double(B) * NH, s = sizeof(StoreT), g = sizeof(GradT), d = sizeof(DoutT),
               tile = double(tc::kTile) * HS;
  const double rows = double(T) * HS, product = 2.0 * 16 * 16 * HS * heads;  // FLOPs of a block's product, all heads
  const double table = sch.rope_cos ? sizeof(float) : 0.0;  // bytes of the rotary table per rotated element
  report_launch("attention_backward_dq_tc",
                heads * (2.0 * s * rows + d * rows + 4.0 * T + 2.0 * s * tile * qw.pairs +
                         table * (2.0 * rows + tile * qw.pairs)),
                heads * (4.0 * T + g * rows), 3.0 * product * qw.blocks, false, FlopUnit::bf16);
  report_launch("attention_backward_dkv_tc",
                heads * (2.0 * s * rows + (s + d) * tile * kw.pairs + 8.0 * tc::kTile * kw.pairs +
                         table * (2.0 * rows + tile * kw.pairs)),
                heads * 2.0 * g * rows, 4.0 * product * kw.blocks, false, FlopUnit::bf16);
  EMBER_KERNEL_LAUNCH(dq_kernel, grid, tc::kWarps * kWarpSize, stream, dqkv, delta, dout, qkv, out, lse, T, C, NH,
                      scale, sch);
  EMBER_CUDA_LAUNCH_CHECK();
  EMBER_KERNEL_LAUNCH(dkv_kernel, grid, tc::kWarps * kWarpSize, stream, dqkv, delta, dout, qkv, lse, T, C, NH, scale,
                      sch);
  EMBER_CUDA_LAUNCH_CHECK();
}

template <typename StoreT>
void forward_tc_hs(StoreT* out, float* lse, const StoreT* qkv, int B, int T, int C, int NH,
                   const AttentionSchedule& sch, cudaStream_t stream) {
  switch (C / NH) {
    case 16:
      forward_tc<16>(out, lse, qkv, B, T, C, NH, sch, stream);
      break;
    case 32:
      forward_tc<32>(out, lse, qkv, B, T, C, NH, sch, stream);
      break;
    default:
      forward_tc<64>(out, lse, qkv, B, T, C, NH, sch, stream);
      break;
  }
}

template <typename StoreT, typename GradT, typename DoutT>
void backward_tc_hs(GradT* dqkv, float* delta, const DoutT* dout, const StoreT* qkv, const StoreT* out,
                    const float* lse, int B, int T, int C, int NH, const AttentionSchedule& sch, cudaStream_t stream) {
  switch (C / NH) {
    case 16:
      backward_tc<16>(dqkv, delta, dout, qkv, out, lse, B, T, C, NH, sch, stream);
      break;
    case 32:
      backward_tc<32>(dqkv, delta, dout, qkv, out, lse, B, T, C, NH, sch, stream);
      break;
    default:
      backward_tc<64>(dqkv, delta, dout, qkv, out, lse, B, T, C, NH, sch, stream);
      break;
  }
}

}  // namespace

void launch_attention_forward_tc(TensorOut out, float* lse, TensorIn qkv, int B, int T, int C, int NH,
                                 const AttentionSchedule& sch, cudaStream_t stream) {
  check_tc_shape(B, T, C, NH);
  EMBER_ASSERT(qkv.bf16 == out.bf16, "attention: qkv and out must be stored alike");
  if (out.bf16)
    forward_tc_hs(device_bf16(out), lse, device_bf16(qkv), B, T, C, NH, sch, stream);
  else
    forward_tc_hs(out.f32(), lse, qkv.f32(), B, T, C, NH, sch, stream);
}

void launch_attention_backward_tc(TensorOut dqkv, float* delta, TensorIn dout, TensorIn qkv, TensorIn out,
                                  const float* lse, int B, int T, int C, int NH, const AttentionSchedule& sch,
                                  cudaStream_t stream) {
  check_tc_shape(B, T, C, NH);
  EMBER_ASSERT(qkv.bf16 == out.bf16, "attention: qkv and out must be stored alike");
  EMBER_ASSERT(!dqkv.bf16 || qkv.bf16, "attention: a bf16-stored dqkv needs a bf16-stored qkv");
  EMBER_ASSERT(!dout.bf16 || qkv.bf16, "attention: a bf16-stored dout needs bf16-stored qkv and out");
  if (!out.bf16) {
    backward_tc_hs(dqkv.f32(), delta, dout.f32(), qkv.f32(), out.f32(), lse, B, T, C, NH, sch, stream);
    return;
  }
  // bf16 qkv and out, with dqkv and dout each in fp32 or bf16.
  auto with_dout = [&](auto* g) {
    if (dout.bf16)
      backward_tc_hs(g, delta, device_bf16(dout), device_bf16(qkv), device_bf16(out), lse, B, T, C, NH, sch, stream);
    else
      backward_tc_hs(g, delta, dout.f32(), device_bf16(qkv), device_bf16(out), lse, B, T, C, NH, sch, stream);
  };
  if (dqkv.bf16)
    with_dout(device_bf16(dqkv));
  else
    with_dout(dqkv.f32());
}

}  // namespace ember::cuda
