// PassLimits: --stop-after and --max-runtime over an async invocation's passes (a join barrier starts a new pass).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "train/async/pass_limits.h"

namespace ember {
namespace {

// Each pass gets the steps the earlier passes left, counted from where each started (a resumed run starts past 0),
// and at least one.
TEST(PassLimits, StepsLeftCarryOverPasses) {
  TrainLimits limits;
  limits.stop_after = 10;
  PassLimits passes(limits);
  TrainLimits first = passes.next();
  EXPECT_EQ(first.stop_after, 10);
  first.on_start(100);  // resumed at step 100
  passes.ended(104);
  TrainLimits second = passes.next();
  EXPECT_EQ(second.stop_after, 6);
  second.on_start(104);
  passes.ended(110);
  EXPECT_EQ(passes.next().stop_after, 1);  // all used: one more step, never 0 (which means no limit)
}

// A pass that ended before it started (set-up failed, or a join barrier came first) used no steps.
TEST(PassLimits, APassThatNeverStartedUsesNoSteps) {
  TrainLimits limits;
  limits.stop_after = 8;
  PassLimits passes(limits);
  passes.next();
  passes.ended(50);
  EXPECT_EQ(passes.next().stop_after, 8);
}

// The wall clock runs from the invocation's start, not the pass's; at least one second is left to a pass.
TEST(PassLimits, RuntimeRunsFromTheInvocationsStart) {
  double now = 1000.0;
  TrainLimits limits;
  limits.max_runtime = 100.0;
  PassLimits passes(limits, [&] { return now; });
  EXPECT_DOUBLE_EQ(passes.next().max_runtime, 100.0);
  now += 30.0;
  EXPECT_DOUBLE_EQ(passes.next().max_runtime, 70.0);
  now += 69.5;
  EXPECT_DOUBLE_EQ(passes.next().max_runtime, 1.0);
  EXPECT_EQ(passes.next().stop_after, 0) << "no step limit was set";
}

// The run folder's start (on_start) belongs to the first pass only; later passes still record where they start.
TEST(PassLimits, OnlyTheFirstPassStartsTheRunFolder) {
  std::vector<int64_t> started;
  TrainLimits limits;
  limits.stop_after = 20;
  limits.on_start = [&](int64_t step) { started.push_back(step); };
  PassLimits passes(limits);
  passes.next().on_start(0);
  passes.ended(5);
  const TrainLimits second = passes.next();
  ASSERT_TRUE(second.on_start);
  second.on_start(5);
  passes.ended(9);
  EXPECT_EQ(started, std::vector<int64_t>{0});
  EXPECT_EQ(passes.next().stop_after, 11);
}

}  // namespace
}  // namespace ember
