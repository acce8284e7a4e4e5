// Device, communicator and precision selection rules on any machine: the visible GPU count is given, not discovered,
// and the World is a one-rank stand-in (MPI_COMM_SELF) placed at any local rank of any node size. Which rules apply
// depends on the build: a CPU-only build refuses `cuda` and picks cpu for `auto` whatever the count.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "core/error.h"
#include "parallel/comm_select.h"
#include "parallel/device_select.h"
#include "parallel/world.h"
#include "scoped_env.h"
#include "test_support.h"
#include "train/run_setup.h"

namespace ember {
namespace {

constexpr bool kCuda = test::kCudaBuild;
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

// EMBER_SHARE_GPU set (or unset, for nullptr) for one test.
struct ShareGpuEnv : test::ScopedEnv {
  explicit ShareGpuEnv(const char* value) : ScopedEnv("EMBER_SHARE_GPU", value) {}
};

// n visible GPUs with made-up UUIDs, as discover_cuda_devices() reports them.
CudaDevices gpus(int n) {
  CudaDevices d;
  for (int i = 0; i < n; ++i) d.devices.push_back({"GPU-node7-" + std::to_string(i), "Test GPU"});
  return d;
}

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
  const DeviceChoice c = select_device(node_world(0, 1), DeviceRequest::cpu, gpus(8));
  EXPECT_EQ(c.kind, DEVICE_KIND_CPU);
  EXPECT_EQ(c.name, "cpu");
  EXPECT_EQ(make_backend(c)->name(), make_cpu_backend()->name());
}

TEST(DeviceSelect, AutoWithoutGpuIsCpu) {
  EXPECT_EQ(select_device(node_world(0, 1), DeviceRequest::automatic, gpus(0)).kind, DEVICE_KIND_CPU);
}

TEST(DeviceSelect, AutoWithGpuIsCudaOnlyInCudaBuilds) {
  ShareGpuEnv env(nullptr);
  const DeviceChoice c = select_device(node_world(1, 2), DeviceRequest::automatic, gpus(2));
  EXPECT_EQ(c.kind, kCuda ? DEVICE_KIND_CUDA : DEVICE_KIND_CPU);
  if (kCuda) EXPECT_EQ(c.cuda_device, 1);
}

TEST(DeviceSelect, CudaInCpuBuildOrWithoutGpuIsAnError) {
  const Error e = error_of([] { select_device(node_world(0, 1), DeviceRequest::cuda, gpus(0)); });
  if (!kCuda) {
    EXPECT_STREQ(e.what(), "training.device = cuda: this ember was built without the CUDA backend");
    EXPECT_TRUE(contains(e.hint(), "CUDA toolkit")) << e.hint();
  } else {
    EXPECT_STREQ(e.what(), "training.device = cuda: no CUDA device is visible to rank 0 on node7");
    EXPECT_TRUE(contains(e.hint(), "CUDA_VISIBLE_DEVICES")) << e.hint();
  }
  EXPECT_TRUE(contains(e.hint(), "training.device = cpu")) << e.hint();
}

// One rank per GPU by local rank when every GPU of the node is visible; the rank's own when it sees only one. Which
// ranks share a GPU is decided from the UUIDs all ranks picked (tests/mpi/test_device_select_ranks.cpp).
TEST(DeviceSelect, OneRankPerGpuByLocalRank) {
  if (!kCuda) GTEST_SKIP() << "CPU-only build: training.device = cuda is refused before any GPU rule";
  ShareGpuEnv env(nullptr);
  for (int r = 0; r < 4; ++r) {
    const DeviceChoice c = select_device(node_world(r, 4), DeviceRequest::cuda, gpus(4));
    EXPECT_EQ(c.kind, DEVICE_KIND_CUDA);
    EXPECT_EQ(c.cuda_device, r);
    EXPECT_EQ(c.name, "cuda:" + std::to_string(r) + " (Test GPU)");
    EXPECT_FALSE(c.gpus_shared);
  }
  // srun --gpus-per-task=1: local rank 3 of 4 sees one GPU, its own, and takes it (no EMBER_SHARE_GPU needed).
  const DeviceChoice bound = select_device(node_world(3, 4), DeviceRequest::cuda, gpus(1));
  EXPECT_EQ(bound.cuda_device, 0);
  EXPECT_FALSE(bound.gpus_shared);
}

TEST(DeviceSelect, ShareGpuIsRoundRobin) {
  if (!kCuda) GTEST_SKIP() << "CPU-only build: training.device = cuda is refused before any GPU rule";
  ShareGpuEnv env("1");
  for (int r = 0; r < 5; ++r)
    EXPECT_EQ(select_device(node_world(r, 5), DeviceRequest::cuda, gpus(2)).cuda_device, r % 2);
  EXPECT_FALSE(select_device(node_world(0, 2), DeviceRequest::cuda, gpus(2)).gpus_shared);  // allowed, not needed
}

// A driver older than the CUDA runtime needs is named with both versions, not reported as "no CUDA device".
TEST(DeviceSelect, AnOldDriverIsNamedWithTheVersionNeeded) {
  CudaDevices old;
  old.problem =
      explain_cuda_count_error(CudaCountError::insufficient_driver, "cudaErrorInsufficientDriver", 12020, 13000);
  ASSERT_TRUE(old.problem.has_value());
  if (kCuda) {
    const Error e = error_of([&] { select_device(node_world(0, 1), DeviceRequest::cuda, old); });
    EXPECT_STREQ(e.what(),
                 "training.device = cuda: the NVIDIA driver supports CUDA 12.2, but this ember's CUDA runtime is 13.0 "
                 "(cudaErrorInsufficientDriver) on rank 0 on node7");
    EXPECT_TRUE(contains(e.hint(), "NVIDIA driver for CUDA 13.0 or newer")) << e.hint();
    EXPECT_TRUE(contains(e.hint(), "training.device = cpu")) << e.hint();
  }
  // auto falls back to the CPU, with the reason as a warning on stderr.
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  const DeviceChoice c = select_device(node_world(0, 1), DeviceRequest::automatic, old);
  const std::string out = testing::internal::GetCapturedStdout(), err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(c.kind, DEVICE_KIND_CPU);
  if (kCuda) {
    EXPECT_TRUE(contains(err,
                         "warning: device: cpu (training.device = auto: no CUDA device is visible on node7 (the "
                         "NVIDIA driver supports CUDA 12.2, but this ember's CUDA runtime is 13.0"))
        << err;
    EXPECT_FALSE(contains(out, "device: cpu")) << out;
  }
}

TEST(DeviceSelect, CountErrorsThatAreNotJustNoGpu) {
  // No device, or no driver at all (the runtime reports "insufficient driver" with driver version 0): no GPU here.
  EXPECT_FALSE(explain_cuda_count_error(CudaCountError::no_device, "cudaErrorNoDevice", 12020, 13000));
  EXPECT_FALSE(explain_cuda_count_error(CudaCountError::insufficient_driver, "cudaErrorInsufficientDriver", 0, 13000));
  const std::optional<CudaProblem> other =
      explain_cuda_count_error(CudaCountError::other, "cudaErrorInvalidDevice", 13000, 13000);
  ASSERT_TRUE(other.has_value());
  EXPECT_EQ(other->what, "the CUDA runtime could not count the GPUs (cudaErrorInvalidDevice)");
  EXPECT_TRUE(contains(other->hint, "CUDA_VISIBLE_DEVICES")) << other->hint;
  EXPECT_EQ(cuda_version_text(13000), "13.0");
  EXPECT_EQ(cuda_version_text(11080), "11.8");
  EXPECT_EQ(cuda_version_text(12020), "12.2");
}

TEST(DeviceSelect, UuidsPrintAsNvidiaSmiPrintsThem) {
  unsigned char bytes[16];
  for (int i = 0; i < 16; ++i) bytes[i] = static_cast<unsigned char>(i * 17);
  EXPECT_EQ(format_gpu_uuid(bytes), "GPU-00112233-4455-6677-8899-aabbccddeeff");
}

TEST(DeviceSelect, ShareGpuTakesOnlyZeroOrOne) {
  if (!kCuda) GTEST_SKIP() << "CPU-only build: training.device = cuda is refused before any GPU rule";
  ShareGpuEnv env("yes");
  const Error e = error_of([] { select_device(node_world(0, 1), DeviceRequest::cuda, gpus(1)); });
  EXPECT_STREQ(e.what(), "EMBER_SHARE_GPU=yes: must be 0 or 1");
}

TEST(DeviceSelect, CpuTakesMpi) {
  auto backend = make_cpu_backend();
  const World w = node_world(0, 1);
  const DeviceChoice cpu = select_device(w, DeviceRequest::cpu, gpus(0));
  for (CommRequest comm : {CommRequest::automatic, CommRequest::mpi})
    EXPECT_EQ(make_communicator(w, cpu, comm, *backend)->name(), "mpi");
}

TEST(DeviceSelect, NcclNeedsGpusOfItsOwn) {
  auto backend = make_cpu_backend();  // never used: every case is refused before a communicator exists
  const World w = node_world(0, 1);
  const Error on_cpu = error_of(
      [&] { make_communicator(w, select_device(w, DeviceRequest::cpu, gpus(0)), CommRequest::nccl, *backend); });
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
TEST(DeviceSelect, AutoIsBf16OnAGpuAndFp32OnTheCpu) {
  EXPECT_EQ(resolve_precision(PrecisionRequest::automatic, /*on_gpu=*/true), MatmulPrecision::bf16);
  EXPECT_EQ(resolve_precision(PrecisionRequest::automatic, /*on_gpu=*/false), MatmulPrecision::fp32);
  for (bool gpu : {false, true}) {
    EXPECT_EQ(resolve_precision(PrecisionRequest::fp32, gpu), MatmulPrecision::fp32);
    EXPECT_EQ(resolve_precision(PrecisionRequest::bf16, gpu), MatmulPrecision::bf16);
  }
}

// The training backend carries the resolved precision: on the CPU, auto trains at fp32 and bf16 when asked.
TEST(DeviceSelect, TheTrainingBackendTakesTheResolvedPrecision) {
  TrainingConfig t;
  t.device = DeviceRequest::cpu;
  EXPECT_EQ(t.precision, PrecisionRequest::automatic);
  EXPECT_EQ(make_training_backend(node_world(0, 1), t).backend->matmul_precision(), MatmulPrecision::fp32);
  t.precision = PrecisionRequest::bf16;
  EXPECT_EQ(make_training_backend(node_world(0, 1), t).backend->matmul_precision(), MatmulPrecision::bf16);
}

}  // namespace
}  // namespace ember
