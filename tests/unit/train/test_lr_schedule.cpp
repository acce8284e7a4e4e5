// The learning-rate schedule: linear warm-up, then cosine down to the floor.
#include <gtest/gtest.h>

#include "train/lr_schedule.h"
#include "train/run_config.h"

namespace ember {
namespace {

TEST(LrSchedule, WarmupThenCosineToFloor) {
  RunConfig c;  // 100 steps, 10 of warm-up, from 1 down to 0.1
  c.training.steps = 100;
  c.optimizer.warmup_steps = 10;
  c.optimizer.lr = 1.0f;
  c.optimizer.min_lr = 0.1f;
  EXPECT_FLOAT_EQ(lr_at_step(c, 0), 0.1f);
  EXPECT_FLOAT_EQ(lr_at_step(c, 9), 1.0f);
  EXPECT_FLOAT_EQ(lr_at_step(c, 10), 1.0f);
  EXPECT_NEAR(lr_at_step(c, 55), 0.55f, 1e-6);  // halfway through the decay
  EXPECT_NEAR(lr_at_step(c, 100), 0.1f, 1e-6);
  for (int s = 11; s < 100; ++s) EXPECT_LE(lr_at_step(c, s), lr_at_step(c, s - 1));
}

}  // namespace
}  // namespace ember
