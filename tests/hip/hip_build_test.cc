// The HIP build (WEFT_HIP=ON): the kernels and the runtime layer, compiled by hipcc for
// gfx90a, link into this test. Without an AMD GPU it checks what runs on the host (the runtime
// answers "no device" with its reason and select_device says so; the kernel objects' host
// functions); the device tests report themselves skipped with the reason. On an MI250X they
// check the bf16 conversion and the flash-attention forward (MFMA fragments, 64-wide
// wavefronts) against the host. Nothing here has run on an AMD GPU yet.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/gpu_runtime.h"
#include "backend/cuda/kernels.h"
#include "core/dtype.h"
#include "core/error.h"

namespace weft {
namespace {

TEST(HipBuild, DeviceCountGivesTheRuntimesReason) {
  std::string why;
  const int n = gpu::device_count(&why);
  ASSERT_GE(n, 0);
  if (n == 0) {
    EXPECT_NE(why.find("hipGetDeviceCount"), std::string::npos) << why;
    std::printf("device_count = 0: %s\n", why.c_str());
  } else {
    EXPECT_FALSE(gpu::device_name(0).empty());
  }
}

TEST(HipBuild, SelectDeviceWithoutDeviceSaysSo) {
  std::string why;
  if (gpu::device_count(&why) > 0) GTEST_SKIP() << "an AMD GPU is visible: this checks the message without one";
  try {
    gpu::select_device();
    FAIL() << "select_device returned without a device";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("no HIP device visible"), std::string::npos) << e.what();
  }
}

TEST(HipBuild, KernelObjectsLinkAndAnswerOnTheHost) {
  using namespace cuda::kern;
  EXPECT_TRUE(flash_attention_supports(768, 12));   // head size 64
  EXPECT_TRUE(flash_attention_supports(1024, 8));   // 128
  EXPECT_FALSE(flash_attention_supports(768, 16));  // 48
  EXPECT_EQ(flash_attention_backward_scratch(2, 3, 4), 24);
}

class HipDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (gpu::device_count(&why) == 0) GTEST_SKIP() << "no HIP device visible (" << why << ")";
    gpu::select_device(0);
    s = gpu::stream_create();
  }
  void TearDown() override { gpu::stream_destroy(s); }
  template <typename T>
  T* upload(const std::vector<T>& h) {
    auto* d = static_cast<T*>(gpu::device_malloc(h.size() * sizeof(T)));
    gpu::copy_h2d(d, h.data(), h.size() * sizeof(T), s);
    return d;
  }
  template <typename T>
  std::vector<T> download(const T* d, size_t n) {
    std::vector<T> h(n);
    gpu::copy_d2h(h.data(), d, n * sizeof(T), s);
    return h;
  }
  gpu::Stream s = nullptr;
};

uint16_t bits_of(bf16 b) { return b.bits; }

// The device rounds to nearest even like CUDA's __float2bfloat16_rn; NaN -> 0x7fff.
TEST_F(HipDevice, Bf16ConversionRoundsToNearestEven) {
  const std::vector<float> x = {1.0f, 1.00390625f /* tie, even below */, 1.01171875f /* tie, even above */,
                                -3.14159f, 65504.0f, 3.4e38f, 1e-40f, std::nanf("")};
  float* dx = upload(x);
  auto* db = static_cast<gpu::bf16_t*>(gpu::device_malloc(x.size() * 2));
  cuda::kern::convert(db, dx, static_cast<int64_t>(x.size()), s);
  const std::vector<uint16_t> got = download(reinterpret_cast<const uint16_t*>(db), x.size());
  for (size_t i = 0; i + 1 < x.size(); ++i) EXPECT_EQ(got[i], bits_of(float_to_bf16(x[i]))) << "x = " << x[i];
  EXPECT_EQ(got.back(), 0x7fffu);
  gpu::device_free(dx);
  gpu::device_free(db);
}

// Causal attention of one head on the host (double), rows of qkv (T, 3C) in bf16 values.
std::vector<float> attention_host(const std::vector<bf16>& qkv, int T, int C, int NH, int h) {
  const int hs = C / NH;
  std::vector<float> out(static_cast<size_t>(T) * hs);
  auto at = [&](int t, int part, int d) {
    return bf16_to_float(qkv[static_cast<size_t>(t) * 3 * C + part * C + h * hs + d]);
  };
  for (int i = 0; i < T; ++i) {
    std::vector<double> p(i + 1);
    double m = -INFINITY, sum = 0;
    for (int j = 0; j <= i; ++j) {
      double dot = 0;
      for (int d = 0; d < hs; ++d) dot += double(at(i, 0, d)) * at(j, 1, d);
      p[j] = dot / std::sqrt(double(hs));
      m = std::max(m, p[j]);
    }
    for (int j = 0; j <= i; ++j) sum += (p[j] = std::exp(p[j] - m));
    for (int d = 0; d < hs; ++d) {
      double o = 0;
      for (int j = 0; j <= i; ++j) o += p[j] / sum * at(j, 2, d);
      out[static_cast<size_t>(i) * hs + d] = static_cast<float>(o);
    }
  }
  return out;
}

// T = 80 is not a multiple of any tile; both head sizes; tolerance: bf16 P and O (about 3
// significant digits) on values of magnitude <= 1.
TEST_F(HipDevice, FlashForwardMatchesTheHost) {
  for (const int NH : {2, 1}) {
    const int T = 80, C = 128, hs = C / NH;
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<bf16> qkv(static_cast<size_t>(T) * 3 * C);
    for (auto& v : qkv) v = float_to_bf16(nd(rng));
    auto* dqkv = upload(qkv);
    auto* dout = static_cast<gpu::bf16_t*>(gpu::device_malloc(static_cast<size_t>(T) * C * 2));
    auto* dlse = static_cast<float*>(gpu::device_malloc(static_cast<size_t>(NH) * T * 4));
    cuda::kern::flash_attention_forward(dout, dlse, reinterpret_cast<const gpu::bf16_t*>(dqkv), 1, T, C, NH, s);
    const std::vector<bf16> out = download(reinterpret_cast<const bf16*>(dout), static_cast<size_t>(T) * C);
    for (int h = 0; h < NH; ++h) {
      const std::vector<float> ref = attention_host(qkv, T, C, NH, h);
      double worst = 0;
      for (int t = 0; t < T; ++t) {
        for (int d = 0; d < hs; ++d) {
          const double e = std::fabs(bf16_to_float(out[static_cast<size_t>(t) * C + h * hs + d]) - ref[t * hs + d]);
          worst = std::max(worst, e);
        }
      }
      std::printf("hs %d head %d: max |flash - host| = %.3g\n", hs, h, worst);
      EXPECT_LT(worst, 2e-2) << "hs " << hs << " head " << h;
    }
    gpu::device_free(dqkv);
    gpu::device_free(dout);
    gpu::device_free(dlse);
  }
}

}  // namespace
}  // namespace weft
