// The device contract of backend.h on the CUDA backend: cudaMalloc'd memory counted by
// category, copies at byte offsets, fills of every dtype (staged through copy_to_device),
// the driver's answer to is_device_memory, no direct host access (communication stages),
// and an op on contract buffers against the CPU backend. Without a visible GPU every test
// is skipped with the reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/device_buffer.h"
#include "comm/device_comm.h"
#include "comm/self_comm.h"

namespace weft {
namespace {

class CudaContract : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (gpu::device_count(&why) == 0) GTEST_SKIP() << "no CUDA device visible (" << why << ")";
    be = cuda::make_cuda_backend();
  }
  std::unique_ptr<cuda::CudaBackend> be;
};

TEST_F(CudaContract, AllocCountsAndDeviceMemoryIsTheDrivers) {
  const MemorySnapshot before = memory_tracker().snapshot();
  {
    DeviceBuffer b(*be, DType::kI4, 1001, MemCategory::kOptimizer);
    EXPECT_EQ(memory_tracker().snapshot()[MemCategory::kOptimizer] - before[MemCategory::kOptimizer], 501);
    EXPECT_TRUE(be->is_device_memory(b.raw()));
    float host = 0;
    EXPECT_FALSE(be->is_device_memory(&host));
    EXPECT_FALSE(HostAccess(*be, b.raw(), b.bytes()).direct());
  }
  EXPECT_EQ(memory_tracker().snapshot().current, before.current);
}

TEST_F(CudaContract, CopiesAtOffsetsAndFills) {
  std::vector<float> host(64);
  std::iota(host.begin(), host.end(), 0.0f);
  DeviceBuffer a = to_device(*be, host, DType::kF32), b(*be, DType::kF32, 64);
  b.fill(-2.0f);
  b.copy_from(a, 8 * sizeof(float), 4 * sizeof(float), 16 * sizeof(float));  // b[4..12) = a[16..24)
  be->synchronize();
  const std::vector<float> got = b.download<float>();
  for (int i = 0; i < 64; ++i) EXPECT_EQ(got[i], i >= 4 && i < 12 ? i + 12.0f : -2.0f) << i;
  DeviceBuffer h(*be, DType::kBF16, 10);
  h.fill(1.5f);
  EXPECT_EQ(h.download<uint16_t>(), std::vector<uint16_t>(10, 0x3fc0));
}

TEST_F(CudaContract, OpsOnContractBuffersMatchCpu) {
  const std::vector<float> x = {-3, -0.5f, 0, 0.25f, 1, 4};
  DeviceBuffer dx = to_device(*be, x, DType::kF32), dy(*be, DType::kF32, 6);
  be->gelu_forward(dy.data<float>(), dx.data<float>(), 6);
  std::vector<float> ref(6);
  make_cpu_backend()->gelu_forward(ref.data(), x.data(), 6);
  const std::vector<float> got = dy.download<float>();
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(got[i], ref[i], 1e-6f * std::max(1.0f, std::fabs(ref[i]))) << i;
}

TEST_F(CudaContract, HostStagedCollectives) {
  auto self = make_self_communicator();
  DeviceCommunicator dc(*self, *be);
  const std::vector<float> v = {1, 2, 3};
  DeviceBuffer send = to_device(*be, v, DType::kF32), recv(*be, DType::kF32, 3);
  dc.all_gather(send.raw(), recv.raw(), 3, CommDType::kF32);
  EXPECT_EQ(recv.download<float>(), v);
}

}  // namespace
}  // namespace weft
