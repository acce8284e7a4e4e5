// StallGuard (parallel/stall_watchdog.h): a section that outlasts its bound ends the process with exit code 1 after the
// error and hint lines; one that ends in time leaves no trace. Each case runs in a forked child, whose stderr and
// exit status the parent reads.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>

#include "parallel/stall_watchdog.h"

namespace ember {
namespace {

struct Child {
  int status = 0;
  std::string err;
  double seconds = 0;
};

// Runs `body` in a child process with stderr to a pipe; the child exits 0 if body returns.
template <class F>
Child run_child(F body) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 2);
    close(fds[0]);
    body();
    _exit(0);
  }
  close(fds[1]);
  Child c;
  char buf[512];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) c.err.append(buf, size_t(n));
  close(fds[0]);
  waitpid(pid, &c.status, 0);
  c.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return c;
}

// Stuck past 0.2 s: the two lines, exit 1, well before the 3 s the section would take. Upper bound: the bound plus
// a generous allowance for a loaded machine.
TEST(StallWatchdog, ASectionPastItsBoundEndsTheProcess) {
  const Child c = run_child([] {
    const StallGuard guard(0.2, "the center (rank 0) did not answer MPI_Win_flush", "check rank 0");
    std::this_thread::sleep_for(std::chrono::seconds(3));
  });
  ASSERT_TRUE(WIFEXITED(c.status));
  EXPECT_EQ(WEXITSTATUS(c.status), 1);
  EXPECT_NE(c.err.find("error: the center (rank 0) did not answer MPI_Win_flush\nhint: check rank 0\n"),
            std::string::npos)
      << c.err;
  EXPECT_GE(c.seconds, 0.2);
  EXPECT_LT(c.seconds, 2.0);
}

// Sections that end in time, one after another and nested, never fire, also long after their bounds.
TEST(StallWatchdog, SectionsThatEndInTimeLeaveNoTrace) {
  const Child c = run_child([] {
    for (int i = 0; i < 100; ++i) {
      const StallGuard outer(0.3, "outer", "h");
      const StallGuard inner(0.2, "inner", "h");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  });
  ASSERT_TRUE(WIFEXITED(c.status));
  EXPECT_EQ(WEXITSTATUS(c.status), 0);
  EXPECT_EQ(c.err, "");
}

// A guard that ends while the watchdog sleeps until its deadline, and a new guard that wakes it: the watchdog must not
// read the ended guard's deadline again (it did: a use after free that AddressSanitizer reports, scripts/sanitize.sh).
TEST(StallWatchdog, GuardsEndingWhileTheWatchdogWaitsOnThem) {
  const Child c = run_child([] {
    for (int i = 0; i < 200; ++i) {
      std::optional<StallGuard> g;
      g.emplace(5.0, "first", "h");
      std::this_thread::sleep_for(std::chrono::microseconds(200));  // the watchdog now waits until g's deadline
      g.reset();
      const StallGuard next(5.0, "next", "h");  // arming notifies the watchdog, which wakes
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  ASSERT_TRUE(WIFEXITED(c.status)) << c.err;
  EXPECT_EQ(WEXITSTATUS(c.status), 0) << c.err;
  EXPECT_EQ(c.err, "");
}

}  // namespace
}  // namespace ember
