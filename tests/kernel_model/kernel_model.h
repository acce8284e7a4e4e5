// A software model of CUDA execution that runs the CUDA backend's kernels, compiled as plain C++, on the CPU, so
// that their indexing, masking, synchronisation and reductions are checked on machines without a GPU.
//
// Include this header first in its translation unit, then the kernels (cuda/*.cu or cuda/*.cuh). It defines
// EMBER_KERNEL_MODEL, under which EMBER_KERNEL_LAUNCH (cuda_common.cuh) calls launch() below and
// EMBER_CUDA_LAUNCH_CHECK does nothing, and EMBER_TC_EMULATION, under which mma.sync, ldmatrix and cp.async are
// emulated_mma_bf16() and emulated_mma_s8(), emulated_ldmatrix_x4() and emulated_cp_async_16() with its commit and
// wait.
//
// The model: blocks run one after another; the threads of a block are fibers on the calling thread,
// switched only at __syncthreads and at warp-wide operations, so shared memory (`__shared__` becomes `static`) and
// the built-in variables need no locking and every run is deterministic. Each warp runs ahead of the later ones as
// far as the block's barriers let it, which turns a missing __syncthreads into a wrong result. __syncthreads waits for
// every thread of the block that has not returned; __shfl_sync, __shfl_xor_sync and mma.sync exchange values through
// memory among the live lanes of the warp, all of which must take part (as the full mask the kernels pass requires). A
// barrier that can never complete (some threads wait where the others never arrive) aborts with a message. mma.sync
// m16n8k16 (bf16 inputs, fp32 accumulation) places its fragments as the PTX ISA lays them out
// (cuda/cuda_attention_tc_tiles.cuh) and sums the exact bf16 products in k order in fp32, and m16n8k32 (int8,
// cuda/cuda_gemm_s8.cuh) sums exactly in int32; ldmatrix gathers the rows the lanes point at into the same fragments.
// cp.async is modelled at its two extremes at once: the destination turns to
// NaN when the copy is issued (as if the hardware wrote it at once, with garbage to catch a reader that still wanted
// the old contents) and receives the data only at the cp.async.wait_group that covers it (as if the hardware were as
// late as it may be), so a read between the two, by this thread or by one a missing barrier lets through, is wrong.
//
// What the model cannot check: timing, memory coalescing and bank conflicts, register limits, and whatever the
// hardware does differently from this reading of the programming guide and the PTX ISA. The gpu tests check those.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <ucontext.h>

#define EMBER_KERNEL_MODEL 1
#define EMBER_TC_EMULATION 1
#undef __shared__
#define __shared__ static  // one copy per kernel (instantiation), shared by the threads of the running block
#undef __launch_bounds__
#define __launch_bounds__(...)

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <tuple>
#include <vector>

// A rule of the hardware the model enforces: broken, it aborts with a message.
#define EMBER_MODEL_CHECK(cond, msg)                   \
  do {                                                 \
    if (!(cond)) {                                     \
      std::fprintf(stderr, "kernel model: %s\n", msg); \
      std::abort();                                    \
    }                                                  \
  } while (0)

// The built-in variables, set by the scheduler before it resumes each thread.
inline uint3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;

namespace ember::kernel_model {

// Count-only mode, for the cost ledger (launch_cost.h): kernel launches are counted instead of run, and the cuBLAS
// model does no arithmetic, so a whole GPT-2 step "runs" in moments on buffers that need not exist.
inline bool count_only = false;
inline long long launches_counted = 0;  // kernel launches, in count-only mode
inline long long gemms_counted = 0;     // cuBLAS model calls, in count-only mode

constexpr int kWarp = 32;
constexpr size_t kStackBytes = size_t(256) << 10;  // per thread; the attention kernels keep ~1 KB of arrays

struct Barrier {
  int first = 0, count = 0;  // its members: threads first .. first + count - 1 (the block, or one warp)
  int live = 0, arrived = 0;
};

// Switching between threads. On x86-64 a plain register switch (callee-saved registers and the stack pointer, as
// any coroutine library does); elsewhere ucontext, which also saves the signal mask with a system call per switch.
#if defined(__x86_64__)
#define EMBER_MODEL_ASM_SWITCH 1
// Saves the callee-saved registers on the current stack, stores the stack pointer in *save and resumes the context
// whose stack pointer is `to`. Local to each object file that includes this header (no .globl).
extern "C" void ember_kernel_model_switch(void** save, void* to);
asm(R"(
  .text
  .p2align 4
  .type ember_kernel_model_switch,@function
ember_kernel_model_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size ember_kernel_model_switch, .-ember_kernel_model_switch
)");
#endif

struct Fiber {
#ifdef EMBER_MODEL_ASM_SWITCH
  void* sp = nullptr;
#else
  ucontext_t ctx{};
#endif
  std::unique_ptr<char[]> stack;  // uninitialised: pages are touched only as the stack grows
  bool done = false;
  Barrier* waiting = nullptr;  // the barrier this thread waits at, or null when it can run
};

struct Scheduler {
#ifdef EMBER_MODEL_ASM_SWITCH
  void* main_sp = nullptr;
#else
  ucontext_t main{};
#endif
  std::vector<Fiber> fibers;  // grows to the largest block seen; stacks are reused
  int threads = 0, current = -1;
  Barrier block;
  std::vector<Barrier> warps;
  std::vector<uint64_t> slot;                // one shuffle value per thread
  std::vector<std::array<uint32_t, 6>> mma;  // one mma.sync operand set (a[4], b0, b1) per thread
  struct AsyncCopy {
    void* dst;
    const void* src;  // null: zero fill
    int group;        // -1 until committed
  };
  std::vector<std::vector<AsyncCopy>> copies;  // per thread: cp.async copies not yet waited for
  std::vector<int> groups;                     // per thread: cp.async groups committed
  std::function<void()> body;                  // the kernel with its arguments bound
};
inline Scheduler sched;

inline void to_scheduler(Fiber& me) {
#ifdef EMBER_MODEL_ASM_SWITCH
  ember_kernel_model_switch(&me.sp, sched.main_sp);
#else
  swapcontext(&me.ctx, &sched.main);
#endif
}
inline void to_fiber(Fiber& f) {
#ifdef EMBER_MODEL_ASM_SWITCH
  ember_kernel_model_switch(&sched.main_sp, f.sp);
#else
  swapcontext(&sched.main, &f.ctx);
#endif
}

inline int warp_of(int tid) { return tid / kWarp; }
inline int lane_of(int tid) { return tid % kWarp; }

inline void set_builtins(int tid) {
  threadIdx.x = unsigned(tid) % blockDim.x;
  threadIdx.y = unsigned(tid) / blockDim.x % blockDim.y;
  threadIdx.z = unsigned(tid) / (blockDim.x * blockDim.y);
}

// Releases everyone waiting at b once every live member has arrived.
inline void release_if_complete(Barrier& b) {
  if (b.arrived == 0 || b.arrived < b.live) return;
  b.arrived = 0;
  for (int t = b.first; t < b.first + b.count; ++t)
    if (sched.fibers[size_t(t)].waiting == &b) sched.fibers[size_t(t)].waiting = nullptr;
}

// The running thread arrives at b and, unless it is the last to, yields until the others have.
inline void arrive_and_wait(Barrier& b) {
  Fiber& me = sched.fibers[size_t(sched.current)];
  ++b.arrived;
  if (b.arrived == b.live) {
    release_if_complete(b);
    return;
  }
  me.waiting = &b;
  to_scheduler(me);
}

inline void fiber_main() {
  const int tid = sched.current;
  sched.body();
  Fiber& me = sched.fibers[size_t(tid)];
  me.done = true;
  // A returned thread no longer counts at the block's barrier or its warp's.
  --sched.block.live;
  release_if_complete(sched.block);
  Barrier& w = sched.warps[size_t(warp_of(tid))];
  --w.live;
  release_if_complete(w);
  to_scheduler(me);  // never resumed
  std::abort();
}

// A fresh stack for thread t that starts in fiber_main when first switched to.
inline void start_fiber(Fiber& f) {
  if (!f.stack) f.stack.reset(new char[kStackBytes]);
  f.done = false;
  f.waiting = nullptr;
#ifdef EMBER_MODEL_ASM_SWITCH
  // What ember_kernel_model_switch pops: six registers, then the return address, fiber_main, entered with the stack
  // as a call leaves it (16-byte aligned before the call, so 8 past alignment inside).
  auto top = reinterpret_cast<uintptr_t>(f.stack.get() + kStackBytes) & ~uintptr_t(15);
  auto* frame = reinterpret_cast<void**>(top - 16);
  frame[0] = reinterpret_cast<void*>(&fiber_main);
  frame[1] = nullptr;
  for (int r = 1; r <= 6; ++r) frame[-r] = nullptr;
  f.sp = frame - 6;
#else
  getcontext(&f.ctx);
  f.ctx.uc_stack.ss_sp = f.stack.get();
  f.ctx.uc_stack.ss_size = kStackBytes;
  f.ctx.uc_link = nullptr;
  makecontext(&f.ctx, fiber_main, 0);
#endif
}

inline void run_block(int threads) {
  if (sched.fibers.size() < size_t(threads)) sched.fibers.resize(size_t(threads));
  sched.threads = threads;
  sched.block = Barrier{0, threads, threads, 0};
  sched.warps.assign(size_t((threads + kWarp - 1) / kWarp), Barrier{});
  for (int w = 0; w * kWarp < threads; ++w) {
    const int n = std::min(kWarp, threads - w * kWarp);
    sched.warps[size_t(w)] = Barrier{w * kWarp, n, n, 0};
  }
  sched.slot.assign(size_t(threads), 0);
  sched.mma.assign(size_t(threads), {});
  sched.copies.assign(size_t(threads), {});
  sched.groups.assign(size_t(threads), 0);
  for (int t = 0; t < threads; ++t) start_fiber(sched.fibers[size_t(t)]);
  // Warp by warp, each as far as it can go: a warp's lanes run (each until it waits or returns) until all of them
  // wait at __syncthreads or have returned, and only then does the next warp start. Letting one warp run ahead of
  // the others as far as the barriers allow is what exposes a missing __syncthreads: a warp that reads shared memory
  // before another has written it, or overwrites what another has yet to read.
  for (int remaining = threads; remaining > 0;) {
    bool progress = false;
    for (const Barrier& w : sched.warps)
      for (bool warp_progress = true; warp_progress;) {
        warp_progress = false;
        for (int t = w.first; t < w.first + w.count; ++t) {
          Fiber& f = sched.fibers[size_t(t)];
          if (f.done || f.waiting) continue;
          sched.current = t;
          set_builtins(t);
          to_fiber(f);
          warp_progress = progress = true;
        }
      }
    remaining = 0;
    for (int t = 0; t < threads; ++t) remaining += sched.fibers[size_t(t)].done ? 0 : 1;
    if (remaining > 0 && !progress) {
      std::fprintf(stderr,
                   "kernel model: block (%u, %u) deadlocked: %d threads wait at a barrier that the others "
                   "never reach\n",
                   blockIdx.x, blockIdx.y, remaining);
      std::abort();
    }
  }
  for (const auto& c : sched.copies)
    if (!c.empty()) {
      std::fprintf(stderr, "kernel model: block (%u, %u) ended with cp.async copies never waited for\n", blockIdx.x,
                   blockIdx.y);
      std::abort();
    }
  sched.current = -1;
}

// kernel<<<grid, block>>>(args...): every block in turn, x fastest.
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, Args&&... args) {
  std::tuple<Params...> params(std::forward<Args>(args)...);
  gridDim = grid;
  blockDim = block;
  sched.body = [&] { std::apply(kernel, params); };
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        blockIdx.x = x, blockIdx.y = y, blockIdx.z = z;
        run_block(int(block.x * block.y * block.z));
      }
  sched.body = nullptr;
}

inline int current_lane() { return lane_of(sched.current); }
inline int current_warp_base() { return warp_of(sched.current) * kWarp; }
inline void warp_sync() { arrive_and_wait(sched.warps[size_t(warp_of(sched.current))]); }

// Every live lane posts v, then reads lane src's.
template <typename T>
T exchange(T v, int src) {
  static_assert(sizeof(T) <= sizeof(uint64_t));
  const int base = current_warp_base();
  std::memcpy(&sched.slot[size_t(base + current_lane())], &v, sizeof(T));
  warp_sync();
  T r;
  std::memcpy(&r, &sched.slot[size_t(base + (src & (kWarp - 1)))], sizeof(T));
  warp_sync();  // every lane has read before any posts again
  return r;
}

inline float bf16_lo(uint32_t u) { return std::bit_cast<float>(u << 16); }
inline float bf16_hi(uint32_t u) { return std::bit_cast<float>(u & 0xffff0000u); }

}  // namespace ember::kernel_model

inline void __syncthreads() { ember::kernel_model::arrive_and_wait(ember::kernel_model::sched.block); }
// A barrier of the calling thread's warp (the lanes that have not returned).
inline void __syncwarp(unsigned = 0xffffffffu) { ember::kernel_model::warp_sync(); }

// The IEEE-rounded fp32 intrinsics that a kernel uses to keep a product or sum out of an FMA: one rounding each, as
// the host's fp32 arithmetic does (volatile: never contracted here either).
inline float __fmul_rn(float a, float b) {
  volatile float r = a * b;
  return r;
}
inline float __fadd_rn(float a, float b) {
  volatile float r = a + b;
  return r;
}
inline float __fsub_rn(float a, float b) {
  volatile float r = a - b;
  return r;
}

template <typename T>
T __shfl_sync(unsigned, T v, int src_lane) {
  return ember::kernel_model::exchange(v, src_lane);
}
template <typename T>
T __shfl_xor_sync(unsigned, T v, int lane_mask) {
  return ember::kernel_model::exchange(v, ember::kernel_model::current_lane() ^ lane_mask);
}

// mma.sync's exchange among the calling warp: each lane posts its operands (a[4], b0, b1) and receives all 32 lanes'.
inline std::array<std::array<uint32_t, 6>, ember::kernel_model::kWarp> exchange_mma_operands(const uint32_t (&a)[4],
                                                                                             uint32_t b0, uint32_t b1) {
  using namespace ember::kernel_model;
  const int base = current_warp_base();
  sched.mma[size_t(base + current_lane())] = {a[0], a[1], a[2], a[3], b0, b1};
  warp_sync();
  std::array<std::array<uint32_t, 6>, kWarp> all;
  for (int l = 0; l < kWarp; ++l) all[size_t(l)] = sched.mma[size_t(base + l)];
  warp_sync();
  return all;
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 for the calling lane: every lane posts its fragments, then
// each rebuilds A (16 x 16) and B (16 x 8) from all 32 and computes its four elements of D = A B + C.
inline void emulated_mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  using namespace ember::kernel_model;
  const auto operands = exchange_mma_operands(a, b0, b1);
  float A[16][16], B[16][8];
  for (int l = 0; l < kWarp; ++l) {
    const int g = l / 4, t = l % 4;
    const auto& r = operands[size_t(l)];
    A[g][2 * t] = bf16_lo(r[0]), A[g][2 * t + 1] = bf16_hi(r[0]);
    A[g + 8][2 * t] = bf16_lo(r[1]), A[g + 8][2 * t + 1] = bf16_hi(r[1]);
    A[g][2 * t + 8] = bf16_lo(r[2]), A[g][2 * t + 9] = bf16_hi(r[2]);
    A[g + 8][2 * t + 8] = bf16_lo(r[3]), A[g + 8][2 * t + 9] = bf16_hi(r[3]);
    B[2 * t][g] = bf16_lo(r[4]), B[2 * t + 1][g] = bf16_hi(r[4]);
    B[2 * t + 8][g] = bf16_lo(r[5]), B[2 * t + 9][g] = bf16_hi(r[5]);
  }
  const int g = current_lane() / 4, t = current_lane() % 4;
  for (int e = 0; e < 4; ++e) {
    const int row = g + (e / 2) * 8, col = 2 * t + (e & 1);
    float acc = d[e];
    for (int k = 0; k < 16; ++k) acc += A[row][k] * B[k][col];
    d[e] = acc;
  }
}

// mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 for the calling lane, as emulated_mma_bf16 does it: A (16 x 32) and B
// (32 x 8) rebuilt from every lane's four-int8 registers (lowest index in the lowest byte), the sums exact (int64
// here, wrapped to int32 as the hardware's accumulators wrap).
inline void emulated_mma_s8(int32_t (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  using namespace ember::kernel_model;
  const auto operands = exchange_mma_operands(a, b0, b1);
  int8_t A[16][32], B[32][8];
  const auto byte = [](uint32_t u, int j) { return int8_t(uint8_t(u >> (8 * j))); };
  for (int l = 0; l < kWarp; ++l) {
    const int g = l / 4, t = l % 4;
    const auto& r = operands[size_t(l)];
    for (int j = 0; j < 4; ++j) {
      A[g][4 * t + j] = byte(r[0], j), A[g + 8][4 * t + j] = byte(r[1], j);
      A[g][16 + 4 * t + j] = byte(r[2], j), A[g + 8][16 + 4 * t + j] = byte(r[3], j);
      B[4 * t + j][g] = byte(r[4], j), B[16 + 4 * t + j][g] = byte(r[5], j);
    }
  }
  const int g = current_lane() / 4, t = current_lane() % 4;
  for (int e = 0; e < 4; ++e) {
    const int row = g + (e / 2) * 8, col = 2 * t + (e & 1);
    int64_t acc = d[e];
    for (int k = 0; k < 32; ++k) acc += int64_t(A[row][k]) * B[k][col];
    d[e] = int32_t(uint32_t(uint64_t(acc)));
  }
}

// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16 for the calling lane: lane l points at row l % 8 of matrix l / 8
// (8 bf16, 16 bytes); register i of lane l receives matrix i's elements (l / 4, 2 (l % 4)) and (l / 4, 2 (l % 4) + 1),
// or with .trans (2 (l % 4), l / 4) and (2 (l % 4) + 1, l / 4), the first in the low half.
inline void emulated_ldmatrix_x4(uint32_t (&r)[4], const void* row, bool trans) {
  using namespace ember::kernel_model;
  const int base = current_warp_base(), lane = current_lane();
  EMBER_MODEL_CHECK(reinterpret_cast<uintptr_t>(row) % 16 == 0, "ldmatrix: a row address must be 16-byte aligned");
  sched.slot[size_t(base + lane)] = reinterpret_cast<uintptr_t>(row);
  warp_sync();
  const int g = lane / 4, t = lane % 4;
  auto at = [&](int matrix, int row_in, int col) {
    uint16_t v;
    std::memcpy(&v, reinterpret_cast<const char*>(sched.slot[size_t(base + matrix * 8 + row_in)]) + 2 * col, 2);
    return uint32_t(v);
  };
  for (int i = 0; i < 4; ++i)
    r[i] = trans ? at(i, 2 * t, g) | at(i, 2 * t + 1, g) << 16 : at(i, g, 2 * t) | at(i, g, 2 * t + 1) << 16;
  warp_sync();  // every lane has read before any posts again
}

// cp.async.cg.shared.global [dst], [src], 16, (valid ? 16 : 0) for the calling thread, and its commit_group and
// wait_group N (see the header comment).
inline void emulated_cp_async_16(void* dst, const void* src, bool valid) {
  using namespace ember::kernel_model;
  EMBER_MODEL_CHECK(
      reinterpret_cast<uintptr_t>(dst) % 16 == 0 && (!valid || reinterpret_cast<uintptr_t>(src) % 16 == 0),
      "cp.async: 16-byte copies need 16-byte aligned addresses");
  std::memset(dst, 0xff, 16);  // NaN in bf16 and fp32 alike
  sched.copies[size_t(sched.current)].push_back({dst, valid ? src : nullptr, -1});
}
inline void emulated_cp_async_commit() {
  using namespace ember::kernel_model;
  const size_t me = size_t(sched.current);
  for (auto& c : sched.copies[me])
    if (c.group < 0) c.group = sched.groups[me];
  ++sched.groups[me];
}
inline void emulated_cp_async_wait(int n) {
  using namespace ember::kernel_model;
  const size_t me = size_t(sched.current);
  auto& pending = sched.copies[me];
  const int done_below = sched.groups[me] - n;  // groups before this one are complete
  std::vector<Scheduler::AsyncCopy> left;
  for (const auto& c : pending) {
    if (c.group < 0 || c.group >= done_below) {
      left.push_back(c);
      continue;
    }
    if (c.src)
      std::memcpy(c.dst, c.src, 16);
    else
      std::memset(c.dst, 0, 16);
  }
  pending = std::move(left);
}

// Device functions the kernels call on ints. (A translation unit that renames the namespace `cuda` with a macro, to
// keep its copies of the launchers apart from the CUDA backend's, gets these in the renamed namespace too.)
namespace ember::cuda {
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
}  // namespace ember::cuda
