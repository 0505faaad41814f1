// Block quantization's host reference (core/block_quant.h) against closed forms: the
// per-element error bound absmax/qmax/2, wire bytes worked out by hand, the int4 nibble
// layout, zero padding, all-zero and non-finite blocks, accumulate and error-feedback modes,
// 16-bit inputs. Independent quantities (absmax, scales, q values) are computed here with
// plain loops, not with the code under test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/block_quant.h"
#include "core/error.h"
#include "core/precision.h"

namespace weft {
namespace {

std::vector<float> randn(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(g);
  return v;
}

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float scale_at(const std::vector<uint8_t>& wire, int64_t n, const QuantSpec& q, int64_t k) {
  float s;
  std::memcpy(&s, wire.data() + quant_data_bytes(n, q) + 4 * k, 4);
  return s;
}

std::vector<uint8_t> quantize(const std::vector<float>& x, const QuantSpec& q, float* residual = nullptr) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> wire(static_cast<size_t>(quant_wire_bytes(n, q)), 0xa5);  // garbage first
  quantize_blocks_ref(wire.data(), x.data(), n, q, residual);
  return wire;
}

std::vector<float> dequantize(const std::vector<uint8_t>& wire, int64_t n, const QuantSpec& q) {
  std::vector<float> out(static_cast<size_t>(n), std::numeric_limits<float>::quiet_NaN());
  dequantize_blocks_ref(out.data(), wire.data(), n, q, false);
  return out;
}

// The wire of a hand-worked case: data bytes then the scales' bytes.
std::vector<uint8_t> expected_wire(std::vector<uint8_t> data, const std::vector<float>& scales) {
  for (float s : scales) {
    uint8_t b[4];
    std::memcpy(b, &s, 4);
    data.insert(data.end(), b, b + 4);
  }
  return data;
}

TEST(BlockQuantSizes, ClosedForms) {
  const QuantSpec i8{8, 2048}, i4{4, 3};
  EXPECT_EQ(quant_qmax(8), 127);
  EXPECT_EQ(quant_qmax(4), 7);
  EXPECT_EQ(quant_wire_bytes(0, i8), 0);
  EXPECT_EQ(quant_num_blocks(0, i8), 0);
  EXPECT_EQ(quant_num_blocks(2048, i8), 1);
  EXPECT_EQ(quant_num_blocks(2049, i8), 2);
  EXPECT_EQ(quant_data_bytes(1, i8), 4);
  EXPECT_EQ(quant_data_bytes(6145, i8), 6148);
  EXPECT_EQ(quant_wire_bytes(6145, i8), 6148 + 4 * 4);
  EXPECT_EQ(quant_data_bytes(5, i4), 4);   // 3 bytes -> 4
  EXPECT_EQ(quant_wire_bytes(5, i4), 4 + 2 * 4);
  EXPECT_EQ(quant_data_bytes(9, i4), 8);   // 5 bytes -> 8
  EXPECT_EQ(quant_data_bytes(8, i4), 4);
  // 16M floats, block 2048: int8 is 1 byte + 4/2048 per element.
  EXPECT_EQ(quant_wire_bytes(int64_t{1} << 24, i8), (int64_t{1} << 24) + 4 * 8192);
}

TEST(BlockQuantSpec, RejectsBadBitsAndBlocks) {
  EXPECT_NO_THROW(check_quant_spec({8, 1}, "x"));
  EXPECT_NO_THROW(check_quant_spec({4, int64_t{1} << 24}, "x"));
  for (const QuantSpec& q : {QuantSpec{3, 2048}, QuantSpec{16, 2048}, QuantSpec{8, 0}, QuantSpec{4, -5},
                             QuantSpec{8, (int64_t{1} << 24) + 1}}) {
    try {
      check_quant_spec(q, "zero_pp.qgz");
      ADD_FAILURE() << "no error for bits " << q.bits << " block " << q.block;
    } catch (const InputError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("zero_pp.qgz"), std::string::npos) << m;
      EXPECT_NE(m.find(std::to_string(q.bits) + " bits"), std::string::npos) << m;
      EXPECT_NE(m.find("block " + std::to_string(q.block)), std::string::npos) << m;
    }
  }
  std::vector<uint8_t> wire(16);
  const float x[2] = {1.0f, 2.0f};
  EXPECT_THROW(quantize_blocks_ref(wire.data(), x, 2, {5, 4}), InputError);
}

// [1, -2, 3, 0.5] in one block of 4: s = 3/127; q = rint(x / s) = 42 (42.33), -85 (-84.67),
// 127, 21 (21.17).
TEST(BlockQuantBytes, Int8HandWorked) {
  const QuantSpec q{8, 4};
  const std::vector<float> x = {1.0f, -2.0f, 3.0f, 0.5f};
  const float s = 3.0f / 127.0f;
  EXPECT_EQ(quantize(x, q), expected_wire({42, 0xab /* -85 */, 127, 21}, {s}));
  const std::vector<float> d = dequantize(quantize(x, q), 4, q);
  EXPECT_EQ(d, (std::vector<float>{42 * s, -85 * s, 127 * s, 21 * s}));
}

// The same values in int4: s = 3/7; q = 2 (2.33), -5 (-4.67), 7, 1 (1.17). Bytes: 2 | -5 << 4
// = 0xb2, 7 | 1 << 4 = 0x17, two padding bytes.
TEST(BlockQuantBytes, Int4HandWorked) {
  const QuantSpec q{4, 4};
  const std::vector<float> x = {1.0f, -2.0f, 3.0f, 0.5f};
  const float s = 3.0f / 7.0f;
  EXPECT_EQ(quantize(x, q), expected_wire({0xb2, 0x17, 0, 0}, {s}));
  EXPECT_EQ(dequantize(quantize(x, q), 4, q), (std::vector<float>{2 * s, -5 * s, 7 * s, 1 * s}));
}

// An odd block size: byte 1 holds the last element of block 0 and the first of block 1.
// Blocks [1, -2, 3] (s = 3/7, q 2, -5, 7) and [2, -7] (s = 1, q 2, -7): bytes 0xb2, 0x27,
// 0x09 (-7 = 0x9, high nibble padding), 0.
TEST(BlockQuantBytes, Int4BlocksShareAByte) {
  const QuantSpec q{4, 3};
  const std::vector<float> x = {1.0f, -2.0f, 3.0f, 2.0f, -7.0f};
  EXPECT_EQ(quantize(x, q), expected_wire({0xb2, 0x27, 0x09, 0}, {3.0f / 7.0f, 1.0f}));
  EXPECT_EQ(dequantize(quantize(x, q), 5, q), (std::vector<float>{2 * (3.0f / 7.0f), -5 * (3.0f / 7.0f),
                                                                  7 * (3.0f / 7.0f), 2.0f, -7.0f}));
}

// Ties round half to even: with s = 1 (absmax 127), 2.5 -> 2, -2.5 -> -2, 0.5 -> 0, 1.5 -> 2.
TEST(BlockQuantBytes, RoundsHalfToEven) {
  const QuantSpec q{8, 8};
  const std::vector<float> x = {127.0f, 2.5f, -2.5f, 0.5f, 1.5f, -127.0f, -0.5f, 3.5f};
  EXPECT_EQ(quantize(x, q), expected_wire({127, 2, 0xfe, 0, 2, 0x81, 0, 4}, {1.0f}));
}

// Integers in [-7, 7] with a 7 in every block have scale 1: they round-trip exactly, and each
// byte holds element 2j in its low nibble and 2j+1 in its high nibble.
TEST(BlockQuantInt4, NibblesRoundTrip) {
  std::mt19937 g(7);
  std::uniform_int_distribution<int> d(-7, 7);
  for (int64_t n : {1, 2, 3, 15, 16, 17, 101}) {
    for (int64_t block : {1, 2, 5, 8, 64}) {
      const QuantSpec q{4, block};
      std::vector<float> x(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) x[i] = i % block == 0 ? (i % 2 ? -7.0f : 7.0f) : static_cast<float>(d(g));
      const std::vector<uint8_t> wire = quantize(x, q);
      for (int64_t i = 0; i < n; ++i) {
        const int nib = i % 2 ? wire[i / 2] >> 4 : wire[i / 2] & 0xf;
        EXPECT_EQ(nib, static_cast<int>(x[i]) & 0xf) << "n " << n << " block " << block << " element " << i;
      }
      for (int64_t k = 0; k < quant_num_blocks(n, q); ++k) EXPECT_EQ(scale_at(wire, n, q, k), 1.0f);
      EXPECT_EQ(dequantize(wire, n, q), x) << "n " << n << " block " << block;
    }
  }
}

// Every byte between the last value and the scales is zero, whatever the buffer held before.
TEST(BlockQuantPadding, IsZero) {
  for (int bits : {8, 4}) {
    for (int64_t n = 1; n <= 17; ++n) {
      const QuantSpec q{bits, 3};
      const std::vector<uint8_t> wire = quantize(randn(n, static_cast<uint32_t>(n)), q);
      ASSERT_EQ(static_cast<int64_t>(wire.size()), quant_wire_bytes(n, q));
      const int64_t data = quant_data_bytes(n, q), used = (n * bits + 7) / 8;
      EXPECT_EQ(data % 4, 0);
      EXPECT_TRUE(data - used < 4);
      for (int64_t b = used; b < data; ++b) EXPECT_EQ(wire[b], 0) << bits << " bits, n " << n << ", byte " << b;
      if (bits == 4 && n % 2) {
        EXPECT_EQ(wire[n / 2] >> 4, 0) << "the high nibble after an odd count, n " << n;
      }
    }
  }
}

// The bound of block_quant.h: |x - x'| <= absmax/qmax/2 (+ the fp32 rounding of q * s), with
// the scale exactly absmax / qmax in fp32; random data, many sizes and blocks.
TEST(BlockQuantError, WithinHalfAScale) {
  uint32_t seed = 1;
  for (int bits : {8, 4}) {
    const float qmax = static_cast<float>(quant_qmax(bits));
    for (int64_t block : {int64_t{1}, int64_t{3}, int64_t{7}, int64_t{64}, int64_t{2048}, int64_t{1} << 20}) {
      for (int64_t n : {1, 2, 7, 63, 64, 65, 1000, 2047, 2048, 2049, 5001}) {
        const QuantSpec q{bits, block};
        const float spread = seed % 2 ? 1.0f : 1e-3f;
        std::vector<float> x = randn(n, seed++, spread);
        const std::vector<uint8_t> wire = quantize(x, q);
        const std::vector<float> d = dequantize(wire, n, q);
        for (int64_t k = 0; k < quant_num_blocks(n, q); ++k) {
          const int64_t i0 = k * block, i1 = std::min(n, i0 + block);
          float absmax = 0.0f;
          for (int64_t i = i0; i < i1; ++i) absmax = std::max(absmax, std::fabs(x[i]));
          const float s = absmax / qmax;
          ASSERT_EQ(bits_of(scale_at(wire, n, q, k)), bits_of(s)) << "block " << k;
          // Half a scale, plus the fp32 roundings of x / s (before rint) and of q * s: each
          // under qmax + 1 = 128 ulps of 2^-24 relative to s.
          const double bound = 0.5 * s + 256.0 * std::ldexp(static_cast<double>(s), -24);
          for (int64_t i = i0; i < i1; ++i) {
            ASSERT_LE(std::fabs(static_cast<double>(x[i]) - d[i]), bound)
                << bits << " bits, block " << block << ", n " << n << ", element " << i << ": x " << x[i]
                << " x' " << d[i];
          }
        }
      }
    }
  }
}

// An all-zero block has scale 0 and dequantizes to zeros; its neighbours are unaffected.
TEST(BlockQuantZeros, AllZeroBlock) {
  for (int bits : {8, 4}) {
    const QuantSpec q{bits, 4};
    const std::vector<float> x = {0.0f, -0.0f, 0.0f, 0.0f, 1.0f, 2.0f, 3.0f, -3.0f, 0.0f};
    const std::vector<uint8_t> wire = quantize(x, q);
    EXPECT_EQ(bits_of(scale_at(wire, 9, q, 0)), 0u);
    EXPECT_EQ(scale_at(wire, 9, q, 1), 3.0f / static_cast<float>(quant_qmax(bits)));
    EXPECT_EQ(bits_of(scale_at(wire, 9, q, 2)), 0u);
    const std::vector<float> d = dequantize(wire, 9, q);
    for (int i : {0, 1, 2, 3, 8}) EXPECT_EQ(bits_of(d[i]), 0u) << bits << " bits, element " << i;
    const float s = 3.0f / static_cast<float>(quant_qmax(bits));
    EXPECT_EQ(d[6], static_cast<float>(quant_qmax(bits)) * s);
    EXPECT_EQ(d[7], static_cast<float>(-quant_qmax(bits)) * s);
  }
}

// A NaN makes its block's scale the quiet NaN 0x7fc00000 and every value of that block NaN; an
// inf makes the scale inf and every value of the block non-finite. Other blocks are unaffected.
TEST(BlockQuantNonFinite, PoisonsOnlyTheirBlock) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  float neg_nan;
  const uint32_t nn = 0xffc12345u;  // a NaN with a sign and a payload
  std::memcpy(&neg_nan, &nn, 4);
  for (int bits : {8, 4}) {
    const QuantSpec q{bits, 3};
    const std::vector<float> x = {1.0f, nan, 2.0f, 1.0f, -inf, 0.5f, 1.0f, 2.0f, 3.0f, neg_nan, 0.0f, 0.0f};
    const std::vector<uint8_t> wire = quantize(x, q);
    EXPECT_EQ(bits_of(scale_at(wire, 12, q, 0)), 0x7fc00000u);
    EXPECT_EQ(scale_at(wire, 12, q, 1), inf);
    EXPECT_EQ(scale_at(wire, 12, q, 2), 3.0f / static_cast<float>(quant_qmax(bits)));
    EXPECT_EQ(bits_of(scale_at(wire, 12, q, 3)), 0x7fc00000u);
    const std::vector<float> d = dequantize(wire, 12, q);
    for (int i : {0, 1, 2, 3, 4, 5, 9, 10, 11}) EXPECT_FALSE(std::isfinite(d[i])) << bits << " bits, element " << i;
    EXPECT_EQ(d[8], static_cast<float>(quant_qmax(bits)) * (3.0f / static_cast<float>(quant_qmax(bits))));
  }
}

// accumulate: out = y + x' (one fp32 sum per element), x' the plain dequantization.
TEST(BlockQuantAccumulate, AddsTheDequantizedValues) {
  for (int bits : {8, 4}) {
    const QuantSpec q{bits, 100};
    const int64_t n = 1001;
    const std::vector<uint8_t> wire = quantize(randn(n, 11), q);
    const std::vector<float> d = dequantize(wire, n, q);
    std::vector<float> out = randn(n, 12);
    const std::vector<float> y = out;
    dequantize_blocks_ref(out.data(), wire.data(), n, q, true);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(bits_of(out[i]), bits_of(y[i] + d[i])) << "element " << i;
  }
}

// Error feedback: one step quantizes v = x + r_old and leaves r_new = v - x', so that
// x' + r_new = v up to one fp32 rounding; over many steps the dequantized values' sum tracks
// the inputs' sum within the last residual (about half a scale), where plain quantization of a
// value that rounds to zero falls behind by the whole sum.
TEST(BlockQuantResidual, ErrorFeedback) {
  for (int bits : {8, 4}) {
    const QuantSpec q{bits, 64};
    const int64_t n = 300;
    const float qmax = static_cast<float>(quant_qmax(bits));
    std::vector<float> r = randn(n, 21, 0.01f);
    {
      const std::vector<float> x = randn(n, 22);
      const std::vector<float> r_old = r;
      const std::vector<uint8_t> wire = quantize(x, q, r.data());
      const std::vector<float> d = dequantize(wire, n, q);
      // The same bytes as quantizing the sum without a residual.
      std::vector<float> v(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) v[i] = x[i] + r_old[i];
      EXPECT_EQ(wire, quantize(v, q));
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(bits_of(r[i]), bits_of(v[i] - d[i])) << "element " << i;
        ASSERT_LE(std::fabs(static_cast<double>(d[i]) + r[i] - v[i]), 1e-7 * (std::fabs(v[i]) + std::fabs(d[i])) + 1e-30);
      }
    }
    // Many steps: element 0 of each block is large (it sets the scale), the others are small
    // constants that plain quantization rounds to zero every step.
    std::fill(r.begin(), r.end(), 0.0f);
    const int steps = 200;
    std::vector<double> sum_x(static_cast<size_t>(n), 0.0), sum_d(static_cast<size_t>(n), 0.0),
        sum_plain(static_cast<size_t>(n), 0.0);
    double max_scale = 0.0;
    for (int t = 0; t < steps; ++t) {
      std::vector<float> x = randn(n, 100 + t, 1e-3f);
      for (int64_t i = 0; i < n; i += 64) x[i] = 1.0f;
      for (int64_t i = 1; i < n; i += 64) x[i] = 0.2f / qmax;  // under half a scale (s ~ 1/qmax)
      const std::vector<uint8_t> wire = quantize(x, q, r.data());
      const std::vector<float> d = dequantize(wire, n, q);
      const std::vector<float> plain = dequantize(quantize(x, q), n, q);
      for (int64_t k = 0; k < quant_num_blocks(n, q); ++k) max_scale = std::max<double>(max_scale, scale_at(wire, n, q, k));
      for (int64_t i = 0; i < n; ++i) {
        sum_x[i] += x[i];
        sum_d[i] += d[i];
        sum_plain[i] += plain[i];
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_LE(std::fabs(sum_x[i] - sum_d[i]), 0.5 * max_scale * 1.01 + 1e-5)
          << bits << " bits, element " << i << ": the fed-back error is bounded";
    }
    // Plain quantization drops element 1's 0.2/qmax every step: 200 steps lose 40/qmax.
    EXPECT_NEAR(sum_x[1] - sum_plain[1], steps * 0.2 / qmax, 1e-3);
    EXPECT_LT(std::fabs(sum_x[1] - sum_d[1]), 0.6 / qmax);
  }
}

// bf16 and f16 inputs widen exactly to fp32: the bytes of quantizing the widened floats.
TEST(BlockQuant16Bit, WidensExactly) {
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (int bits : {8, 4}) {
      const QuantSpec q{bits, 33};
      const int64_t n = 1000;
      const std::vector<float> src = randn(n, 31, 3.0f);
      std::vector<uint16_t> h(static_cast<size_t>(n));
      std::vector<float> wide(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        h[i] = dt == DType::kBF16 ? float_to_bf16(src[i]).bits : f32_to_f16(src[i]);
        wide[i] = dt == DType::kBF16 ? bf16_to_float(bf16{h[i]}) : f16_to_f32(h[i]);
      }
      std::vector<uint8_t> wire(static_cast<size_t>(quant_wire_bytes(n, q)), 0xcc);
      quantize_blocks_ref(wire.data(), h.data(), dt, n, q);
      EXPECT_EQ(wire, quantize(wide, q)) << dtype_name(dt) << ", " << bits << " bits";
    }
  }
  std::vector<uint8_t> wire(8);
  const uint16_t h[1] = {0};
  EXPECT_THROW(quantize_blocks_ref(wire.data(), h, DType::kI32, 1, {8, 4}), InputError);
}

}  // namespace
}  // namespace weft
