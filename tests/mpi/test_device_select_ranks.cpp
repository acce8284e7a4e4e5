// Which ranks share a GPU, decided from the UUIDs every rank picked (parallel/device_select.h), over the real MPI world
// of this machine (one node: local rank = rank). Each test gives every rank its own made-up visible devices, as a
// launcher would: one bound to each rank (srun --gpus-per-task=1), one for all, or two for all. Registered at np 1,
// 2 and 4. In a CPU-only build training.device = cuda is refused before any of these rules, so they skip there.
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>

#include "backend/device.h"
#include "core/error.h"
#include "parallel/device_select.h"
#include "parallel/world.h"
#include "scoped_env.h"
#include "test_support.h"

namespace ember {
namespace {

constexpr bool kCuda = test::kCudaBuild;

// Every rank calls this at the same point, so a failure on any rank fails the test on all of them.
int failures_over_ranks(bool failed) {
  int local = failed ? 1 : 0, total = 0;
  MPI_Allreduce(&local, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  return total;
}

CudaDevices visible(std::initializer_list<std::string> uuids) {
  CudaDevices d;
  for (const std::string& u : uuids) d.devices.push_back({u, "Test GPU"});
  return d;
}

// The error select_device throws on this rank, or an empty message when it returns.
std::string error_text(const World& world, DeviceRequest device, const CudaDevices& gpus, std::string* hint) {
  try {
    select_device(world, device, gpus);
  } catch (const Error& e) {
    if (hint) *hint = e.hint();
    return e.what();
  }
  return "";
}

// srun --gpus-per-task=1: each rank sees one GPU, a different one, as its ordinal 0. No EMBER_SHARE_GPU, no sharing.
TEST(DeviceSelectRanks, EachRankBoundToItsOwnGpuTakesIt) {
  if (!kCuda) GTEST_SKIP() << "CPU-only build: training.device = cuda is refused before any GPU rule";
  const test::ScopedEnv env("EMBER_SHARE_GPU", nullptr);
  const World world = make_world();
  for (DeviceRequest device : {DeviceRequest::cuda, DeviceRequest::automatic}) {
    const DeviceChoice c = select_device(world, device, visible({"GPU-bound-" + std::to_string(world.rank)}));
    EXPECT_EQ(failures_over_ranks(c.kind != DEVICE_KIND_CUDA || c.cuda_device != 0 || c.gpus_shared), 0)
        << "rank " << world.rank << ": " << c.name << " shared " << c.gpus_shared;
  }
}

// One GPU visible to every rank: at np >= 2 the ranks would share it, which every rank refuses alike, naming the
// first two ranks, the host and the GPU, unless EMBER_SHARE_GPU=1 allows it.
TEST(DeviceSelectRanks, RanksOnOneGpuAreRefusedUnlessShared) {
  if (!kCuda) GTEST_SKIP() << "CPU-only build: training.device = cuda is refused before any GPU rule";
  const World world = make_world();
  const CudaDevices one = visible({"GPU-only"});
  {
    const test::ScopedEnv env("EMBER_SHARE_GPU", nullptr);
    for (DeviceRequest device : {DeviceRequest::cuda, DeviceRequest::automatic}) {
      std::string hint;
      const std::string what = error_text(world, device, one, &hint);
      const std::string expected =
          world.size == 1 ? ""
                          : std::string("training.device = ") + device_request_name(device) + ": ranks 0 and 1 on " +
                                world.host + " would share one GPU (GPU-only): " + std::to_string(world.size) +
                                " ranks run there on 1 GPU(s) (one rank per GPU)";
      const bool hint_ok = world.size == 1 || (hint.find("at most 1 rank(s) per node") != std::string::npos &&
                                               hint.find("--gpus-per-task=1") != std::string::npos &&
                                               hint.find("EMBER_SHARE_GPU=1") != std::string::npos);
      EXPECT_EQ(failures_over_ranks(what != expected || !hint_ok), 0) << what << "\nhint: " << hint;
    }
  }
  const test::ScopedEnv env("EMBER_SHARE_GPU", "1");
  const DeviceChoice c = select_device(world, DeviceRequest::cuda, one);
  EXPECT_EQ(failures_over_ranks(c.cuda_device != 0 || c.gpus_shared != (world.size > 1)), 0)
      << "rank " << world.rank << " shared " << c.gpus_shared;
}

// Two GPUs visible to every rank: ranks take local rank modulo 2, so up to 2 ranks have one each and at 4 ranks 0
// and 2 would share the first.
TEST(DeviceSelectRanks, TwoGpusForAllGoOnePerLocalRank) {
  if (!kCuda) GTEST_SKIP() << "CPU-only build: training.device = cuda is refused before any GPU rule";
  const test::ScopedEnv env("EMBER_SHARE_GPU", nullptr);
  const World world = make_world();
  const CudaDevices two = visible({"GPU-a", "GPU-b"});
  if (world.size <= 2) {
    const DeviceChoice c = select_device(world, DeviceRequest::cuda, two);
    EXPECT_EQ(failures_over_ranks(c.cuda_device != world.local_rank || c.gpus_shared), 0) << c.name;
  } else {
    const std::string what = error_text(world, DeviceRequest::cuda, two, nullptr);
    const std::string expected = "training.device = cuda: ranks 0 and 2 on " + world.host +
                                 " would share one GPU (GPU-a): " + std::to_string(world.size) +
                                 " ranks run there on 2 GPU(s) (one rank per GPU)";
    EXPECT_EQ(failures_over_ranks(what != expected), 0) << what;
  }
}

// A rank that sees no GPU fails the whole job alike under cuda (the lowest such rank's error on every rank), and
// turns auto into cpu on every rank.
TEST(DeviceSelectRanks, ARankWithoutAGpuDecidesForAll) {
  if (!kCuda) GTEST_SKIP() << "CPU-only build: training.device = cuda is refused before any GPU rule";
  const test::ScopedEnv env("EMBER_SHARE_GPU", nullptr);
  const World world = make_world();
  const int last = world.size - 1;
  const CudaDevices mine = world.rank == last ? CudaDevices{} : visible({"GPU-bound-" + std::to_string(world.rank)});
  const std::string what = error_text(world, DeviceRequest::cuda, mine, nullptr);
  EXPECT_EQ(failures_over_ranks(what != "training.device = cuda: no CUDA device is visible to rank " +
                                            std::to_string(last) + " on " + world.host),
            0)
      << what;
  EXPECT_EQ(failures_over_ranks(select_device(world, DeviceRequest::automatic, mine).kind != DEVICE_KIND_CPU), 0);
}

}  // namespace
}  // namespace ember
