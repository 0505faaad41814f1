// Backend::quantize_blocks / dequantize_blocks on cpu (the reference called on its memory),
// cpu-guarded and cpu-guarded-staged (the default: host copies through the fenced contract)
// against the host reference of core/block_quant.h, byte for byte: the wire, the residual
// and the dequantized floats. Inputs live in device buffers, at interior offsets too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backend/device_buffer.h"
#include "backend_test_util.h"
#include "core/block_quant.h"
#include "core/error.h"

namespace weft {
namespace {

using test::randn;

struct QuantCase {
  int bits;
  int64_t block, n;
};

const QuantCase kCases[] = {{8, 2048, 1},   {8, 2048, 5000}, {8, 1, 17},    {8, 7, 1001},  {8, 1 << 20, 3000},
                            {4, 2048, 1},   {4, 2048, 5001}, {4, 1, 17},    {4, 3, 1001},  {4, 64, 4096},
                            {4, 1 << 20, 3001}};

std::vector<uint8_t> bytes_of(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

class QuantOps : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { be_ = test::make_test_backend(GetParam()); }
  std::unique_ptr<Backend> be_;
};

TEST_P(QuantOps, QuantizeGivesTheReferenceBytes) {
  Backend& be = *be_;
  uint32_t seed = 1;
  for (const QuantCase& c : kCases) {
    for (bool with_residual : {false, true}) {
      const QuantSpec q{c.bits, c.block};
      SCOPED_TRACE(::testing::Message() << c.bits << " bits, block " << c.block << ", n " << c.n
                                        << (with_residual ? ", residual" : ""));
      std::vector<float> x = randn(c.n, seed++);
      if (c.n > 10) x[c.n / 2] = std::numeric_limits<float>::quiet_NaN();  // one poisoned block
      std::vector<float> r = randn(c.n, seed++, 0.01f);
      const int64_t wb = quant_wire_bytes(c.n, q);
      // Expected: the reference on host memory.
      std::vector<uint8_t> want(static_cast<size_t>(wb));
      std::vector<float> want_r = r;
      quantize_blocks_ref(want.data(), x.data(), c.n, q, with_residual ? want_r.data() : nullptr);
      // The op on device buffers, 16 floats / bytes into each allocation (interior pointers).
      const int64_t off = 16;
      DeviceBuffer dx(be, DType::kF32, c.n + off), dr(be, DType::kF32, c.n + off), dw(be, DType::kI8, wb + off);
      dx.upload(x, off);
      dr.upload(r, off);
      dw.fill(-1.0f);  // 0xff everywhere: the op must write every byte
      be.quantize_blocks(static_cast<uint8_t*>(dw.raw()) + off, dx.data<float>() + off, c.n, q,
                         with_residual ? dr.data<float>() + off : nullptr);
      be.synchronize();
      const std::vector<int8_t> got = dw.download<int8_t>(off, wb);
      ASSERT_EQ(0, std::memcmp(got.data(), want.data(), want.size())) << "wire bytes differ";
      EXPECT_EQ(dw.download<int8_t>(0, off), std::vector<int8_t>(off, -1)) << "wrote before the wire";
      EXPECT_EQ(bytes_of(dx.download<float>(off, c.n)), bytes_of(x)) << "x was written";
      EXPECT_EQ(bytes_of(dr.download<float>(off, c.n)), bytes_of(with_residual ? want_r : r)) << "residual";
    }
  }
}

TEST_P(QuantOps, DequantizeGivesTheReferenceFloats) {
  Backend& be = *be_;
  uint32_t seed = 100;
  for (const QuantCase& c : kCases) {
    for (bool accumulate : {false, true}) {
      const QuantSpec q{c.bits, c.block};
      SCOPED_TRACE(::testing::Message() << c.bits << " bits, block " << c.block << ", n " << c.n
                                        << (accumulate ? ", accumulate" : ""));
      const std::vector<float> x = randn(c.n, seed++);
      std::vector<uint8_t> wire(static_cast<size_t>(quant_wire_bytes(c.n, q)));
      quantize_blocks_ref(wire.data(), x.data(), c.n, q);
      const std::vector<float> out0 = randn(c.n, seed++);
      std::vector<float> want = out0;
      dequantize_blocks_ref(want.data(), wire.data(), c.n, q, accumulate);

      const int64_t off = 4;  // the wire stays 4-byte aligned
      DeviceBuffer dw(be, DType::kI8, static_cast<int64_t>(wire.size()) + off), dout(be, DType::kF32, c.n + off);
      std::vector<int8_t> w8(wire.size());
      std::memcpy(w8.data(), wire.data(), wire.size());
      dw.upload(w8, off);
      dout.upload(out0, off);
      be.dequantize_blocks(dout.data<float>() + off, static_cast<const uint8_t*>(dw.raw()) + off, c.n, q,
                           accumulate);
      be.synchronize();
      EXPECT_EQ(bytes_of(dout.download<float>(off, c.n)), bytes_of(want));
    }
  }
}

TEST_P(QuantOps, RejectsABadSpecAndDoesNothingForZeroElements) {
  Backend& be = *be_;
  DeviceBuffer dx(be, DType::kF32, 8), dw(be, DType::kI8, 64);
  EXPECT_THROW(be.quantize_blocks(dw.raw(), dx.data<float>(), 8, {6, 4}, nullptr), InputError);
  EXPECT_THROW(be.dequantize_blocks(dx.data<float>(), dw.raw(), 8, {8, 0}, false), InputError);
  dw.fill(-1.0f);
  be.quantize_blocks(dw.raw(), dx.data<float>(), 0, {8, 4}, nullptr);
  be.synchronize();
  EXPECT_EQ(dw.download<int8_t>(), std::vector<int8_t>(64, -1));
}

INSTANTIATE_TEST_SUITE_P(Backends, QuantOps, ::testing::Values("cpu", "cpu-guarded", "cpu-guarded-staged"),
                         [](const auto& info) { return test::param_name(info.param); });

}  // namespace
}  // namespace weft
