// GPU communicators (NCCL, and MPI staged through pinned host memory) on device buffers of a CudaBackend: every
// collective, blocking and non-blocking, on inputs that are a function of (rank, index), compared exactly against
// expectations computed here; failure counts are summed over ranks. Registered at np 1 and 2 with EMBER_SHARE_GPU=1,
// so two ranks may share one GPU (then NCCL, which needs a GPU per rank, is skipped with the reason).
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/backend.h"
#include "backend/device.h"
#include "collective_checks.h"
#include "host_staged_communicator.h"
#include "parallel/communicator.h"
#include "parallel/device_select.h"
#include "parallel/world.h"
#include "test_support.h"
#ifdef EMBER_HAVE_NCCL
#include "nccl_communicator.h"
#endif

namespace ember {
namespace {

using test::input;
using test::max_input;
using test::Mismatches;
using test::sum_input;
using test::total_over_ranks;
using test::world_rank;

// The reduction of input(op, r, i) over `size` ranks, computed rank by rank here. The inputs keep NCCL's AVG exact
// too (each input times 1/size, exact for the power-of-two sizes tested, then summed).
template <class T>
T expected(ReduceOp op, int size, size_t i) {
  if (op == REDUCE_OP_MAX) {
    T m = max_input<T>(0, i);
    for (int r = 1; r < size; ++r) m = std::max(m, max_input<T>(r, i));
    return m;
  }
  double sum = 0;
  for (int r = 0; r < size; ++r) sum += double(sum_input<T>(r, i));
  return op == REDUCE_OP_AVG ? T(sum / size) : T(sum);
}

float gather_input(int rank, size_t i) { return float(rank) * 0.5f + float(i % 1013); }
uint8_t broadcast_byte(int root, size_t i) { return uint8_t((i * 31 + size_t(root) * 7 + 1) & 0xff); }

const char* op_name(ReduceOp op) { return op == REDUCE_OP_SUM ? "sum" : op == REDUCE_OP_AVG ? "avg" : "max"; }
std::string label(const char* what, ReduceOp op, size_t n) {
  return std::string(what) + " " + op_name(op) + " n=" + std::to_string(n);
}

constexpr ReduceOp ALL_OPS[] = {REDUCE_OP_SUM, REDUCE_OP_AVG, REDUCE_OP_MAX};
// Odd sizes, a bucket-sized one, and one NCCL splits over several channels.
const size_t SIZES[] = {1, 1001, 65537, 3000017};

enum GpuComm { GPU_COMM_NCCL, GPU_COMM_STAGED };

// One device, backend and communicator of each kind per process, made on first use and released before
// MPI_Finalize by the environment below (NCCL set-up takes a while, so tests share them).
struct Gpu {
  World world;
  DeviceChoice device;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Communicator> comms[2];
};
std::unique_ptr<Gpu> g_gpu;

Gpu& gpu() {
  if (!g_gpu) {
    g_gpu = std::make_unique<Gpu>();
    g_gpu->world = make_world();
    g_gpu->device = select_device(g_gpu->world, DeviceRequest::cuda);
    g_gpu->backend = make_backend(g_gpu->device);
  }
  return *g_gpu;
}

class ReleaseGpu : public ::testing::Environment {
 public:
  void TearDown() override { g_gpu.reset(); }
};
::testing::Environment* const g_release_gpu = ::testing::AddGlobalTestEnvironment(new ReleaseGpu);

class GpuCommunicators : public ::testing::TestWithParam<GpuComm> {
 protected:
  void SetUp() override {
    // Every rank of a one-node test sees the same devices, so all ranks skip alike (no collective left waiting).
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    Gpu& g = gpu();
    std::unique_ptr<Communicator>& c = g.comms[GetParam()];
    if (GetParam() == GPU_COMM_NCCL) {
#ifdef EMBER_HAVE_NCCL
      if (g.device.gpus_shared) GTEST_SKIP() << "ranks share a GPU here (EMBER_SHARE_GPU=1); NCCL needs one per rank";
      if (!c) c = make_nccl_communicator(MPI_COMM_WORLD, g.backend.get());
#else
      GTEST_SKIP() << "this build has no NCCL";
#endif
    } else if (!c) {
      c = make_host_staged_communicator(MPI_COMM_WORLD, g.backend.get());
    }
    comm = c.get();
    be = g.backend.get();
  }

  Communicator* comm = nullptr;
  Backend* be = nullptr;
  Mismatches bad;
};

template <class T>
using DeviceArray = test::BackendArray<T>;

TEST_P(GpuCommunicators, Identity) {
  EXPECT_EQ(comm->name(), GetParam() == GPU_COMM_NCCL ? "nccl" : "mpi (host-staged)");
  EXPECT_EQ(comm->rank(), world_rank());
  EXPECT_EQ(comm->size(), test::world_size());
  comm->barrier();
}

template <class T>
void all_reduce_case(Communicator& comm, Backend& be, size_t n, ReduceOp op, bool async, Mismatches& bad) {
  std::vector<T> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = input<T>(op, comm.rank(), i);
  DeviceArray<T> buf(be, host);
  if (async) {
    if constexpr (std::is_same_v<T, float>) {
      auto request = comm.all_reduce_async(buf.get(), n, op);
      while (!request->test()) {
      }
      request->wait();  // after test() said done: a no-op
    }
  } else {
    comm.all_reduce(buf.get(), n, op);
  }
  const std::vector<T> got = buf.host();
  const std::string what = label(async ? "all_reduce_async" : "all_reduce", op, n);
  for (size_t i = 0; i < n; ++i) bad.check(what, i, got[i], expected<T>(op, comm.size(), i));
}

TEST_P(GpuCommunicators, AllReduceFloat) {
  for (size_t n : SIZES)
    for (ReduceOp op : ALL_OPS) all_reduce_case<float>(*comm, *be, n, op, false, bad);
  EXPECT_EQ(total_over_ranks(bad), 0);
}

TEST_P(GpuCommunicators, AllReduceDouble) {
  for (size_t n : SIZES)
    for (ReduceOp op : ALL_OPS) all_reduce_case<double>(*comm, *be, n, op, false, bad);
  EXPECT_EQ(total_over_ranks(bad), 0);
}

TEST_P(GpuCommunicators, AllReduceAsyncPolled) {
  for (size_t n : SIZES)
    for (ReduceOp op : ALL_OPS) all_reduce_case<float>(*comm, *be, n, op, true, bad);
  EXPECT_EQ(total_over_ranks(bad), 0);
}

// The collective must see the backend's ops queued just before it, with no synchronize in between: the buffer holds
// half the input and a scale by 2 is still in the backend's stream when the all-reduce starts.
TEST_P(GpuCommunicators, OrderedAfterQueuedBackendOps) {
  for (size_t n : SIZES) {
    for (bool async : {false, true}) {
      std::vector<float> half(n);
      for (size_t i = 0; i < n; ++i) half[i] = sum_input<float>(comm->rank(), i) * 0.5f;
      DeviceArray<float> buf(*be, half);
      be->scale(buf.get(), 2.0f, n);
      if (async)
        comm->all_reduce_async(buf.get(), n, REDUCE_OP_SUM)->wait();
      else
        comm->all_reduce(buf.get(), n, REDUCE_OP_SUM);
      be->scale(buf.get(), 0.5f, n);  // queued after the result: must see it
      const std::vector<float> got = buf.host();
      const std::string what = label(async ? "after queued scale, async" : "after queued scale", REDUCE_OP_SUM, n);
      for (size_t i = 0; i < n; ++i) bad.check(what, i, got[i], expected<float>(REDUCE_OP_SUM, comm->size(), i) * 0.5f);
    }
  }
  EXPECT_EQ(total_over_ranks(bad), 0);
}

void reduce_scatter_case(Communicator& comm, Backend& be, size_t count, ReduceOp op, bool async, Mismatches& bad) {
  const int size = comm.size(), rank = comm.rank();
  std::vector<float> send_host(size_t(size) * count);
  for (size_t i = 0; i < send_host.size(); ++i) send_host[i] = input<float>(op, rank, i);
  DeviceArray<float> send(be, send_host), recv(be, std::vector<float>(count, -7.0f));
  if (async)
    comm.reduce_scatter_async(send.get(), recv.get(), count, op)->wait();
  else
    comm.reduce_scatter(send.get(), recv.get(), count, op);
  const std::vector<float> got = recv.host(), sent = send.host();
  const std::string what = label(async ? "reduce_scatter_async" : "reduce_scatter", op, count);
  for (size_t i = 0; i < count; ++i) bad.check(what, i, got[i], expected<float>(op, size, size_t(rank) * count + i));
  for (size_t i = 0; i < sent.size(); ++i) bad.check(what + " (send untouched)", i, sent[i], send_host[i]);
}

TEST_P(GpuCommunicators, ReduceScatter) {
  for (size_t n : SIZES)
    for (ReduceOp op : ALL_OPS)
      for (bool async : {false, true}) reduce_scatter_case(*comm, *be, n, op, async, bad);
  EXPECT_EQ(total_over_ranks(bad), 0);
}

// in_place: the send block is this rank's own block of recv, as ZeRO-1 gathers parameters.
void all_gather_case(Communicator& comm, Backend& be, size_t count, bool async, bool in_place, Mismatches& bad) {
  const int size = comm.size(), rank = comm.rank();
  std::vector<float> own(count), recv_host(size_t(size) * count, -7.0f);
  for (size_t i = 0; i < count; ++i) own[i] = gather_input(rank, i);
  if (in_place) std::copy(own.begin(), own.end(), recv_host.begin() + ptrdiff_t(size_t(rank) * count));
  DeviceArray<float> send(be, own), recv(be, recv_host);
  const float* src = in_place ? recv.get() + size_t(rank) * count : send.get();
  if (async)
    comm.all_gather_async(src, recv.get(), count)->wait();
  else
    comm.all_gather(src, recv.get(), count);
  const std::vector<float> got = recv.host();
  const std::string what = std::string(async ? "all_gather_async" : "all_gather") + (in_place ? " in place" : "") +
                           " n=" + std::to_string(count);
  for (int b = 0; b < size; ++b)
    for (size_t i = 0; i < count; ++i)
      bad.check(what + " block " + std::to_string(b), i, got[size_t(b) * count + i], gather_input(b, i));
}

TEST_P(GpuCommunicators, AllGather) {
  for (size_t n : SIZES)
    for (bool async : {false, true})
      for (bool in_place : {false, true}) all_gather_case(*comm, *be, n, async, in_place, bad);
  EXPECT_EQ(total_over_ranks(bad), 0);
}

TEST_P(GpuCommunicators, BroadcastFromLastAndFirstRank) {
  for (int root : {comm->size() - 1, 0}) {
    for (size_t bytes : SIZES) {
      std::vector<uint8_t> host(bytes, 0);
      if (comm->rank() == root)
        for (size_t i = 0; i < bytes; ++i) host[i] = broadcast_byte(root, i);
      DeviceArray<uint8_t> buf(*be, host);
      comm->broadcast(buf.get(), bytes, root);
      const std::vector<uint8_t> got = buf.host();
      const std::string what = "broadcast root=" + std::to_string(root) + " bytes=" + std::to_string(bytes);
      for (size_t i = 0; i < bytes; ++i) bad.check(what, i, int(got[i]), int(broadcast_byte(root, i)));
    }
  }
  EXPECT_EQ(total_over_ranks(bad), 0);
}

// Gradient buckets as the sync trainer launches them: disjoint slices of one arena in flight together, completed in
// reverse order, with reduce-scatter and all-gather in flight beside them.
TEST_P(GpuCommunicators, SeveralAsyncInFlightCompletedInReverse) {
  const int size = comm->size(), rank = comm->rank();
  const size_t bucket = 65537, buckets = 5, total = bucket * buckets;
  std::vector<float> arena_host(total), rs_host(size_t(size) * bucket), ag_host(bucket);
  for (size_t i = 0; i < total; ++i) arena_host[i] = sum_input<float>(rank, i);
  for (size_t i = 0; i < rs_host.size(); ++i) rs_host[i] = sum_input<float>(rank, i);
  for (size_t i = 0; i < bucket; ++i) ag_host[i] = gather_input(rank, i);
  DeviceArray<float> arena(*be, arena_host), rs_send(*be, rs_host), rs_recv(*be, bucket), ag_send(*be, ag_host),
      ag_recv(*be, size_t(size) * bucket);
  std::vector<std::unique_ptr<PendingCollective>> pending;
  for (size_t k = buckets; k-- > 0;) {  // last layer first, as backward finishes them
    pending.push_back(comm->all_reduce_async(arena.get() + k * bucket, bucket, REDUCE_OP_AVG));
    for (auto& p : pending) p->test();
  }
  pending.push_back(comm->reduce_scatter_async(rs_send.get(), rs_recv.get(), bucket, REDUCE_OP_SUM));
  pending.push_back(comm->all_gather_async(ag_send.get(), ag_recv.get(), bucket));
  for (auto it = pending.rbegin(); it != pending.rend(); ++it) (*it)->wait();

  const std::vector<float> a = arena.host(), rs = rs_recv.host(), ag = ag_recv.host();
  for (size_t i = 0; i < total; ++i) bad.check("in flight bucket", i, a[i], expected<float>(REDUCE_OP_AVG, size, i));
  for (size_t i = 0; i < bucket; ++i)
    bad.check("in flight reduce_scatter", i, rs[i], expected<float>(REDUCE_OP_SUM, size, size_t(rank) * bucket + i));
  for (int b = 0; b < size; ++b)
    for (size_t i = 0; i < bucket; ++i)
      bad.check("in flight all_gather", i, ag[size_t(b) * bucket + i], gather_input(b, i));
  EXPECT_EQ(total_over_ranks(bad), 0);
}

// Dropping a pending request completes it before the buffer is read.
TEST_P(GpuCommunicators, DestroyingPendingRequestWaits) {
  const size_t n = 1001;
  std::vector<float> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = sum_input<float>(comm->rank(), i);
  DeviceArray<float> buf(*be, host);
  { auto request = comm->all_reduce_async(buf.get(), n, REDUCE_OP_AVG); }
  const std::vector<float> got = buf.host();
  for (size_t i = 0; i < n; ++i)
    bad.check("dropped all_reduce_async", i, got[i], expected<float>(REDUCE_OP_AVG, comm->size(), i));
  EXPECT_EQ(total_over_ranks(bad), 0);
}

// Host buffers (the sync trainer's loss scalars and resume path) go over MPI on the same communicator.
TEST_P(GpuCommunicators, HostBuffersStillWork) {
  std::vector<double> scalars(3);
  for (size_t i = 0; i < scalars.size(); ++i) scalars[i] = sum_input<double>(comm->rank(), i);
  comm->all_reduce(scalars.data(), scalars.size(), REDUCE_OP_SUM);
  for (size_t i = 0; i < scalars.size(); ++i)
    bad.check("host all_reduce", i, scalars[i], expected<double>(REDUCE_OP_SUM, comm->size(), i));
  std::vector<float> floats(1001);
  for (size_t i = 0; i < floats.size(); ++i) floats[i] = sum_input<float>(comm->rank(), i);
  comm->all_reduce_async(floats.data(), floats.size(), REDUCE_OP_AVG)->wait();
  for (size_t i = 0; i < floats.size(); ++i)
    bad.check("host all_reduce_async", i, floats[i], expected<float>(REDUCE_OP_AVG, comm->size(), i));
  std::string path = comm->rank() == 0 ? "runs/x/checkpoints/step_00000042.h5" : std::string(35, '?');
  comm->broadcast(path.data(), path.size(), 0);
  EXPECT_EQ(path, "runs/x/checkpoints/step_00000042.h5");
  EXPECT_EQ(total_over_ranks(bad), 0);
}

// Zero elements: nothing moves, and a request is complete at once.
TEST_P(GpuCommunicators, ZeroCountIsANoOp) {
  DeviceArray<float> buf(*be, size_t(4));
  comm->all_reduce(buf.get(), 0, REDUCE_OP_SUM);
  comm->reduce_scatter(buf.get(), buf.get() + 2, 0, REDUCE_OP_SUM);
  comm->all_gather(buf.get(), buf.get(), 0);
  comm->broadcast(buf.get(), 0, 0);
  EXPECT_TRUE(comm->all_reduce_async(buf.get(), 0, REDUCE_OP_AVG)->test());
}

INSTANTIATE_TEST_SUITE_P(Kind, GpuCommunicators, ::testing::Values(GPU_COMM_NCCL, GPU_COMM_STAGED),
                         [](const ::testing::TestParamInfo<GpuComm>& info) {
                           return std::string(info.param == GPU_COMM_NCCL ? "nccl" : "staged_mpi");
                         });

// On a GPU machine, auto picks the GPU of this rank's local rank, as `ember train` does, whichever communicator the
// run then opens.
TEST_P(GpuCommunicators, AutoPicksCudaByLocalRank) {
  const World world = make_world();
  const DeviceChoice c = select_device(world, DeviceRequest::automatic);
  EXPECT_EQ(c.kind, DEVICE_KIND_CUDA);
  EXPECT_EQ(c.cuda_device, world.local_rank % cuda_device_count());
  EXPECT_EQ(c.name.rfind("cuda:" + std::to_string(c.cuda_device) + " (", 0), 0u) << c.name;
}

}  // namespace
}  // namespace ember
