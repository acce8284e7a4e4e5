// Device, communicator and precision selection rules on any machine: the visible GPU count is given, not discovered,
// and the World is a one-rank stand-in (MPI_COMM_SELF) placed at any local rank of any node size. Which rules apply
// depends on the build: a CPU-only build refuses `cuda` and picks cpu for `auto` whatever the count.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "core/error.h"
#include "dist/comm_select.h"
#include "dist/device_select.h"
#include "dist/world.h"
#include "train/run_setup.h"

namespace ember {
namespace {

#ifdef EMBER_HAVE_CUDA
constexpr bool kCuda = true;
#else
constexpr bool kCuda = false;
#endif
#ifdef EMBER_HAVE_NCCL
constexpr bool kNccl = true;
#else
constexpr bool kNccl = false;
#endif

// Rank `local_rank` of `local_size` on one node, as one rank of its own communicator.
World node_world(int local_rank, int local_size) {
  World w;
  w.comm = MPI_COMM_SELF;
  w.rank = 0;
  w.size = 1;
  w.local_rank = local_rank;
  w.local_size = local_size;
  w.host = "node7";
  return w;
}

// Sets EMBER_SHARE_GPU for one test and restores the caller's value after it.
class ShareGpuEnv {
 public:
  explicit ShareGpuEnv(const char* value) {
    if (const char* old = std::getenv("EMBER_SHARE_GPU")) old_ = old, had_ = true;
    if (value)
      setenv("EMBER_SHARE_GPU", value, 1);
    else
      unsetenv("EMBER_SHARE_GPU");
  }
  ~ShareGpuEnv() {
    if (had_)
      setenv("EMBER_SHARE_GPU", old_.c_str(), 1);
    else
      unsetenv("EMBER_SHARE_GPU");
  }

 private:
  std::string old_;
  bool had_ = false;
};

// The ember::Error thrown by f, or a test failure when it returns.
template <class F>
Error error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no ember::Error thrown";
  return Error("", "");
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(DeviceSelect, CpuIsTheCpuBackend) {
  const DeviceChoice c = select_device(node_world(0, 1), DeviceRequest::cpu, 8);
  EXPECT_EQ(c.kind, DEVICE_KIND_CPU);
  EXPECT_EQ(c.name, "cpu");
  EXPECT_EQ(make_backend(c)->name(), make_cpu_backend()->name());
}

TEST(DeviceSelect, AutoWithoutGpuIsCpu) {
  EXPECT_EQ(select_device(node_world(0, 1), DeviceRequest::automatic, 0).kind, DEVICE_KIND_CPU);
}

TEST(DeviceSelect, AutoWithGpuIsCudaOnlyInCudaBuilds) {
  ShareGpuEnv env(nullptr);
  const DeviceChoice c = select_device(node_world(1, 2), DeviceRequest::automatic, 2);
  EXPECT_EQ(c.kind, kCuda ? DEVICE_KIND_CUDA : DEVICE_KIND_CPU);
  if (kCuda) EXPECT_EQ(c.cuda_device, 1);
}

TEST(DeviceSelect, CudaInCpuBuildOrWithoutGpuIsAnError) {
  const Error e = error_of([] { select_device(node_world(0, 1), DeviceRequest::cuda, 0); });
  if (!kCuda) {
    EXPECT_STREQ(e.what(), "training.device = cuda: this ember was built without the CUDA backend");
    EXPECT_TRUE(contains(e.hint(), "CUDA toolkit")) << e.hint();
  } else {
    EXPECT_STREQ(e.what(), "training.device = cuda: no CUDA device is visible to rank 0 on node7");
    EXPECT_TRUE(contains(e.hint(), "CUDA_VISIBLE_DEVICES")) << e.hint();
  }
  EXPECT_TRUE(contains(e.hint(), "training.device = cpu")) << e.hint();
}

// One rank per GPU by local rank; past the GPU count, an error naming the host, the ranks and the GPUs.
TEST(DeviceSelect, OneRankPerGpuByLocalRank) {
  if (!kCuda) GTEST_SKIP() << "CPU-only build: training.device = cuda is refused before any GPU rule";
  ShareGpuEnv env(nullptr);
  for (int r = 0; r < 4; ++r) {
    const DeviceChoice c = select_device(node_world(r, 4), DeviceRequest::cuda, 4);
    EXPECT_EQ(c.kind, DEVICE_KIND_CUDA);
    EXPECT_EQ(c.cuda_device, r);
    EXPECT_FALSE(c.gpus_shared);
  }
  for (DeviceRequest device : {DeviceRequest::cuda, DeviceRequest::automatic}) {
    const Error e = error_of([&] { select_device(node_world(2, 3), device, 2); });
    EXPECT_EQ(std::string(e.what()), std::string("training.device = ") + device_request_name(device) +
                                         ": 3 ranks run on node7 but only 2 CUDA device(s) are visible there (one "
                                         "rank per GPU)");
    EXPECT_TRUE(contains(e.hint(), "at most 2 rank(s) per node")) << e.hint();
    EXPECT_TRUE(contains(e.hint(), "EMBER_SHARE_GPU=1")) << e.hint();
  }
}

TEST(DeviceSelect, ShareGpuIsRoundRobin) {
  if (!kCuda) GTEST_SKIP() << "CPU-only build: training.device = cuda is refused before any GPU rule";
  ShareGpuEnv env("1");
  for (int r = 0; r < 5; ++r) {
    const DeviceChoice c = select_device(node_world(r, 5), DeviceRequest::cuda, 2);
    EXPECT_EQ(c.cuda_device, r % 2);
    EXPECT_TRUE(c.gpus_shared);
  }
  EXPECT_FALSE(select_device(node_world(0, 2), DeviceRequest::cuda, 2).gpus_shared);  // allowed, not needed
}

TEST(DeviceSelect, ShareGpuTakesOnlyZeroOrOne) {
  if (!kCuda) GTEST_SKIP() << "CPU-only build: training.device = cuda is refused before any GPU rule";
  ShareGpuEnv env("yes");
  const Error e = error_of([] { select_device(node_world(0, 1), DeviceRequest::cuda, 1); });
  EXPECT_STREQ(e.what(), "EMBER_SHARE_GPU=yes: must be 0 or 1");
}

TEST(CommSelect, CpuTakesMpi) {
  auto backend = make_cpu_backend();
  const World w = node_world(0, 1);
  const DeviceChoice cpu = select_device(w, DeviceRequest::cpu, 0);
  for (CommRequest comm : {CommRequest::automatic, CommRequest::mpi})
    EXPECT_EQ(make_communicator(w, cpu, comm, *backend)->name(), "mpi");
}

TEST(CommSelect, NcclNeedsGpusOfItsOwn) {
  auto backend = make_cpu_backend();  // never used: every case is refused before a communicator exists
  const World w = node_world(0, 1);
  const Error on_cpu =
      error_of([&] { make_communicator(w, select_device(w, DeviceRequest::cpu, 0), CommRequest::nccl, *backend); });
  EXPECT_STREQ(on_cpu.what(), "training.comm = nccl: NCCL needs the CUDA backend, but this run trains on the CPU");
  EXPECT_TRUE(contains(on_cpu.hint(), "training.comm = mpi")) << on_cpu.hint();

  DeviceChoice shared;
  shared.kind = DEVICE_KIND_CUDA;
  shared.cuda_device = 0;
  shared.gpus_shared = true;
  const Error e = error_of([&] { make_communicator(w, shared, CommRequest::nccl, *backend); });
  EXPECT_STREQ(e.what(), kNccl ? "training.comm = nccl: ranks share GPUs (EMBER_SHARE_GPU=1), and NCCL needs one GPU "
                                 "per rank"
                               : "training.comm = nccl: this ember was built without NCCL");
  EXPECT_TRUE(contains(e.hint(), "training.comm = mpi")) << e.hint();
}

// training.precision = auto is bf16 on a GPU and fp32 on the CPU; fp32 and bf16 are taken as written on either.
TEST(PrecisionSelect, AutoIsBf16OnAGpuAndFp32OnTheCpu) {
  EXPECT_EQ(resolve_precision(PrecisionRequest::automatic, /*on_gpu=*/true), MatmulPrecision::bf16);
  EXPECT_EQ(resolve_precision(PrecisionRequest::automatic, /*on_gpu=*/false), MatmulPrecision::fp32);
  for (bool gpu : {false, true}) {
    EXPECT_EQ(resolve_precision(PrecisionRequest::fp32, gpu), MatmulPrecision::fp32);
    EXPECT_EQ(resolve_precision(PrecisionRequest::bf16, gpu), MatmulPrecision::bf16);
  }
}

// The training backend carries the resolved precision: on the CPU, auto trains at fp32 and bf16 when asked.
TEST(PrecisionSelect, TheTrainingBackendTakesTheResolvedPrecision) {
  TrainingConfig t;
  t.device = DeviceRequest::cpu;
  EXPECT_EQ(t.precision, PrecisionRequest::automatic);
  EXPECT_EQ(make_training_backend(node_world(0, 1), t).backend->matmul_precision(), MatmulPrecision::fp32);
  t.precision = PrecisionRequest::bf16;
  EXPECT_EQ(make_training_backend(node_world(0, 1), t).backend->matmul_precision(), MatmulPrecision::bf16);
}

}  // namespace
}  // namespace ember
