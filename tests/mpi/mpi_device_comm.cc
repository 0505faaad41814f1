// Host-staged collectives (comm/device_comm.h) on cpu-guarded device buffers across ranks,
// in place (the adapter unfences the buffer for MPI) and staged (access refused, as on a
// GPU). Rank r contributes r * 1000 + i at element i: sums and gathers have closed forms.
#include <gtest/gtest.h>

#include <vector>

#include "backend/backend_test_util.h"
#include "backend/device_buffer.h"
#include "comm/device_comm.h"
#include "mpi_test_util.h"

namespace weft {
namespace {

std::vector<float> contribution(int rank, int64_t count) {
  std::vector<float> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) v[static_cast<size_t>(i)] = static_cast<float>(rank * 1000 + i);
  return v;
}

class MpiDeviceComm : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<Communicator> comm = test::fresh_world();
  std::unique_ptr<Backend> be = test::make_test_backend(GetParam());
  DeviceComm dc{*comm, *be};
  int rank = comm->rank(), n = comm->size();
};

TEST_P(MpiDeviceComm, AllReduceSum) {
  const int64_t count = 777;
  DeviceBuffer buf = to_device(*be, contribution(rank, count), DType::kF32, MemCategory::kGrads);
  dc.all_reduce(buf.raw(), count, CommDType::kF32, ReduceOp::kSum);
  const std::vector<float> got = buf.download<float>();
  for (int64_t i = 0; i < count; ++i) {
    ASSERT_EQ(got[static_cast<size_t>(i)], static_cast<float>(1000 * n * (n - 1) / 2 + n * i)) << i;
  }
}

TEST_P(MpiDeviceComm, AllGatherAndReduceScatter) {
  const int64_t count = 100;
  DeviceBuffer send = to_device(*be, contribution(rank, count), DType::kF32);
  DeviceBuffer all(*be, DType::kF32, count * n), mine(*be, DType::kF32, count);
  dc.all_gather(send.raw(), all.raw(), count, CommDType::kF32);
  const std::vector<float> gathered = all.download<float>();
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(std::vector<float>(gathered.begin() + r * count, gathered.begin() + (r + 1) * count),
              contribution(r, count)) << "block " << r;
  }
  dc.reduce_scatter(all.raw(), mine.raw(), count, CommDType::kF32, ReduceOp::kSum);  // n copies of each block
  const std::vector<float> got = mine.download<float>(), expect = contribution(rank, count);
  for (int64_t i = 0; i < count; ++i) ASSERT_EQ(got[static_cast<size_t>(i)], n * expect[static_cast<size_t>(i)]);
}

INSTANTIATE_TEST_SUITE_P(Backends, MpiDeviceComm, ::testing::Values("cpu-guarded", "cpu-guarded-staged"),
                         [](const auto& info) { return test::param_name(info.param); });

}  // namespace
}  // namespace weft
