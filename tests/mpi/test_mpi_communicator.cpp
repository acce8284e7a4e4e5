// The MPI communicator: every collective, blocking and non-blocking, on inputs that are a function of (rank, index),
// compared exactly against expectations computed here; failure counts are summed over ranks so all ranks fail alike.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "collective_checks.h"
#include "core/error.h"
#include "parallel/communicator.h"
#include "parallel/mpi_communicator.h"
#include "test_support.h"

namespace ember {
namespace {

using test::input;
using test::max_input;
using test::Mismatches;
using test::sum_input;
using test::total_over_ranks;
using test::world_rank;
using test::world_size;

// The reduction of input(op, r, i) over the `size` ranks of the communicator, computed rank by rank here. AVG uses the
// same float operations as the communicator promises: the (exact) sum times the reciprocal of the size.
template <class T>
T expected(ReduceOp op, int size, size_t i) {
  if (op == REDUCE_OP_MAX) {
    T m = max_input<T>(0, i);
    for (int r = 1; r < size; ++r) m = std::max(m, max_input<T>(r, i));
    return m;
  }
  double sum = 0;
  for (int r = 0; r < size; ++r) sum += double(sum_input<T>(r, i));
  const T exact = T(sum);
  return op == REDUCE_OP_AVG ? exact * (T(1) / T(size)) : exact;
}

const char* op_name(ReduceOp op) { return op == REDUCE_OP_SUM ? "sum" : op == REDUCE_OP_AVG ? "avg" : "max"; }

std::string label(const char* what, ReduceOp op, size_t n) {
  return std::string(what) + " " + op_name(op) + " n=" + std::to_string(n);
}

constexpr ReduceOp ALL_OPS[] = {REDUCE_OP_SUM, REDUCE_OP_AVG, REDUCE_OP_MAX};

// How a test's communicator splits its collectives, and the sizes worth sweeping at that split: the default (one MPI
// call per collective below 2^30 elements), and small limits that push odd, exact-multiple and large sizes through the
// path that counts above INT_MAX take in production.
struct Chunking {
  const char* name;
  size_t max_chunk;
  std::vector<size_t> sizes;
};

const Chunking CHUNKINGS[] = {
    {"default", MPI_MAX_CHUNK_ELEMENTS, {0, 1, 2, 1001, 3000017}},
    {"chunk1000", 1000, {1, 999, 1000, 1001, 4567}},
    {"chunk256K", size_t{1} << 18, {3000017}},
};

// Per-rank block length for reduce_scatter and all_gather sweeps: small sizes as they are, large ones split over the
// ranks (plus one, to stay off round numbers) so the whole buffer stays ~3M floats at any rank count.
size_t block_count(size_t n, int size) { return n < 100000 ? n : n / size_t(size) + 1; }

class MpiCommunicator : public ::testing::TestWithParam<Chunking> {
 protected:
  void SetUp() override { comm = make_mpi_communicator_chunked(MPI_COMM_WORLD, GetParam().max_chunk); }
  const std::vector<size_t>& sizes() const { return GetParam().sizes; }

  std::unique_ptr<Communicator> comm;
  Mismatches bad;
};

TEST_P(MpiCommunicator, Identity) {
  EXPECT_EQ(comm->name(), "mpi");
  EXPECT_EQ(comm->rank(), world_rank());
  EXPECT_EQ(comm->size(), world_size());
  comm->barrier();
}

template <class T>
void all_reduce_case(Communicator& comm, size_t n, ReduceOp op, bool async, Mismatches& bad) {
  std::vector<T> buf(n);
  for (size_t i = 0; i < n; ++i) buf[i] = input<T>(op, comm.rank(), i);
  if (async) {
    if constexpr (std::is_same_v<T, float>) comm.all_reduce_async(buf.data(), n, op)->wait();
  } else {
    comm.all_reduce(buf.data(), n, op);
  }
  const std::string what = label(async ? "all_reduce_async" : "all_reduce", op, n);
  for (size_t i = 0; i < n; ++i) bad.check(what, i, buf[i], expected<T>(op, comm.size(), i));
}

TEST_P(MpiCommunicator, AllReduceFloat) {
  for (size_t n : sizes())
    for (ReduceOp op : ALL_OPS) all_reduce_case<float>(*comm, n, op, false, bad);
  EXPECT_EQ(total_over_ranks(bad), 0);
}

TEST_P(MpiCommunicator, AllReduceDouble) {
  for (size_t n : sizes())
    for (ReduceOp op : ALL_OPS) all_reduce_case<double>(*comm, n, op, false, bad);
  EXPECT_EQ(total_over_ranks(bad), 0);
}

TEST_P(MpiCommunicator, AllReduceAsyncFloat) {
  for (size_t n : sizes())
    for (ReduceOp op : ALL_OPS) all_reduce_case<float>(*comm, n, op, true, bad);
  EXPECT_EQ(total_over_ranks(bad), 0);
}

// send holds size blocks of count floats; block b carries global indices [b * count, (b + 1) * count), so rank r's
// result is the reduction of block r, whose indices differ from every other rank's.
void reduce_scatter_case(Communicator& comm, size_t count, ReduceOp op, bool async, Mismatches& bad) {
  const int size = comm.size(), rank = comm.rank();
  std::vector<float> send(size_t(size) * count), recv(count, -7.0f);
  for (size_t i = 0; i < send.size(); ++i) send[i] = input<float>(op, rank, i);
  if (async)
    comm.reduce_scatter_async(send.data(), recv.data(), count, op)->wait();
  else
    comm.reduce_scatter(send.data(), recv.data(), count, op);
  const std::string what = label(async ? "reduce_scatter_async" : "reduce_scatter", op, count);
  for (size_t i = 0; i < count; ++i) bad.check(what, i, recv[i], expected<float>(op, size, size_t(rank) * count + i));
  // The send buffer is input only.
  const std::string untouched = what + " (send untouched)";
  for (size_t i = 0; i < send.size(); ++i) bad.check(untouched, i, send[i], input<float>(op, rank, i));
}

TEST_P(MpiCommunicator, ReduceScatter) {
  for (size_t n : sizes())
    for (ReduceOp op : ALL_OPS) reduce_scatter_case(*comm, block_count(n, comm->size()), op, false, bad);
  EXPECT_EQ(total_over_ranks(bad), 0);
}

TEST_P(MpiCommunicator, ReduceScatterAsync) {
  for (size_t n : sizes())
    for (ReduceOp op : ALL_OPS) reduce_scatter_case(*comm, block_count(n, comm->size()), op, true, bad);
  EXPECT_EQ(total_over_ranks(bad), 0);
}

float gather_input(int rank, size_t i) { return float(rank) * 0.5f + float(i % 1013); }

// in_place: the send block is this rank's own block of recv, as ZeRO-1 gathers parameters.
void all_gather_case(Communicator& comm, size_t count, bool async, bool in_place, Mismatches& bad) {
  const int size = comm.size(), rank = comm.rank();
  std::vector<float> own(count), recv(size_t(size) * count, -7.0f);
  for (size_t i = 0; i < count; ++i) own[i] = gather_input(rank, i);
  const float* send = own.data();
  if (in_place) {
    std::copy(own.begin(), own.end(), recv.begin() + ptrdiff_t(size_t(rank) * count));
    send = recv.data() + size_t(rank) * count;
  }
  if (async)
    comm.all_gather_async(send, recv.data(), count)->wait();
  else
    comm.all_gather(send, recv.data(), count);
  const std::string what = std::string(async ? "all_gather_async" : "all_gather") + (in_place ? " in place" : "") +
                           " n=" + std::to_string(count);
  for (int b = 0; b < size; ++b) {
    const std::string block = what + " block " + std::to_string(b);
    for (size_t i = 0; i < count; ++i) bad.check(block, i, recv[size_t(b) * count + i], gather_input(b, i));
  }
}

TEST_P(MpiCommunicator, AllGather) {
  for (size_t n : sizes())
    for (bool in_place : {false, true}) all_gather_case(*comm, block_count(n, comm->size()), false, in_place, bad);
  EXPECT_EQ(total_over_ranks(bad), 0);
}

TEST_P(MpiCommunicator, AllGatherAsync) {
  for (size_t n : sizes())
    for (bool in_place : {false, true}) all_gather_case(*comm, block_count(n, comm->size()), true, in_place, bad);
  EXPECT_EQ(total_over_ranks(bad), 0);
}

uint8_t broadcast_byte(int root, size_t i) { return uint8_t((i * 31 + size_t(root) * 7 + 1) & 0xff); }

TEST_P(MpiCommunicator, BroadcastFromLastAndFirstRank) {
  for (int root : {comm->size() - 1, 0}) {
    for (size_t bytes : sizes()) {
      std::vector<uint8_t> buf(bytes, 0);
      if (comm->rank() == root)
        for (size_t i = 0; i < bytes; ++i) buf[i] = broadcast_byte(root, i);
      comm->broadcast(buf.data(), bytes, root);
      const std::string what = "broadcast root=" + std::to_string(root) + " bytes=" + std::to_string(bytes);
      for (size_t i = 0; i < bytes; ++i) bad.check(what, i, int(buf[i]), int(broadcast_byte(root, i)));
    }
  }
  EXPECT_EQ(total_over_ranks(bad), 0);
}

// Several collectives in flight at once, each on its own buffers, completed in the reverse of the order they were
// started: MPI matches non-blocking collectives by start order, so completion order must not matter.
TEST_P(MpiCommunicator, SeveralAsyncInFlightCompletedInReverse) {
  const int size = comm->size(), rank = comm->rank();
  for (size_t total : sizes()) {
    const size_t n = block_count(total, size);
    std::vector<std::vector<float>> reduce_bufs;
    for (ReduceOp op : ALL_OPS) {
      std::vector<float> b(n);
      for (size_t i = 0; i < n; ++i) b[i] = input<float>(op, rank, i);
      reduce_bufs.push_back(std::move(b));
    }
    std::vector<float> rs_send(size_t(size) * n), rs_recv(n), ag_send(n), ag_recv(size_t(size) * n);
    for (size_t i = 0; i < rs_send.size(); ++i) rs_send[i] = sum_input<float>(rank, i);
    for (size_t i = 0; i < n; ++i) ag_send[i] = gather_input(rank, i);

    std::vector<std::unique_ptr<PendingCollective>> pending;
    for (size_t k = 0; k < 3; ++k) pending.push_back(comm->all_reduce_async(reduce_bufs[k].data(), n, ALL_OPS[k]));
    pending.push_back(comm->reduce_scatter_async(rs_send.data(), rs_recv.data(), n, REDUCE_OP_AVG));
    pending.push_back(comm->all_gather_async(ag_send.data(), ag_recv.data(), n));
    for (auto it = pending.rbegin(); it != pending.rend(); ++it) (*it)->wait();

    for (size_t k = 0; k < 3; ++k) {
      const std::string what = label("in flight all_reduce", ALL_OPS[k], n);
      for (size_t i = 0; i < n; ++i) bad.check(what, i, reduce_bufs[k][i], expected<float>(ALL_OPS[k], size, i));
    }
    const std::string rs_what = label("in flight reduce_scatter", REDUCE_OP_AVG, n);
    for (size_t i = 0; i < n; ++i)
      bad.check(rs_what, i, rs_recv[i], expected<float>(REDUCE_OP_AVG, size, size_t(rank) * n + i));
    const std::string ag_what = "in flight all_gather n=" + std::to_string(n);
    for (int b = 0; b < size; ++b)
      for (size_t i = 0; i < n; ++i) bad.check(ag_what, i, ag_recv[size_t(b) * n + i], gather_input(b, i));
  }
  EXPECT_EQ(total_over_ranks(bad), 0);
}

// test() polled until it says done; afterwards wait() and test() are no-ops, so AVG is scaled exactly once.
TEST_P(MpiCommunicator, TestPollingThenIdempotentWait) {
  for (size_t n : sizes()) {
    std::vector<float> buf(n);
    for (size_t i = 0; i < n; ++i) buf[i] = sum_input<float>(comm->rank(), i);
    auto request = comm->all_reduce_async(buf.data(), n, REDUCE_OP_AVG);
    long long polls = 0;
    while (!request->test()) ++polls;
    request->wait();
    request->wait();
    EXPECT_TRUE(request->test());
    const std::string what = label("polled all_reduce_async", REDUCE_OP_AVG, n);
    for (size_t i = 0; i < n; ++i) bad.check(what, i, buf[i], expected<float>(REDUCE_OP_AVG, comm->size(), i));
  }
  EXPECT_EQ(total_over_ranks(bad), 0);
}

// Dropping a pending request completes it (and applies the AVG scaling) before the buffer is read.
TEST_P(MpiCommunicator, DestroyingPendingRequestWaits) {
  for (size_t total : sizes()) {
    const size_t n = block_count(total, comm->size());
    std::vector<float> buf(n), recv(n);
    std::vector<float> send(size_t(comm->size()) * n);
    for (size_t i = 0; i < n; ++i) buf[i] = sum_input<float>(comm->rank(), i);
    for (size_t i = 0; i < send.size(); ++i) send[i] = sum_input<float>(comm->rank(), i);
    { auto request = comm->all_reduce_async(buf.data(), n, REDUCE_OP_AVG); }
    { auto request = comm->reduce_scatter_async(send.data(), recv.data(), n, REDUCE_OP_AVG); }
    const std::string ar_what = label("dropped all_reduce_async", REDUCE_OP_AVG, n);
    const std::string rs_what = label("dropped reduce_scatter_async", REDUCE_OP_AVG, n);
    for (size_t i = 0; i < n; ++i) {
      bad.check(ar_what, i, buf[i], expected<float>(REDUCE_OP_AVG, comm->size(), i));
      bad.check(rs_what, i, recv[i], expected<float>(REDUCE_OP_AVG, comm->size(), size_t(comm->rank()) * n + i));
    }
  }
  EXPECT_EQ(total_over_ranks(bad), 0);
}

// A communicator over part of the world (even and odd world ranks) reduces over its own members only.
TEST_P(MpiCommunicator, SubCommunicator) {
  const int rank = world_rank(), size = world_size();
  MPI_Comm half = MPI_COMM_NULL;
  ASSERT_EQ(MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half), MPI_SUCCESS);
  {
    auto sub = make_mpi_communicator_chunked(half, GetParam().max_chunk);
    const int members = (size - rank % 2 + 1) / 2;
    EXPECT_EQ(sub->size(), members);
    EXPECT_EQ(sub->rank(), rank / 2);
    for (size_t n : sizes()) {
      std::vector<double> buf(n);
      for (size_t i = 0; i < n; ++i) buf[i] = double(rank) + double(i % 5);
      sub->all_reduce(buf.data(), n, REDUCE_OP_SUM);
      const std::string what = "sub-communicator all_reduce n=" + std::to_string(n);
      for (size_t i = 0; i < n; ++i) {
        double want = 0;
        for (int r = rank % 2; r < size; r += 2) want += double(r) + double(i % 5);
        bad.check(what, i, buf[i], want);
      }
    }
  }
  MPI_Comm_free(&half);
  EXPECT_EQ(total_over_ranks(bad), 0);
}

INSTANTIATE_TEST_SUITE_P(Chunking, MpiCommunicator, ::testing::ValuesIn(CHUNKINGS),
                         [](const ::testing::TestParamInfo<Chunking>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace ember
