// Learning-rate schedules: the Noam rate by hand (paper Eq. 3), warmup + constant and
// warmup + cosine at their landmarks, and the errors for invalid settings.
#include "attn/train/schedule.h"

#include <gtest/gtest.h>

#include <cmath>

#include "attn/core/error.h"

namespace attn::train {
namespace {

TEST(NoamSchedule, MatchesHandComputedValues) {
  // D = 64, warmup = 400: D^-0.5 = 0.125.
  NoamSchedule s(64, 400);
  EXPECT_NEAR(s.lr(1), 0.125 * 1.0 / 8000.0, 1e-18);          // step * 400^-1.5 = 1/8000
  EXPECT_NEAR(s.lr(400), 0.125 * 0.05, 1e-15);                // 400^-0.5 = 0.05 (both branches)
  EXPECT_NEAR(s.lr(4000), 0.125 / std::sqrt(4000.0), 1e-15);  // 0.001976423537605237
  EXPECT_NEAR(s.lr(4000), 0.001976423537605237, 1e-15);
  EXPECT_NEAR(s.lr(100), 0.125 * 100.0 / 8000.0, 1e-15);  // still warming up: linear
}

TEST(NoamSchedule, PeaksExactlyAtTheEndOfWarmup) {
  NoamSchedule s(64, 400);
  int64_t best = 1;
  for (int64_t k = 1; k <= 5000; ++k)
    if (s.lr(k) > s.lr(best)) best = k;
  EXPECT_EQ(best, 400);
  EXPECT_LT(s.lr(399), s.lr(400));
  EXPECT_LT(s.lr(401), s.lr(400));
  // The paper's base model: D = 512, warmup 4000 peaks at (512 * 4000)^-0.5.
  EXPECT_NEAR(NoamSchedule(512, 4000).lr(4000), 1.0 / std::sqrt(512.0 * 4000.0), 1e-15);
}

TEST(NoamSchedule, ScaleMultipliesEveryValue) {
  NoamSchedule a(64, 400), b(64, 400, 2.5);
  for (int64_t k : {1, 10, 400, 9999}) EXPECT_NEAR(b.lr(k), 2.5 * a.lr(k), 1e-15);
}

TEST(ConstantSchedule, WarmsUpLinearlyThenHolds) {
  ConstantSchedule s(1e-3, 10);
  EXPECT_NEAR(s.lr(1), 1e-4, 1e-18);
  EXPECT_NEAR(s.lr(5), 5e-4, 1e-18);
  EXPECT_EQ(s.lr(10), 1e-3);
  EXPECT_EQ(s.lr(100000), 1e-3);
  ConstantSchedule flat(3e-4, 0);
  EXPECT_EQ(flat.lr(1), 3e-4);
}

TEST(CosineSchedule, WarmsUpThenFallsToTheMinimum) {
  CosineSchedule s(1e-3, 1e-5, 100, 1100);
  EXPECT_NEAR(s.lr(50), 5e-4, 1e-18);
  EXPECT_NEAR(s.lr(100), 1e-3, 1e-18);
  EXPECT_NEAR(s.lr(600), (1e-3 + 1e-5) / 2, 1e-15);  // half-way: cos(pi/2) = 0
  EXPECT_NEAR(s.lr(1100), 1e-5, 1e-18);
  EXPECT_NEAR(s.lr(5000), 1e-5, 1e-18);
  for (int64_t k = 101; k <= 1100; ++k) EXPECT_LE(s.lr(k), s.lr(k - 1)) << k;
}

TEST(LrSchedule, MakeScheduleFollowsTheConfig) {
  ScheduleConfig c;
  c.d_model = 64;
  c.warmup_steps = 400;
  EXPECT_EQ(make_schedule(c)->lr(400), NoamSchedule(64, 400).lr(400));
  c.kind = parse_schedule_kind("constant");
  c.lr = 2e-3;
  EXPECT_EQ(make_schedule(c)->lr(1000), 2e-3);
  c.kind = ScheduleKind::Cosine;
  c.total_steps = 1400;
  c.min_lr = 1e-4;
  EXPECT_NEAR(make_schedule(c)->lr(1400), 1e-4, 1e-18);
  EXPECT_EQ(make_schedule(c)->describe(), "cosine(lr=0.002, min_lr=0.0001, warmup=400, total=1400)");
  EXPECT_STREQ(schedule_kind_name(ScheduleKind::Noam), "noam");
}

TEST(LrSchedule, InvalidSettingsAreErrors) {
  EXPECT_THROW(NoamSchedule(64, 400).lr(0), Error);
  EXPECT_THROW(NoamSchedule(0, 400), Error);
  EXPECT_THROW(NoamSchedule(64, 0), Error);
  EXPECT_THROW(NoamSchedule(64, 400, 0.0), Error);
  EXPECT_THROW(NoamSchedule(64, 400, NAN), Error);
  EXPECT_THROW(ConstantSchedule(-1e-3, 0), Error);
  EXPECT_THROW(ConstantSchedule(1e-3, -1), Error);
  EXPECT_THROW(ConstantSchedule(1e-3, 0).lr(-3), Error);
  EXPECT_THROW(CosineSchedule(1e-3, 0, 100, 100), Error);   // total must exceed warmup
  EXPECT_THROW(CosineSchedule(1e-3, 2e-3, 0, 100), Error);  // min above peak
  EXPECT_THROW(CosineSchedule(1e-3, -1, 0, 100), Error);
  EXPECT_THROW(parse_schedule_kind("linear"), Error);
  ScheduleConfig c;
  c.kind = ScheduleKind::Cosine;  // total_steps left at 0
  EXPECT_THROW(make_schedule(c), Error);
}

}  // namespace
}  // namespace attn::train
