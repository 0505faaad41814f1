// LossScaler: DeepSpeed's dynamic rule (halve and skip on overflow, double after `window`
// good steps, never below the minimum), a static scale, and none.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "optim/loss_scale.h"

namespace weft {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(LossScaler, DynamicHalvesOnOverflowAndDoublesAfterTheWindow) {
  LossScaleConfig c;
  c.initial_scale = 1024;
  c.min_scale = 256;
  c.window = 3;
  LossScaler s(Precision::kFp16, c);
  ASSERT_TRUE(s.dynamic());
  EXPECT_EQ(s.scale(), 1024);
  EXPECT_EQ(s.check(2.0, kInf), LossScaler::Verdict::kSkip);
  EXPECT_EQ(s.scale(), 512);
  EXPECT_EQ(s.check(2.0, NAN), LossScaler::Verdict::kSkip);
  EXPECT_EQ(s.check(2.0, kInf), LossScaler::Verdict::kSkip);
  EXPECT_EQ(s.scale(), 256);  // the minimum holds
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(s.check(2.0, 1.0), LossScaler::Verdict::kApply);
    s.updated();
  }
  EXPECT_EQ(s.scale(), 256);
  EXPECT_EQ(s.good_steps(), 2);
  s.updated();
  EXPECT_EQ(s.scale(), 512);
  EXPECT_EQ(s.good_steps(), 0);
  // A non-finite loss is not an overflow to adjust: the run must stop.
  EXPECT_EQ(s.check(kInf, 1.0), LossScaler::Verdict::kNonFinite);
  s.restore(4096, 2);
  EXPECT_EQ(s.scale(), 4096);
  EXPECT_EQ(s.good_steps(), 2);
}

TEST(LossScaler, StaticAndNoneNeverChange) {
  LossScaleConfig c;
  c.loss_scale = 128;
  LossScaler fixed(Precision::kFp16, c);
  EXPECT_FALSE(fixed.dynamic());
  EXPECT_TRUE(fixed.active());
  EXPECT_EQ(fixed.scale(), 128);
  EXPECT_EQ(fixed.check(1.0, kInf), LossScaler::Verdict::kNonFinite);
  fixed.restore(1, 0);
  EXPECT_EQ(fixed.scale(), 128);
  LossScaler none(Precision::kBf16, LossScaleConfig{});
  EXPECT_FALSE(none.active());
  EXPECT_EQ(none.scale(), 1.0);
  EXPECT_EQ(none.check(1.0, 2.0), LossScaler::Verdict::kApply);
  none.updated();
  EXPECT_EQ(none.scale(), 1.0);
}

}  // namespace
}  // namespace weft
