// The CUDA block-quantization kernels (quant.cu) against the host reference of
// core/block_quant.h, byte for byte: the wire (values, padding, scales), the error-feedback
// residual and the dequantized floats (plain and accumulated), for int8 and int4, odd and
// partial blocks, block 1 and blocks larger than n, all-zero and non-finite blocks, ties that
// round half to even (a NaN of the floats matches any NaN: the GPU's canonical NaN is not
// x86's). Without a visible GPU every test is skipped with the reason.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/device_buffer.h"
#include "core/block_quant.h"

namespace weft {
namespace {

struct QuantCase {
  int bits;
  int64_t block, n;
};

const QuantCase kCases[] = {
    {8, 2048, 1},      {8, 2048, 2048},    {8, 2048, 100003}, {8, 1, 1000},    {8, 3, 1001},     {8, 7, 4097},
    {8, 1 << 20, 5000}, {8, 1 << 24, 300000}, {8, 256, 1 << 20},
    {4, 2048, 1},      {4, 2048, 2049},    {4, 2048, 100003}, {4, 1, 1001},    {4, 3, 1001},     {4, 5, 4097},
    {4, 1 << 20, 5001}, {4, 1 << 24, 300001}, {4, 64, 1 << 20}};

std::vector<float> inputs(int64_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(g);
  // Exact ties (half-integers of a scale of 1 in a block whose absmax is qmax), an all-zero
  // stretch, a NaN and an inf, where n leaves room.
  if (n > 64) {
    for (int i = 0; i < 8; ++i) v[i] = 0.5f + static_cast<float>(i);
    v[8] = 127.0f;
    for (int64_t i = 20; i < 40; ++i) v[i] = 0.0f;
  }
  if (n > 5000) {
    v[n / 2] = std::numeric_limits<float>::quiet_NaN();
    v[n / 3] = -std::numeric_limits<float>::infinity();
  }
  return v;
}

// The first element whose bits differ, where NaN matches any NaN: a GPU writes its canonical
// NaN (0x7fffffff) where x86 writes 0xffc00000 or keeps the input's payload, and no consumer
// of a block that held a NaN reads more than "NaN". -1 when every element matches.
int64_t first_mismatch(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) && std::isnan(want[i])) continue;
    if (std::memcmp(&got[i], &want[i], 4) != 0) return static_cast<int64_t>(i);
  }
  return -1;
}

std::string mismatch_at(const std::vector<float>& got, const std::vector<float>& want, int64_t i) {
  if (i < 0) return "none";
  if (got.size() != want.size()) return "sizes " + std::to_string(got.size()) + " vs " + std::to_string(want.size());
  uint32_t g, w;
  std::memcpy(&g, &got[i], 4);
  std::memcpy(&w, &want[i], 4);
  char buf[160];
  std::snprintf(buf, sizeof buf, "element %lld of %zu: got %.9g (0x%08x), want %.9g (0x%08x)",
                static_cast<long long>(i), got.size(), got[i], g, want[i], w);
  return buf;
}

class CudaQuant : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (gpu::device_count(&why) == 0) GTEST_SKIP() << "no CUDA device visible (" << why << ")";
    be = cuda::make_cuda_backend();
  }
  std::unique_ptr<cuda::CudaBackend> be;
};

TEST_F(CudaQuant, QuantizeMatchesTheReferenceBytes) {
  uint32_t seed = 1;
  for (const QuantCase& c : kCases) {
    for (bool with_residual : {false, true}) {
      const QuantSpec q{c.bits, c.block};
      SCOPED_TRACE(::testing::Message() << c.bits << " bits, block " << c.block << ", n " << c.n
                                        << (with_residual ? ", residual" : ""));
      const std::vector<float> x = inputs(c.n, seed++);
      std::vector<float> r(static_cast<size_t>(c.n));
      {
        std::mt19937 g(seed++);
        std::normal_distribution<float> d(0.0f, 0.01f);
        for (auto& v : r) v = d(g);
      }
      const int64_t wb = quant_wire_bytes(c.n, q);
      std::vector<uint8_t> want(static_cast<size_t>(wb));
      std::vector<float> want_r = r;
      quantize_blocks_ref(want.data(), x.data(), c.n, q, with_residual ? want_r.data() : nullptr);

      DeviceBuffer dx = to_device(*be, x, DType::kF32), dr = to_device(*be, r, DType::kF32);
      DeviceBuffer dw(*be, DType::kI8, wb);
      dw.fill(-1.0f);
      be->quantize_blocks(dw.raw(), dx.data<float>(), c.n, q, with_residual ? dr.data<float>() : nullptr);
      be->synchronize();
      const std::vector<int8_t> got = dw.download<int8_t>();
      int64_t first_diff = -1;
      for (int64_t i = 0; i < wb && first_diff < 0; ++i) {
        if (static_cast<uint8_t>(got[i]) != want[i]) first_diff = i;
      }
      ASSERT_EQ(first_diff, -1) << "byte " << first_diff << " of " << wb << " (data bytes "
                                << quant_data_bytes(c.n, q) << "): got "
                                << int(static_cast<uint8_t>(got[first_diff])) << ", want " << int(want[first_diff]);
      const std::vector<float> got_r = dr.download<float>(),& exp_r = with_residual ? want_r : r;
      const int64_t bad = first_mismatch(got_r, exp_r);
      EXPECT_EQ(bad, -1) << "residual: " << mismatch_at(got_r, exp_r, bad);
    }
  }
}

TEST_F(CudaQuant, DequantizeMatchesTheReferenceFloats) {
  uint32_t seed = 1000;
  for (const QuantCase& c : kCases) {
    for (bool accumulate : {false, true}) {
      const QuantSpec q{c.bits, c.block};
      SCOPED_TRACE(::testing::Message() << c.bits << " bits, block " << c.block << ", n " << c.n
                                        << (accumulate ? ", accumulate" : ""));
      const std::vector<float> x = inputs(c.n, seed++);
      std::vector<uint8_t> wire(static_cast<size_t>(quant_wire_bytes(c.n, q)));
      quantize_blocks_ref(wire.data(), x.data(), c.n, q);
      const std::vector<float> out0 = inputs(c.n, seed++);
      std::vector<float> want = out0;
      dequantize_blocks_ref(want.data(), wire.data(), c.n, q, accumulate);

      std::vector<int8_t> w8(wire.size());
      std::memcpy(w8.data(), wire.data(), wire.size());
      DeviceBuffer dw = to_device(*be, w8, DType::kI8), dout = to_device(*be, out0, DType::kF32);
      be->dequantize_blocks(dout.data<float>(), dw.raw(), c.n, q, accumulate);
      be->synchronize();
      const std::vector<float> got = dout.download<float>();
      const int64_t bad = first_mismatch(got, want);
      ASSERT_EQ(bad, -1) << mismatch_at(got, want, bad);
    }
  }
}

// A wire written by the GPU dequantizes on the CPU reference to the GPU's own dequantization.
TEST_F(CudaQuant, WireTravelsBetweenBackends) {
  const QuantSpec q{4, 2048};
  const int64_t n = 1 << 16;
  const std::vector<float> x = inputs(n, 77);
  DeviceBuffer dx = to_device(*be, x, DType::kF32), dw(*be, DType::kI8, quant_wire_bytes(n, q)),
               dout(*be, DType::kF32, n);
  be->quantize_blocks(dw.raw(), dx.data<float>(), n, q, nullptr);
  be->dequantize_blocks(dout.data<float>(), dw.raw(), n, q, false);
  be->synchronize();
  const std::vector<int8_t> w8 = dw.download<int8_t>();
  std::vector<float> host(static_cast<size_t>(n));
  dequantize_blocks_ref(host.data(), reinterpret_cast<const uint8_t*>(w8.data()), n, q, false);
  const std::vector<float> got = dout.download<float>();
  const int64_t bad = first_mismatch(got, host);
  EXPECT_EQ(bad, -1) << mismatch_at(got, host, bad);
}

}  // namespace
}  // namespace weft
