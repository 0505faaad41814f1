// DType names, sizes, the precision mapping and element encodings against hand-written bit
// patterns (IEEE 754 binary32 / binary16, bfloat16 = the top half of binary32).
#include "core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"

namespace weft {
namespace {

TEST(DType, NamesParseBack) {
  for (int i = 0; i < kDTypes; ++i) {
    const auto t = static_cast<DType>(i);
    EXPECT_EQ(parse_dtype(dtype_name(t)), t) << dtype_name(t);
  }
  EXPECT_EQ(parse_dtype("fp32"), DType::kF32);
  EXPECT_EQ(parse_dtype("fp16"), DType::kF16);
  EXPECT_THROW(parse_dtype("f64"), InputError);
}

TEST(DType, BytesForN) {
  EXPECT_EQ(dtype_bytes(DType::kF32, 5), 20u);
  EXPECT_EQ(dtype_bytes(DType::kBF16, 5), 10u);
  EXPECT_EQ(dtype_bytes(DType::kF16, 5), 10u);
  EXPECT_EQ(dtype_bytes(DType::kI32, 5), 20u);
  EXPECT_EQ(dtype_bytes(DType::kI8, 5), 5u);
  EXPECT_EQ(dtype_bytes(DType::kI4, 5), 3u);  // two per byte, rounded up
  EXPECT_EQ(dtype_bytes(DType::kI4, 6), 3u);
  EXPECT_EQ(dtype_bytes(DType::kI4, 0), 0u);
}

TEST(DType, PrecisionMapping) {
  for (Precision p : {Precision::kFp32, Precision::kBf16, Precision::kFp16}) {
    EXPECT_EQ(precision_of(dtype_of(p)), p);
    EXPECT_EQ(dtype_bytes(dtype_of(p), 1), static_cast<size_t>(precision_bytes(p)));
  }
  EXPECT_THROW(precision_of(DType::kI8), InputError);
}

uint32_t encoded(DType t, float v) {
  uint8_t b[4] = {0, 0, 0, 0};
  const int n = encode_element(t, v, b);
  uint32_t u = 0;
  std::memcpy(&u, b, static_cast<size_t>(n));
  return u;
}

TEST(DType, EncodeElement) {
  EXPECT_EQ(encoded(DType::kF32, 1.5f), 0x3fc00000u);
  EXPECT_EQ(encoded(DType::kBF16, 1.5f), 0x3fc0u);
  EXPECT_EQ(encoded(DType::kBF16, 1.00390625f), 0x3f80u);  // 1 + 2^-8: a tie, to even
  EXPECT_EQ(encoded(DType::kBF16, 1.01171875f), 0x3f82u);  // 1 + 3 * 2^-8: a tie, to even (up)
  EXPECT_EQ(encoded(DType::kF16, 1.5f), 0x3e00u);
  EXPECT_EQ(encoded(DType::kF16, 65520.0f), 0x7c00u);  // rounds past 65504: inf
  EXPECT_EQ(encoded(DType::kI32, -7.0f), 0xfffffff9u);
  EXPECT_EQ(encoded(DType::kI8, -3.0f), 0xfdu);
  EXPECT_EQ(encoded(DType::kI4, -3.0f), 0xddu);  // both nibbles
  EXPECT_EQ(encoded(DType::kI4, 7.0f), 0x77u);
  EXPECT_THROW(encoded(DType::kI8, 0.5f), InputError);
  EXPECT_THROW(encoded(DType::kI8, 128.0f), InputError);
  EXPECT_THROW(encoded(DType::kI4, -9.0f), InputError);
  EXPECT_THROW(encoded(DType::kI32, std::numeric_limits<float>::quiet_NaN()), InputError);
}

TEST(DType, Bf16HostType) {
  EXPECT_EQ(float_to_bf16(1.0f).bits, 0x3f80u);
  EXPECT_EQ(float_to_bf16(-2.0f).bits, 0xc000u);
  EXPECT_EQ(bf16_to_float(bf16{0x3fc0}), 1.5f);
  const bf16 nan = float_to_bf16(std::numeric_limits<float>::signaling_NaN());
  EXPECT_TRUE(std::isnan(bf16_to_float(nan)));
  EXPECT_TRUE(nan.bits & 0x0040u);  // quiet
  // Agrees with the precision emulation away from NaN.
  for (float x : {0.1f, -3.3e5f, 1e-30f, 3.0e38f, 65504.0f}) {
    EXPECT_EQ(bf16_to_float(float_to_bf16(x)), round_bf16(x)) << x;
  }
}

}  // namespace
}  // namespace weft
