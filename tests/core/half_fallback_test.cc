// The software binary16 conversion (ckpt/float16.cc: f32_to_f16, f16_to_f32) is what
// round_fp16 and the f16 element encoding use where the compiler has no _Float16 (clang 14 on
// x86 without AVX512-FP16, e.g. the fuzz build of docs/fuzzing.md). It must give the same bits
// as the compiler's _Float16, so that a run's fp16 rounding does not depend on the compiler:
// compared here, where the compiler has _Float16, on every half value, its float neighbours,
// every midpoint between two halves (the ties) and a million random floats.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>

#include "core/precision.h"

namespace weft {
namespace {

#if defined(__FLT16_MAX__)
uint16_t hw_bits(float x) { return std::bit_cast<uint16_t>(static_cast<_Float16>(x)); }

// Both directions: fp32 -> binary16 bits, and binary16 -> fp32 of those bits.
void expect_same(float x, int& checked) {
  const uint16_t hw = hw_bits(x), sw = f32_to_f16(x);
  ASSERT_EQ(sw, hw) << "x = " << x << " (bits 0x" << std::hex << std::bit_cast<uint32_t>(x) << ")";
  const float back_hw = static_cast<float>(std::bit_cast<_Float16>(hw));
  ASSERT_EQ(std::bit_cast<uint32_t>(f16_to_f32(sw)), std::bit_cast<uint32_t>(back_hw)) << "half 0x" << std::hex << hw;
  ++checked;
}

TEST(HalfFallback, SoftwareConversionMatchesCompilerFloat16) {
  int checked = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float v = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(v)) {
      expect_same(v, checked);
      continue;
    }
    expect_same(v, checked);
    expect_same(std::nextafter(v, INFINITY), checked);
    expect_same(std::nextafter(v, -INFINITY), checked);
    if ((h & 0x7fffu) < 0x7c00u) {  // the midpoint to the next half of larger magnitude: a tie
      const float next = f16_to_f32(static_cast<uint16_t>(h + 1));
      if (std::isfinite(next)) expect_same(static_cast<float>((static_cast<double>(v) + next) / 2), checked);
    }
  }
  std::mt19937 gen(15);
  for (int i = 0; i < 1000000; ++i) expect_same(std::bit_cast<float>(static_cast<uint32_t>(gen())), checked);
  EXPECT_GT(checked, 1000000 + 3 * 63000);
}

TEST(HalfFallback, RoundFp16IsTheSoftwareRoundTrip) {
  for (float x : {0.1f, -3.14159f, 65519.0f, 65520.0f, 1e-7f, -6e-8f, 3e-8f, 1e10f}) {
    EXPECT_EQ(std::bit_cast<uint32_t>(round_fp16(x)), std::bit_cast<uint32_t>(f16_to_f32(f32_to_f16(x)))) << x;
  }
}
#else
TEST(HalfFallback, SoftwareConversionMatchesCompilerFloat16) {
  GTEST_SKIP() << "this compiler has no _Float16 on this target: nothing to compare the software conversion with";
}
#endif

}  // namespace
}  // namespace weft
