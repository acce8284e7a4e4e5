// The async exchange over a real MPI window (docs/architecture.md, "Asynchronous mode"): every message arrives once
// and in order, reservations are disjoint, each worker's parameters equal the center's mirror of them bit for bit,
// a download is one message however many versions a worker missed, the upload and download error-feedback identities
// hold across the wire, staleness leaves out a worker's own message, and a center that does not serve makes a worker
// fail instead of hang. Registered at np 3 and 5, each with the default one-sided component
// (osc/sm on one host), --mca osc pt2pt and --mca osc ucx (UCX_TLS=tcp).
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "test_support.h"
#include "train/async/delta_codec.h"
#include "train/async/exchange.h"

namespace ember {
namespace {

constexpr size_t kN = 1000;  // not a multiple of the block size or of 8
constexpr size_t kBlock = 64;
constexpr int kMessages = 6;                   // per worker
constexpr uint64_t kReserve = 7;               // samples reserved per message
constexpr uint64_t kUnbounded = ~uint64_t(0);  // a reserve target the tests never reach

int rank() { return test::world_rank(); }
int workers() { return test::world_size() - 1; }

AsyncShape shape() {
  AsyncShape s;
  s.n = kN;
  s.block_size = kBlock;
  s.workers = workers();
  return s;
}

// Deterministic, sign-varied values with magnitudes that differ by block, so scales differ between blocks.
std::vector<float> make_delta(int worker, int k) {
  std::vector<float> d(kN);
  for (size_t i = 0; i < kN; ++i)
    d[i] = float(std::sin(1.7 * k + 0.37 * double(i) + worker) * (0.5 + double(i / kBlock % 5)) * 1e-2);
  return d;
}

std::vector<float> initial_params() {
  std::vector<float> p(kN);
  for (size_t i = 0; i < kN; ++i) p[i] = float(std::cos(0.11 * double(i)));
  return p;
}

// Relative closeness of two float vectors: max |a - b| over max |b|, with an absolute floor.
double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double diff = 0.0, scale = 1e-12;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(a[i] - b[i]));
    scale = std::max(scale, std::fabs(b[i]));
  }
  return diff / scale;
}

// The center's side of the first test: take every message, check the order, apply each delta divided by the number
// of workers, publish, then run a finish barrier.
struct CenterRun {
  std::vector<double> global;                // initial + sum of updates, in float64
  std::vector<std::vector<double>> decoded;  // per worker: the sum of the deltas it sent, as decoded
  std::vector<uint64_t> last_staleness;      // per worker
  uint64_t samples = 0;
};

// `global` is the parameters the center was constructed with; they change in place, as the trainer's do.
CenterRun serve(AsyncCenter& center, std::vector<float>& global) {
  const int W = workers();
  CenterRun run;
  run.global.assign(global.begin(), global.end());
  run.decoded.assign(size_t(W), std::vector<double>(kN, 0.0));
  run.last_staleness.assign(size_t(W), 0);
  std::vector<uint64_t> last_seq(size_t(W), 0);
  std::vector<float> d(kN), update(kN);
  int received = 0;
  while (received < W * kMessages) {
    std::vector<AsyncMessage> msgs = center.take();
    if (msgs.empty()) {
      usleep(100);
      continue;
    }
    std::fill(update.begin(), update.end(), 0.0f);
    uint64_t tokens = 0;
    for (const AsyncMessage& m : msgs) {
      EXPECT_EQ(m.seq, last_seq[size_t(m.worker)] + 1) << "worker " << m.worker << " skipped or repeated a message";
      last_seq[size_t(m.worker)] = m.seq;
      EXPECT_EQ(m.tokens, 100u + m.seq);
      EXPECT_LE(m.base_version, center.version());
      run.last_staleness[size_t(m.worker)] = m.staleness;
      center.decode(m, d.data());
      for (size_t i = 0; i < kN; ++i) {
        run.decoded[size_t(m.worker)][i] += d[i];
        update[i] += d[i] / float(W);
      }
      tokens += m.tokens;
      ++received;
    }
    for (size_t i = 0; i < kN; ++i) {
      run.global[i] += update[i];
      global[i] += update[i];
    }
    center.publish(tokens, msgs);
  }
  center.request_barrier(AsyncBarrier::finish);
  while (!center.barrier_reached()) {
    EXPECT_TRUE(center.take().empty()) << "a message arrived after the last one";
    usleep(100);
  }
  run.samples = center.samples_reserved();
  return run;
}

TEST(AsyncExchange, EveryMessageOnceInOrderAndEachWorkerHoldsItsMirror) {
  if (test::world_size() < 2) GTEST_SKIP() << "needs a center and at least one worker (np >= 2)";
  const int W = workers();
  const AsyncShape s = shape();
  const std::vector<float> init = initial_params();
  if (rank() == 0) {
    std::vector<float> global = init;
    AsyncCenter center(MPI_COMM_WORLD, s, global.data(), 0, 0, 0);
    const CenterRun run = serve(center, global);
    EXPECT_EQ(center.tokens_applied(), uint64_t(W) * (kMessages * 100 + kMessages * (kMessages + 1) / 2));
    EXPECT_EQ(run.samples, uint64_t(W) * kMessages * kReserve);
    for (int w = 0; w < W; ++w) {
      // Each worker's parameters are the center's mirror of them, bit for bit: the barrier's acknowledgement came
      // with the report of the last download the worker took.
      std::vector<float> have(kN);
      MPI_Recv(have.data(), int(kN), MPI_FLOAT, w + 1, 6, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      size_t differ = 0;
      for (size_t i = 0; i < kN; ++i) differ += have[i] != center.mirror(w)[i] ? 1 : 0;
      EXPECT_EQ(differ, 0u) << "worker rank " << w + 1 << ": values that differ from the center's mirror " << have[0]
                            << " " << center.mirror(w)[0] << " " << global[0] << " " << init[0];
      // And the last download carried the compressed difference between the newest parameters and the worker's
      // own, so whatever earlier downloads could not carry came down with it (download error feedback). The worker
      // sends what it held before that download; the same arithmetic here gives its parameters bit for bit.
      std::vector<float> before(kN), diff(kN), expect(kN);
      MPI_Recv(before.data(), int(kN), MPI_FLOAT, w + 1, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      const DeltaCodec codec(s.compression, kN, kBlock);
      std::vector<uint8_t> packed(codec.packed_bytes());
      for (size_t i = 0; i < kN; ++i) diff[i] = global[i] - before[i];
      codec.pack(diff.data(), packed.data());
      expect = before;
      codec.unpack_add(packed.data(), expect.data());
      size_t off = 0;
      for (size_t i = 0; i < kN; ++i) off += have[i] != expect[i] ? 1 : 0;
      EXPECT_EQ(off, 0u) << "worker rank " << w + 1 << ": values the last download did not bring as the "
                         << "compressed difference from the newest parameters";
    }
    // Worker identity: sum(decoded) = sum(deltas) - last residual; each worker sends its right-hand side.
    for (int w = 0; w < W; ++w) {
      std::vector<double> rhs(kN);
      MPI_Recv(rhs.data(), int(kN), MPI_DOUBLE, w + 1, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      // fp32 rounding of one subtraction per message and of the decoded sum: a few ulps of the values (1e-2).
      EXPECT_LT(max_rel_diff(run.decoded[size_t(w)], rhs), 1e-5) << "worker rank " << w + 1;
      uint64_t reported = 0;
      MPI_Recv(&reported, 1, MPI_UINT64_T, w + 1, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      EXPECT_EQ(reported, run.last_staleness[size_t(w)]) << "worker rank " << w + 1;
    }
    // Reservations: every worker's ranges, gathered, tile [0, W * kMessages * kReserve) without overlap.
    std::vector<uint64_t> firsts(size_t(W) * kMessages + kMessages);
    std::vector<uint64_t> none(kMessages, 0);
    MPI_Gather(none.data(), kMessages, MPI_UINT64_T, firsts.data(), kMessages, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    std::vector<uint64_t> got(firsts.begin() + kMessages, firsts.end());
    std::sort(got.begin(), got.end());
    for (size_t k = 0; k < got.size(); ++k) EXPECT_EQ(got[k], k * kReserve);
  } else {
    AsyncWorker worker(MPI_COMM_WORLD, s, rank(), 60.0);
    std::vector<float> base(kN, 0.0f);
    AsyncWorker::Published p = worker.fetch(base.data());
    EXPECT_TRUE(p.full) << "the first fetch must bring the full parameters";
    std::vector<double> sum_deltas(kN, 0.0);
    std::vector<uint64_t> firsts;
    int downloads = 0;
    std::vector<float> held(kN), before_last(kN);  // the parameters before a fetch, and before the last download
    for (int k = 0; k < kMessages; ++k) {
      firsts.push_back(worker.reserve(kReserve, 1, kUnbounded).first);
      const std::vector<float> d = make_delta(rank(), k);
      for (size_t i = 0; i < kN; ++i) sum_deltas[i] += d[i];
      worker.send(d.data(), p.version, 100 + uint64_t(k) + 1);
      held = base;
      p = worker.fetch(base.data());
      EXPECT_FALSE(p.full) << "only the first fetch brings the full parameters";
      downloads += p.downloaded ? 1 : 0;
      if (p.downloaded) before_last = held;
    }
    EXPECT_EQ(worker.seq(), uint64_t(kMessages));
    // Wait for the finish barrier, fetching as a worker would, until the newest version has come down.
    while (p.barrier_kind != AsyncBarrier::finish || p.version != p.newest) {
      usleep(200);
      held = base;
      p = worker.fetch(base.data());
      downloads += p.downloaded ? 1 : 0;
      if (p.downloaded) before_last = held;
    }
    EXPECT_GT(downloads, 0) << "no fetch brought a download";
    EXPECT_EQ(p.applied, worker.seq()) << "the newest version includes every message of this worker";
    EXPECT_EQ(worker.pending(), 0u) << "messages the fetched parameters include are still pending";
    worker.ack_barrier(p.barrier_seq);
    MPI_Send(base.data(), int(kN), MPI_FLOAT, 0, 6, MPI_COMM_WORLD);
    MPI_Send(before_last.data(), int(kN), MPI_FLOAT, 0, 9, MPI_COMM_WORLD);
    std::vector<double> rhs(kN);
    const std::vector<float>& res = worker.feedback().residual();
    for (size_t i = 0; i < kN; ++i) rhs[i] = sum_deltas[i] - res[i];
    MPI_Send(rhs.data(), int(kN), MPI_DOUBLE, 0, 7, MPI_COMM_WORLD);
    MPI_Send(&p.staleness, 1, MPI_UINT64_T, 0, 8, MPI_COMM_WORLD);
    MPI_Gather(firsts.data(), kMessages, MPI_UINT64_T, nullptr, kMessages, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  }
}

// However many versions a worker missed, its fetch brings one message: the difference between the center's
// parameters and the worker's, compressed, with what it could not carry left for the next download.
TEST(AsyncExchange, ADownloadIsOneMessageHoweverManyVersionsWereMissed) {
  if (test::world_size() < 2) GTEST_SKIP() << "needs a center and at least one worker (np >= 2)";
  const AsyncShape s = shape();
  const AsyncLayout layout(s);
  const std::vector<float> init = initial_params();
  constexpr int kMissed = 30;
  if (rank() == 0) {
    std::vector<float> global = init;
    AsyncCenter center(MPI_COMM_WORLD, s, global.data(), 40, 0, 0);  // a resumed window: versions start at 40
    auto barrier = [&] {
      center.request_barrier(AsyncBarrier::checkpoint);
      while (!center.barrier_reached()) {
        (void)center.take();
        usleep(100);
      }
      center.end_barrier();
    };
    barrier();  // round 1: every worker has fetched version 40 in full
    for (int k = 0; k < kMissed; ++k) {
      const std::vector<float> u = make_delta(0, k);
      for (size_t i = 0; i < kN; ++i) global[i] += u[i];
      center.publish(1);
    }
    MPI_Bcast(global.data(), int(kN), MPI_FLOAT, 0, MPI_COMM_WORLD);
    barrier();  // round 2: one fetch each
    EXPECT_EQ(center.version(), 40u + kMissed);
    for (int w = 0; w < workers(); ++w) {
      std::vector<float> have(kN);
      MPI_Recv(have.data(), int(kN), MPI_FLOAT, w + 1, 6, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      size_t differ = 0;
      for (size_t i = 0; i < kN; ++i) differ += have[i] != center.mirror(w)[i] ? 1 : 0;
      EXPECT_EQ(differ, 0u) << "worker rank " << w + 1;
    }
  } else {
    AsyncWorker worker(MPI_COMM_WORLD, s, rank(), 60.0);
    std::vector<float> base(kN, 0.0f);
    AsyncWorker::Published p = worker.fetch(base.data());
    EXPECT_TRUE(p.full);
    EXPECT_EQ(p.version, 40u);
    EXPECT_EQ(std::vector<float>(base), init) << "the first fetch brings the window's first parameters";
    while (p.barrier_seq != 1) {
      usleep(200);
      p = worker.fetch(base.data());
    }
    worker.ack_barrier(p.barrier_seq);
    std::vector<float> global(kN);
    MPI_Bcast(global.data(), int(kN), MPI_FLOAT, 0, MPI_COMM_WORLD);
    // The center published every missed version before the broadcast: one fetch brings the newest.
    const uint64_t got_before = worker.bytes_got();
    double gap_before = 0.0;
    for (size_t i = 0; i < kN; ++i) gap_before += std::fabs(double(global[i]) - base[i]);
    p = worker.fetch(base.data());
    const uint64_t got = worker.bytes_got() - got_before;
    EXPECT_TRUE(p.downloaded);
    EXPECT_EQ(p.version, 40u + kMissed);
    // The header, the roster, this worker's slot and its download's seq, then the record with its message, then the
    // seq again.
    const size_t small = sizeof(AsyncLayout::Header) + size_t(workers()) * sizeof(uint64_t) +
                         sizeof(AsyncLayout::Slot) + 2 * sizeof(uint64_t);
    EXPECT_EQ(got, small + layout.download_bytes()) << "a download is one message";
    // One 1-bit message of the difference removes a good share of it (the sign is right wherever the difference is
    // not zero; in expectation the L1 gap shrinks by at least half for these sinusoids).
    double gap_after = 0.0;
    for (size_t i = 0; i < kN; ++i) gap_after += std::fabs(double(global[i]) - base[i]);
    EXPECT_LT(gap_after, 0.7 * gap_before);
    while (p.barrier_seq != 2) {
      usleep(200);
      p = worker.fetch(base.data());
    }
    worker.ack_barrier(p.barrier_seq);
    MPI_Send(base.data(), int(kN), MPI_FLOAT, 0, 6, MPI_COMM_WORLD);
  }
}

// Staleness counts the versions a worker has not seen, less those that applied its own messages after the worker's
// base: the worker rebased onto its base and added those messages itself, however many were pending (a center that
// holds messages through a barrier applies several later). Worker rank 1 sends eight messages with chosen base
// versions; the other workers only join the closing barrier.
TEST(AsyncExchange, StalenessLeavesOutTheWorkersOwnMessage) {
  if (test::world_size() < 2) GTEST_SKIP() << "needs a center and at least one worker (np >= 2)";
  const AsyncShape s = shape();
  const std::vector<float> init = initial_params();
  const int kGo = 31;
  if (rank() == 0) {
    std::vector<float> global = init;
    AsyncCenter center(MPI_COMM_WORLD, s, global.data(), 0, 0, 0);
    auto take_one = [&] {
      for (;;) {
        std::vector<AsyncMessage> m = center.take();
        if (!m.empty()) return m;
        usleep(100);
      }
    };
    auto go = [] {
      int one = 1;
      MPI_Send(&one, 1, MPI_INT, 1, kGo, MPI_COMM_WORLD);
    };
    // Expected staleness of each message: base 0 at version 0; base 0 at version 2, of which version 1 was its own;
    // base 2 at version 3, its own; base 4 (its own included) at version 5, another worker's; base 6 at versions
    // 6, 7 and 8, of which 7 and 8 were its own; base 6 at version 10, of which 7, 8 and 9 were its own.
    const uint64_t expected[8] = {0, 1, 0, 1, 0, 0, 0, 1};
    for (int k = 0; k < 8; ++k) {
      std::vector<AsyncMessage> m = take_one();
      ASSERT_EQ(m.size(), 1u);
      EXPECT_EQ(m[0].worker, 0);
      EXPECT_EQ(m[0].staleness, expected[k])
          << "message " << k + 1 << " with base version " << m[0].base_version << " at version " << center.version();
      center.publish(1, m);                               // applies the message
      if (k == 0 || k == 2 || k == 6) center.publish(1);  // another worker's version
      go();
    }
    center.request_barrier(AsyncBarrier::finish);
    while (!center.barrier_reached()) {
      (void)center.take();
      usleep(100);
    }
  } else {
    AsyncWorker worker(MPI_COMM_WORLD, s, rank(), 60.0);
    std::vector<float> base(kN, 0.0f);
    AsyncWorker::Published p = worker.fetch(base.data());
    if (rank() == 1) {
      const std::vector<float> d = make_delta(rank(), 0);
      const uint64_t bases[8] = {0, 0, 2, 4, 6, 6, 6, 6};
      for (uint64_t b : bases) {
        worker.send(d.data(), b, 1);
        int one = 0;
        MPI_Recv(&one, 1, MPI_INT, 0, kGo, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      }
    }
    while (p.barrier_kind != AsyncBarrier::finish) {
      usleep(200);
      p = worker.fetch(base.data());
    }
    worker.ack_barrier(p.barrier_seq);
  }
}

TEST(AsyncExchange, CenterThatDoesNotServeFailsTheWorkerWithANamedError) {
  if (test::world_size() < 2) GTEST_SKIP() << "needs a center and at least one worker (np >= 2)";
  const AsyncShape s = shape();
  const std::vector<float> init = initial_params();
  if (rank() == 0) {
    AsyncCenter center(MPI_COMM_WORLD, s, init.data(), 0, 0, 0);
    MPI_Barrier(MPI_COMM_WORLD);  // the workers' second send times out while the center takes nothing
    for (int w = 0; w < workers(); ++w) {
      size_t taken = center.take().size();
      EXPECT_LE(taken, size_t(workers()));
    }
  } else {
    AsyncWorker worker(MPI_COMM_WORLD, s, rank(), 0.5);
    std::vector<float> d = make_delta(rank(), 0);
    worker.send(d.data(), 0, 1);  // the slot is free
    try {
      worker.send(d.data(), 0, 1);  // the center never took the first one
      ADD_FAILURE() << "send did not time out";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("the center (rank 0) has not taken"), std::string::npos) << e.what();
      EXPECT_NE(e.hint().find("async.center_timeout"), std::string::npos) << e.hint();
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

// A worker the center drops is told so by its next fetch; the others see the roster without it, and a barrier
// reaches its go with their acknowledgements alone. The center knew what the dropped worker had reserved.
TEST(AsyncExchange, ADroppedWorkerIsToldSoAndBarriersGoOnWithoutIt) {
  if (test::world_size() < 3) GTEST_SKIP() << "needs a center and at least two workers (np >= 3)";
  const AsyncShape s = shape();
  const std::vector<float> init = initial_params();
  const int last = workers();  // the rank dropped
  std::vector<int> members(static_cast<size_t>(last));
  for (int r = 0; r < last; ++r) members[size_t(r)] = r;
  if (rank() == 0) {
    AsyncCenter center(MPI_COMM_WORLD, s, init.data(), 0, 0, 0);
    for (bool all = false; !all; usleep(200)) {  // every worker fetched (a heartbeat) and reserved
      center.take();
      all = true;
      for (int w = 0; w < workers(); ++w) all = all && center.heartbeat(w) > 0 && center.reserved(w) == kReserve;
    }
    center.drop(last - 1);
    EXPECT_TRUE(center.dropped(last - 1));
    EXPECT_EQ(center.live_workers(), workers() - 1);
    EXPECT_EQ(center.members(), members);
    EXPECT_EQ(center.tokens_taken(last - 1), 0u);
    MPI_Barrier(MPI_COMM_WORLD);  // the drop is in the window
    center.request_barrier(AsyncBarrier::checkpoint);
    while (!center.barrier_reached()) {
      center.take();
      usleep(200);
    }
    center.release_barrier();
    MPI_Barrier(MPI_COMM_WORLD);
  } else {
    AsyncWorker worker(MPI_COMM_WORLD, s, rank(), 60.0);
    std::vector<float> base(kN);
    AsyncWorker::Published p = worker.fetch(base.data());
    EXPECT_FALSE(p.dropped);
    EXPECT_TRUE(worker.intact());
    const AsyncWorker::Reservation r = worker.reserve(kReserve, 1, kUnbounded);
    EXPECT_EQ(r.count, kReserve);
    MPI_Barrier(MPI_COMM_WORLD);
    p = worker.fetch(base.data());
    if (rank() == last) {
      EXPECT_TRUE(p.dropped) << "the dropped worker's fetch must say so";
    } else {
      EXPECT_FALSE(p.dropped);
      EXPECT_FALSE(worker.intact());
      EXPECT_EQ(worker.members(), members);
      while (p.barrier_seq != 1) {
        usleep(200);
        p = worker.fetch(base.data());
      }
      worker.ack_barrier(p.barrier_seq);
      while (p.barrier_go != 1) {
        usleep(200);
        p = worker.fetch(base.data());
      }
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

// The counter hands out whole multiples of the quantum below the target, and nothing once it is reached.
TEST(AsyncExchange, ReservationsStopAtTheTargetInWholeQuanta) {
  if (test::world_size() != 3) GTEST_SKIP() << "counts one worker's reservations after another's (np = 3)";
  const AsyncShape s = shape();
  const std::vector<float> init = initial_params();
  if (rank() == 0) {
    AsyncCenter center(MPI_COMM_WORLD, s, init.data(), 0, 0, 0);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    EXPECT_EQ(center.samples_reserved(), 27u) << "the counter moves by whole requests, past the target too";
    center.take();
    EXPECT_EQ(center.reserved(0), 9u + 6u);
    EXPECT_EQ(center.reserved(1), 0u);
  } else {
    AsyncWorker worker(MPI_COMM_WORLD, s, rank(), 60.0);
    if (rank() == 1) {  // target 17, quantum 3: all of [0, 9), 6 of [9, 18), none of [18, 27)
      EXPECT_EQ(worker.reserve(9, 3, 17).count, 9u);
      const AsyncWorker::Reservation second = worker.reserve(9, 3, 17);
      EXPECT_EQ(second.first, 9u);
      EXPECT_EQ(second.count, 6u);
      EXPECT_EQ(worker.reserve(9, 3, 17).count, 0u);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

}  // namespace
}  // namespace ember
