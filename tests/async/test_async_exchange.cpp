// The async exchange over a real MPI window (docs/architecture.md, "Asynchronous mode"): every message arrives once
// and in order, reservations are disjoint, published parameters reach every worker (from the ring and in full), both
// error-feedback identities hold across the wire, staleness leaves out a worker's own message, and a center that does
// not serve makes a worker fail instead of hang. Registered at np 3 and 5, each with the default one-sided component
// (osc/sm on one host), --mca osc pt2pt and --mca osc ucx (UCX_TLS=tcp).
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "dist/async_exchange.h"
#include "test_support.h"

namespace ember {
namespace {

constexpr size_t kN = 1000;  // not a multiple of the block size or of 8
constexpr size_t kBlock = 64;
constexpr int kMessages = 6;      // per worker
constexpr uint64_t kReserve = 7;  // samples reserved per message

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
  std::vector<float> residual;               // the center's final error-feedback residual
  uint64_t samples = 0;
};

CenterRun serve(AsyncCenter& center) {
  const int W = workers();
  CenterRun run;
  const std::vector<float> init = initial_params();
  run.global.assign(init.begin(), init.end());
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
    for (size_t i = 0; i < kN; ++i) run.global[i] += update[i];
    center.publish(update.data(), tokens);
  }
  center.request_barrier(AsyncBarrier::finish);
  while (!center.barrier_reached()) {
    EXPECT_TRUE(center.take().empty()) << "a message arrived after the last one";
    usleep(100);
  }
  run.residual = center.feedback().residual();
  run.samples = center.samples_reserved();
  return run;
}

TEST(AsyncExchange, EveryMessageOnceInOrderAndBothErrorFeedbackIdentitiesHold) {
  if (test::world_size() < 2) GTEST_SKIP() << "needs a center and at least one worker (np >= 2)";
  const int W = workers();
  const AsyncShape s = shape();
  const std::vector<float> init = initial_params();
  if (rank() == 0) {
    AsyncCenter center(MPI_COMM_WORLD, s, init.data(), 0, 0, 0);
    const CenterRun run = serve(center);
    EXPECT_EQ(center.tokens_applied(), uint64_t(W) * (kMessages * 100 + kMessages * (kMessages + 1) / 2));
    EXPECT_EQ(run.samples, uint64_t(W) * kMessages * kReserve);
    // Published = global - residual: everything the center compressed reached the published parameters.
    std::vector<double> published_expected(kN);
    for (size_t i = 0; i < kN; ++i) published_expected[i] = run.global[i] - run.residual[i];
    MPI_Bcast(published_expected.data(), int(kN), MPI_DOUBLE, 0, MPI_COMM_WORLD);
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
    // Another worker's first message may already be applied and published when this worker first fetches (a slow
    // start under oversubscription): only version 0 is the initial parameters. The end of the test checks the
    // fetched parameters against the center's whatever the first version was.
    if (p.version == 0) {
      size_t differ = 0;
      for (size_t i = 0; i < kN; ++i) differ += base[i] != init[i] ? 1 : 0;
      EXPECT_EQ(differ, 0u) << "values at version 0 that are not the initial parameters";
    }
    std::vector<double> sum_deltas(kN, 0.0);
    std::vector<uint64_t> firsts;
    int ring_fetches = 0;
    for (int k = 0; k < kMessages; ++k) {
      firsts.push_back(worker.reserve(kReserve));
      const std::vector<float> d = make_delta(rank(), k);
      for (size_t i = 0; i < kN; ++i) sum_deltas[i] += d[i];
      worker.send(d.data(), p.version, 100 + uint64_t(k) + 1);
      p = worker.fetch(base.data());
      ring_fetches += p.full ? 0 : 1;
    }
    EXPECT_EQ(worker.seq(), uint64_t(kMessages));
    // Wait for the finish barrier, fetching as a worker would; then the final published parameters.
    while (p.barrier_kind != AsyncBarrier::finish) {
      usleep(200);
      p = worker.fetch(base.data());
      ring_fetches += p.full ? 0 : 1;
    }
    EXPECT_GT(ring_fetches, 0) << "no fetch went through the ring of published updates";
    worker.ack_barrier(p.barrier_seq);
    std::vector<double> published_expected(kN);
    MPI_Bcast(published_expected.data(), int(kN), MPI_DOUBLE, 0, MPI_COMM_WORLD);
    std::vector<double> have(base.begin(), base.end());
    // The ring path adds each update in fp32 exactly as the center adds it to its copy; the float64 expectation
    // differs from both by fp32 rounding of ~W * kMessages additions to values of order 1.
    EXPECT_LT(max_rel_diff(have, published_expected), 1e-5);
    std::vector<double> rhs(kN);
    const std::vector<float>& res = worker.feedback().residual();
    for (size_t i = 0; i < kN; ++i) rhs[i] = sum_deltas[i] - res[i];
    MPI_Send(rhs.data(), int(kN), MPI_DOUBLE, 0, 7, MPI_COMM_WORLD);
    MPI_Send(&p.staleness, 1, MPI_UINT64_T, 0, 8, MPI_COMM_WORLD);
    MPI_Gather(firsts.data(), kMessages, MPI_UINT64_T, nullptr, kMessages, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  }
}

TEST(AsyncExchange, WorkerTooFarBehindFetchesInFullThenFromTheRing) {
  if (test::world_size() < 2) GTEST_SKIP() << "needs a center and at least one worker (np >= 2)";
  const AsyncShape s = shape();
  const AsyncLayout layout(s);
  const std::vector<float> init = initial_params();
  if (rank() == 0) {
    AsyncCenter center(MPI_COMM_WORLD, s, init.data(), 40, 0, 0);  // a resumed window: versions start at 40
    std::vector<double> global(init.begin(), init.end());
    auto publish_some = [&](size_t count) {
      for (size_t k = 0; k < count; ++k) {
        const std::vector<float> u = make_delta(0, int(k));
        for (size_t i = 0; i < kN; ++i) global[i] += u[i];
        center.publish(u.data(), 1);
      }
    };
    auto expect_and_wait = [&] {
      std::vector<double> expected(kN);
      for (size_t i = 0; i < kN; ++i) expected[i] = global[i] - center.feedback().residual()[i];
      MPI_Bcast(expected.data(), int(kN), MPI_DOUBLE, 0, MPI_COMM_WORLD);
      center.request_barrier(AsyncBarrier::checkpoint);
      while (!center.barrier_reached()) {
        (void)center.take();
        usleep(100);
      }
      center.end_barrier();
    };
    expect_and_wait();                   // round 1: the first (full) fetch at version 40
    publish_some(layout.ring_size + 2);  // round 2: more than the ring holds
    expect_and_wait();
    publish_some(3);  // round 3: three updates, all in the ring
    expect_and_wait();
    EXPECT_EQ(center.version(), 40 + layout.ring_size + 5);
  } else {
    AsyncWorker worker(MPI_COMM_WORLD, s, rank(), 60.0);
    std::vector<float> base(kN, 0.0f);
    const bool expect_full[3] = {true, true, false};
    for (int round = 0; round < 3; ++round) {
      std::vector<double> expected(kN);
      MPI_Bcast(expected.data(), int(kN), MPI_DOUBLE, 0, MPI_COMM_WORLD);
      AsyncWorker::Published p = worker.fetch(base.data());
      bool any_full = p.full;
      while (p.barrier_seq != uint64_t(round + 1)) {
        usleep(200);
        p = worker.fetch(base.data());
        any_full = any_full || p.full;
      }
      if (round == 0) EXPECT_EQ(p.version, 40u);
      EXPECT_EQ(any_full, expect_full[round]) << "round " << round << " at version " << p.version;
      std::vector<double> have(base.begin(), base.end());
      EXPECT_LT(max_rel_diff(have, expected), 1e-5) << "round " << round;
      worker.ack_barrier(p.barrier_seq);
    }
  }
}

// Staleness counts the versions a worker has not seen, less its own previous message when that was applied after the
// worker's base: the worker rebased onto its base and added that message itself. Worker rank 1 sends four messages
// with chosen base versions; the other workers only join the closing barrier.
TEST(AsyncExchange, StalenessLeavesOutTheWorkersOwnMessage) {
  if (test::world_size() < 2) GTEST_SKIP() << "needs a center and at least one worker (np >= 2)";
  const AsyncShape s = shape();
  const std::vector<float> init = initial_params();
  const int kGo = 31;
  if (rank() == 0) {
    AsyncCenter center(MPI_COMM_WORLD, s, init.data(), 0, 0, 0);
    const std::vector<float> u = make_delta(0, 0);
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
    // base 2 at version 3, its own; base 4 (its own included) at version 5, another worker's.
    const uint64_t expected[4] = {0, 1, 0, 1};
    for (int k = 0; k < 4; ++k) {
      std::vector<AsyncMessage> m = take_one();
      ASSERT_EQ(m.size(), 1u);
      EXPECT_EQ(m[0].worker, 0);
      EXPECT_EQ(m[0].staleness, expected[k])
          << "message " << k + 1 << " with base version " << m[0].base_version << " at version " << center.version();
      center.publish(u.data(), 1, m);                     // applies the message
      if (k == 0 || k == 2) center.publish(u.data(), 1);  // another worker's version
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
      const uint64_t bases[4] = {0, 0, 2, 4};
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

}  // namespace
}  // namespace ember
