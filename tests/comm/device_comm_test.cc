// Host-staged collectives on device buffers (comm/device_comm.h) over the single-process
// communicator: on cpu-guarded the self communicator's copies touch device memory, so they
// only pass if the adapter opened the buffers (direct) or staged them (refused access).
// Multi-rank sums are in tests/mpi/mpi_device_comm.cc.
#include "comm/device_comm.h"

#include <gtest/gtest.h>

#include "backend/device_buffer.h"
#include "backend/backend_test_util.h"
#include "comm/self_comm.h"

namespace weft {
namespace {

class DeviceCommSelf : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<Backend> be = test::make_test_backend(GetParam());
  std::unique_ptr<Communicator> self = make_self_communicator();
  DeviceComm dc{*self, *be};
};

TEST_P(DeviceCommSelf, CollectivesMoveDeviceData) {
  const std::vector<float> v = {1, 2, 3, 4, 5, 6};
  DeviceBuffer send = to_device(*be, v, DType::kF32), recv(*be, DType::kF32, 6);
  recv.zero();
  dc.all_gather(send.raw(), recv.raw(), 6, CommDType::kF32);
  EXPECT_EQ(recv.download<float>(), v);
  recv.zero();
  dc.reduce_scatter(send.raw(), recv.raw(), 6, CommDType::kF32, ReduceOp::kSum);
  EXPECT_EQ(recv.download<float>(), v);
  dc.all_reduce(send.raw(), 6, CommDType::kF32, ReduceOp::kSum);
  dc.broadcast(send.raw(), 6, CommDType::kF32, 0);
  EXPECT_EQ(send.download<float>(), v);
}

TEST_P(DeviceCommSelf, StagingIsCountedAndReleased) {
  DeviceBuffer send(*be, DType::kF32, 1000), recv(*be, DType::kF32, 1000);
  send.fill(2.0f);
  const int64_t before = memory_tracker().snapshot()[MemCategory::kComm];
  const int64_t peak_before = memory_tracker().snapshot().peak_of(MemCategory::kComm);
  dc.all_gather(send.raw(), recv.raw(), 1000, CommDType::kF32);
  EXPECT_EQ(recv.download<float>(), std::vector<float>(1000, 2.0f));
  EXPECT_EQ(memory_tracker().snapshot()[MemCategory::kComm], before);
  if (GetParam() == "cpu-guarded-staged") {  // two 4000-byte staging buffers were live at once
    EXPECT_GE(memory_tracker().snapshot().peak_of(MemCategory::kComm), std::max(peak_before, before + 8000));
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, DeviceCommSelf, ::testing::Values("cpu", "cpu-guarded", "cpu-guarded-staged"),
                         [](const auto& info) { return test::param_name(info.param); });

}  // namespace
}  // namespace weft
