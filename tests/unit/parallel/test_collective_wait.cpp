// The polling wait of the NCCL communicator (parallel/collective_wait.h) with injected completions and errors: a
// healthy collective is waited for without an abort; an asynchronous error that appears while the collective never
// finishes (a dead peer) aborts the communicator once and throws instead of hanging; after that no wait polls again.
// A wait that outlasts dist.timeout (a peer that froze or lost its link reports no error) aborts and throws too.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "core/error.h"
#include "parallel/collective_wait.h"

namespace ember {
namespace {

// A fake communicator: done after `done_after` polls (never when negative), an error from poll `error_at` of the
// asynchronous error on (never when negative), and counts of every call.
struct FakeComm {
  int done_after = -1, error_at = -1;
  int done_polls = 0, error_polls = 0, aborts = 0;
  CollectivePoll poll() {
    return {[this] { return done_after >= 0 && ++done_polls > done_after; },
            [this] {
              const int at = error_polls++;
              return error_at >= 0 && at >= error_at ? std::string("ncclRemoteError: peer 1") : std::string();
            },
            [this] { ++aborts; }};
  }
};

TEST(CollectiveWait, AHealthyCollectiveIsWaitedForWithoutAnAbort) {
  CollectiveHealth health;
  FakeComm comm;
  comm.done_after = 200;  // past the yields, into the sleeps
  wait_or_abort(health, comm.poll(), "NCCL all-reduce");
  EXPECT_EQ(comm.done_polls, 201);
  EXPECT_EQ(comm.error_polls, 201);  // between polls and once at the end
  EXPECT_EQ(comm.aborts, 0);
  EXPECT_FALSE(health.aborted);
}

TEST(CollectiveWait, AnErrorWhileItNeverFinishesAbortsOnceAndThrows) {
  CollectiveHealth health;
  FakeComm comm;
  comm.error_at = 5;
  comm.done_after = 2000;  // "never" for the wait (an error check only at the end would poll the error once), but
                           // a bound on the test's time if the wait were broken
  try {
    wait_or_abort(health, comm.poll(), "NCCL all-reduce");
    FAIL() << "no error thrown";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "NCCL all-reduce failed: ncclRemoteError: peer 1; the communicator was aborted");
    EXPECT_NE(e.hint().find("another rank"), std::string::npos) << e.hint();
  }
  EXPECT_EQ(comm.aborts, 1);
  EXPECT_EQ(comm.error_polls, 6);
  EXPECT_TRUE(health.aborted);
  EXPECT_EQ(health.error, "ncclRemoteError: peer 1");

  // Every later wait on the aborted communicator throws the same error at once, polling nothing.
  FakeComm later;
  later.done_after = 0;
  EXPECT_THROW(wait_or_abort(health, later.poll(), "NCCL shutdown"), Error);
  EXPECT_EQ(later.done_polls + later.error_polls + later.aborts, 0);
}

// An error reported together with completion still fails the wait: the result may be garbage.
TEST(CollectiveWait, AnErrorAtCompletionStillAborts) {
  CollectiveHealth health;
  FakeComm comm;
  comm.done_after = 0;
  comm.error_at = 0;
  EXPECT_THROW(wait_or_abort(health, comm.poll(), "NCCL all-gather"), Error);
  EXPECT_EQ(comm.aborts, 1);
  EXPECT_TRUE(health.aborted);
}

// No error ever comes, and the collective never completes: the wait ends at the timeout, with an abort, naming the
// operation, dist.timeout and the context. Bounds: at least the timeout; at most the timeout plus the 1 ms polls
// between checks of the clock (64 of them) and a generous allowance for a loaded machine.
TEST(CollectiveWait, AWaitThatOutlastsTheTimeoutAbortsAndNamesTheStep) {
  CollectiveHealth health;
  FakeComm comm;  // never done, never an error
  const CollectiveWatch watch{0.25, "step 7"};
  const auto start = std::chrono::steady_clock::now();
  try {
    wait_or_abort(health, comm.poll(), "NCCL all-reduce", watch);
    FAIL() << "no error thrown";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "NCCL all-reduce did not complete within dist.timeout = 0.25 s (step 7): a peer rank died, froze or "
                 "lost its network link");
    EXPECT_NE(e.hint().find("--resume auto"), std::string::npos) << e.hint();
  }
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(waited, 0.25);
  EXPECT_LT(waited, 2.0);
  EXPECT_EQ(comm.aborts, 1);
  EXPECT_TRUE(health.aborted);
}

// A watch may carry its own hint (an async worker group's: the group leaves, the job goes on); the default says
// that the whole job stops.
TEST(CollectiveWait, ATimeoutGivesTheWatchsOwnHintWhereItHasOne) {
  CollectiveWatch watch{0.01, "", "this group leaves the job"};
  try {
    poll_until([] { return false; }, watch, "MPI all-reduce");
    FAIL() << "no error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.hint(), "this group leaves the job");
  }
  watch.hint.clear();
  try {
    poll_until([] { return false; }, watch, "MPI all-reduce");
    FAIL() << "no error thrown";
  } catch (const Error& e) {
    EXPECT_NE(e.hint().find("every rank of the job stops"), std::string::npos) << e.hint();
  }
}

// Without a timeout (0) a slow collective is waited for however long it takes.
TEST(CollectiveWait, NoTimeoutWaitsAsLongAsItTakes) {
  int polls = 0;
  poll_until([&] { return ++polls > 3000; }, CollectiveWatch{}, "MPI all-reduce");
  EXPECT_EQ(polls, 3001);
}

}  // namespace
}  // namespace ember
