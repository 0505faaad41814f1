#include <gtest/gtest.h>

#include <cmath>

#include "core/rng.h"

namespace weft {
namespace {

// Known-answer test from the Random123 distribution (kat_vectors, philox4x32 10 rounds):
// counter {0,0,0,0}, key {0,0} -> {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}.
TEST(Philox, KnownAnswerZero) {
  Philox::Block out = Philox::block({0, 0, 0, 0}, 0);
  EXPECT_EQ(out[0], 0x6627e8d5u);
  EXPECT_EQ(out[1], 0xe169c58du);
  EXPECT_EQ(out[2], 0xbc57ac4cu);
  EXPECT_EQ(out[3], 0x9b00dbd8u);
}

// counter all ones, key all ones -> {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}.
TEST(Philox, KnownAnswerOnes) {
  Philox::Block out = Philox::block({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, ~0ull);
  EXPECT_EQ(out[0], 0x408f276du);
  EXPECT_EQ(out[1], 0x41c83b0eu);
  EXPECT_EQ(out[2], 0xa20bc7c6u);
  EXPECT_EQ(out[3], 0x6d5451fdu);
}

TEST(Philox, NormalMoments) {
  const int n = 200000;
  double s = 0, s2 = 0;
  for (int i = 0; i < n; ++i) {
    double x = Philox::normal(42, 7, i);
    s += x;
    s2 += x * x;
  }
  double mean = s / n, var = s2 / n - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(var, 1.0, 0.01);
}

}  // namespace
}  // namespace weft
