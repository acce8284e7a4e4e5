// The tensor-core attention kernels (cuda/cuda_attention_tc.cuh) compiled for the CPU and run against a software
// model of the warp: 128 threads per block as std::threads, __syncthreads as a block barrier, __shfl_xor_sync and
// mma.sync m16n8k16 as warp-wide exchanges through memory, the instruction's fragments placed as the PTX ISA lays
// them out (see the header). Their results must agree with the CPU backend's attention within the bounds of
// attention_bf16_bounds.h, as on a GPU (tests/gpu/test_cuda_ops.cpp, CudaAttentionBf16). This checks the kernels'
// own indexing (staging, fragments, masks, tiles, the online softmax, which rows and columns each thread owns) on any
// machine with the CUDA headers; the hardware's behaviour is what the GPU test checks.
#define EMBER_TC_EMULATION 1
#define __shared__ static  // one copy per kernel instantiation, shared by the block's threads (blocks run in turn)
#define __launch_bounds__(...)

#include <gtest/gtest.h>

#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <cuda_bf16.h>

#include "attention_bf16_bounds.h"
#include "backend/backend.h"
#include "core/philox.h"
#include "test_support.h"

// --- the model of a thread block ---
struct ModelDim3 {
  unsigned x = 1, y = 1, z = 1;
};
thread_local ModelDim3 threadIdx, blockIdx;
ModelDim3 blockDim, gridDim;

namespace ember::cuda {

constexpr int kWarpSize = 32;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kBlockThreads = 128;  // the kernels' block: 4 warps
inline int min(int a, int b) { return a < b ? a : b; }

struct BlockModel {
  std::barrier<> block{kBlockThreads};
  std::unique_ptr<std::barrier<>> warp[kBlockThreads / kWarpSize];
  float shfl[kBlockThreads];
  uint32_t a[kBlockThreads][4], b[kBlockThreads][2];
  BlockModel() {
    for (auto& w : warp) w = std::make_unique<std::barrier<>>(kWarpSize);
  }
};
BlockModel* g_block = nullptr;
thread_local int tl_warp = 0, tl_lane = 0;

inline void warp_sync() { g_block->warp[tl_warp]->arrive_and_wait(); }

}  // namespace ember::cuda

inline void __syncthreads() { ember::cuda::g_block->block.arrive_and_wait(); }

inline float __shfl_xor_sync(unsigned, float v, int mask) {
  using namespace ember::cuda;
  const int base = tl_warp * kWarpSize;
  g_block->shfl[base + tl_lane] = v;
  warp_sync();
  const float r = g_block->shfl[base + (tl_lane ^ mask)];
  warp_sync();  // every lane has read before the slots are written again
  return r;
}

namespace ember::cuda {

template <typename T>
inline T warp_sum(T v) {
  for (int o = kWarpSize / 2; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

inline float bf16_lo(uint32_t u) { return std::bit_cast<float>(u << 16); }
inline float bf16_hi(uint32_t u) { return std::bit_cast<float>(u & 0xffff0000u); }

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: every lane posts its fragments, then each rebuilds A (16 x 16)
// and B (16 x 8) from all 32 and computes its four elements of D = A B + C. bf16 products are exact in fp32; the sum
// runs in k order in fp32.
inline void emulated_mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  const int base = tl_warp * kWarpSize;
  std::memcpy(g_block->a[base + tl_lane], a, sizeof(a));
  g_block->b[base + tl_lane][0] = b0, g_block->b[base + tl_lane][1] = b1;
  warp_sync();
  float A[16][16], B[16][8];
  for (int lane = 0; lane < kWarpSize; ++lane) {
    const int g = lane / 4, t = lane % 4;
    const uint32_t* ra = g_block->a[base + lane];
    const uint32_t* rb = g_block->b[base + lane];
    A[g][2 * t] = bf16_lo(ra[0]), A[g][2 * t + 1] = bf16_hi(ra[0]);
    A[g + 8][2 * t] = bf16_lo(ra[1]), A[g + 8][2 * t + 1] = bf16_hi(ra[1]);
    A[g][2 * t + 8] = bf16_lo(ra[2]), A[g][2 * t + 9] = bf16_hi(ra[2]);
    A[g + 8][2 * t + 8] = bf16_lo(ra[3]), A[g + 8][2 * t + 9] = bf16_hi(ra[3]);
    B[2 * t][g] = bf16_lo(rb[0]), B[2 * t + 1][g] = bf16_hi(rb[0]);
    B[2 * t + 8][g] = bf16_lo(rb[1]), B[2 * t + 9][g] = bf16_hi(rb[1]);
  }
  warp_sync();
  const int g = tl_lane / 4, t = tl_lane % 4;
  for (int e = 0; e < 4; ++e) {
    const int row = g + (e / 2) * 8, col = 2 * t + (e & 1);
    float acc = d[e];
    for (int k = 0; k < 16; ++k) acc += A[row][k] * B[k][col];
    d[e] = acc;
  }
}

}  // namespace ember::cuda

#include "cuda_attention_tc.cuh"

namespace ember {
namespace {

using Floats = std::vector<float>;

// Runs `kernel` over a (gx, gy) grid of 128-thread blocks, one block at a time.
template <typename Kernel>
void run_grid(unsigned gx, unsigned gy, Kernel kernel) {
  gridDim = {gx, gy, 1};
  blockDim = {unsigned(cuda::kBlockThreads), 1, 1};
  for (unsigned by = 0; by < gy; ++by)
    for (unsigned bx = 0; bx < gx; ++bx) {
      cuda::BlockModel block;
      cuda::g_block = &block;
      std::vector<std::thread> threads;
      for (int tid = 0; tid < cuda::kBlockThreads; ++tid)
        threads.emplace_back([&, tid] {
          threadIdx = {unsigned(tid), 1, 1};
          blockIdx = {bx, by, 1};
          cuda::tl_warp = tid / cuda::kWarpSize, cuda::tl_lane = tid % cuda::kWarpSize;
          kernel();
        });
      for (auto& t : threads) t.join();
      cuda::g_block = nullptr;
    }
}

template <int HS>
void model_attention(Floats& out, Floats& lse, Floats& dqkv, const Floats& qkv, const Floats& dout,
                     const Floats& out_ref, const Floats& lse_ref, int B, int T, int C, int NH) {
  using namespace cuda::tc;
  const unsigned gx = unsigned(B * NH), gy = unsigned((T + kRows - 1) / kRows);
  const float scale = 1.0f / std::sqrt(float(HS));
  Floats delta(size_t(B) * NH * T);
  run_grid(gx, gy, [&] { attention_forward_tc_kernel<HS>(out.data(), lse.data(), qkv.data(), T, C, NH, scale); });
  run_grid(gx, gy, [&] {
    attention_backward_dq_tc_kernel<HS>(dqkv.data(), delta.data(), dout.data(), qkv.data(), out_ref.data(),
                                        lse_ref.data(), T, C, NH, scale);
  });
  run_grid(gx, gy, [&] {
    attention_backward_dkv_tc_kernel<HS>(dqkv.data(), delta.data(), dout.data(), qkv.data(), lse_ref.data(), T, C, NH,
                                         scale);
  });
}

struct Shape {
  int B, T, C, NH;
};
class TensorCoreAttentionModel : public ::testing::TestWithParam<Shape> {};

// As CudaAttentionBf16 on a GPU: the CPU backend's fp32 attention on bf16-rounded inputs is the reference, the
// backward passes read its out and lse, and every element must lie within twice the rounding bound of P and dS
// plus the fp32 tolerance of the CUDA op tests (8 sqrt(K) eps, relative to the RMS and to the element).
TEST_P(TensorCoreAttentionModel, MatchesTheCpuWithinTheRoundingOfPAndDS) {
  const auto [B, T, C, NH] = GetParam();
  const int HS = C / NH;
  Philox rng(20240612, 0, uint32_t(T + HS), RNG_PURPOSE_TEST);
  auto normal = [&](size_t n) {
    Floats v(n);
    for (float& x : v) x = rng.normal();
    return test::rounded_to_bf16(v);
  };
  const Floats qkv = normal(size_t(B) * T * 3 * C), dout = normal(size_t(B) * T * C), dqkv0 = normal(qkv.size());
  auto cpu = make_cpu_backend();
  test::BackendArray<float> cx(*cpu, qkv), co(*cpu, Floats(dout.size())), cl(*cpu, Floats(size_t(B) * NH * T)),
      cg(*cpu, dout), cgx(*cpu, dqkv0);
  cpu->attention_forward(co.get(), cl.get(), cx.get(), B, T, C, NH);
  cpu->attention_backward(cgx.get(), cg.get(), cx.get(), co.get(), cl.get(), B, T, C, NH);
  const Floats out_ref = co.host(), lse_ref = cl.host(), dqkv_ref = cgx.host();

  Floats out(out_ref.size(), NAN), lse(lse_ref.size(), NAN), dqkv = dqkv0;  // NaN: an unwritten element fails
  switch (HS) {
    case 16: model_attention<16>(out, lse, dqkv, qkv, dout, out_ref, lse_ref, B, T, C, NH); break;
    case 32: model_attention<32>(out, lse, dqkv, qkv, dout, out_ref, lse_ref, B, T, C, NH); break;
    case 64: model_attention<64>(out, lse, dqkv, qkv, dout, out_ref, lse_ref, B, T, C, NH); break;
    default: FAIL() << "no tensor-core kernel for HS = " << HS;
  }

  const test::AttnBounds bd = test::attention_bf16_bounds(qkv, dout, B, T, C, NH);
  const double eps = std::ldexp(1.0, -23);
  auto check = [&](const char* what, const Floats& got, const Floats& want, const Floats* bound, double K) {
    double rms = 0.0;
    for (float x : want) rms += double(x) * x;
    rms = std::sqrt(rms / double(want.size()));
    const double r = 8.0 * std::sqrt(K) * eps;
    size_t bad = 0, worst = 0;
    double worst_ratio = 0.0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double allowed = r * rms + r * std::fabs(want[i]) + (bound ? 2.0 * (*bound)[i] : 0.0);
      const double ratio = std::fabs(double(got[i]) - double(want[i])) / allowed;
      if (!(ratio <= 1.0)) ++bad;
      if (!(ratio <= worst_ratio)) worst_ratio = ratio, worst = i;
    }
    if (std::getenv("EMBER_TEST_VERBOSE")) std::printf("  %-6s worst err/allowed = %.3g\n", what, worst_ratio);
    EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " out of bounds; worst at " << worst
                       << ": model " << got[worst] << ", cpu " << want[worst];
  };
  check("out", out, out_ref, &bd.out, double(T) * HS);
  check("lse", lse, lse_ref, nullptr, double(T) * HS);
  check("dqkv", dqkv, dqkv_ref, &bd.dqkv, 2.0 * T * HS);
}
// HS = 16 over three key tiles (the last partial), HS = 32 in one partial tile, HS = 64 over two tiles, and T = 1.
INSTANTIATE_TEST_SUITE_P(Shapes, TensorCoreAttentionModel,
                         ::testing::Values(Shape{1, 150, 48, 3}, Shape{2, 41, 64, 2}, Shape{1, 70, 128, 2},
                                           Shape{1, 1, 48, 3}),
                         [](const auto& info) {
                           const Shape& s = info.param;
                           return "B" + std::to_string(s.B) + "_T" + std::to_string(s.T) + "_C" +
                                  std::to_string(s.C) + "_NH" + std::to_string(s.NH);
                         });

}  // namespace
}  // namespace ember
