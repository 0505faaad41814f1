// The NCCL communicator on a group of one rank (the only group one GPU allows: NCCL refuses
// two ranks on one device). Multi-rank NCCL checks need a machine with 2+ GPUs and mpirun;
// see docs/cuda.md. Without a visible GPU every test is skipped with the reason.
#include <gtest/gtest.h>

#include <vector>

#include "backend/cuda/device_buffer.h"
#include "comm/nccl/nccl_comm.h"
#include "comm/self_comm.h"

namespace weft {
namespace {

class NcclSelf : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (gpu::device_count(&why) == 0) GTEST_SKIP() << "no CUDA device visible (" << why << ")";
    gpu::select_device(0);
    host_ = make_self_communicator("world");
    comm_ = make_nccl_communicator(*host_);
  }
  std::unique_ptr<Communicator> host_;
  std::unique_ptr<NcclCommunicator> comm_;
};

TEST_F(NcclSelf, CollectivesOfOneRankAreCopies) {
  EXPECT_EQ(comm_->size(), 1);
  EXPECT_EQ(comm_->axis(), "world");
  std::vector<float> h = {1, 2, 3, 4};
  auto a = cuda::upload(h);
  comm_->all_reduce_sum(a.data(), 4);
  EXPECT_EQ(cuda::download(a.data(), 4), h);
  cuda::DeviceBuffer<float> b(4);
  comm_->all_gather(a.data(), b.data(), 4, CommDType::kF32);
  EXPECT_EQ(cuda::download(b.data(), 4), h);
  cuda::DeviceBuffer<float> c(4);
  auto handle = comm_->ireduce_scatter_v(a.data(), c.data(), {4}, CommDType::kF32, ReduceOp::kSum);
  handle->wait();
  EXPECT_EQ(cuda::download(c.data(), 4), h);
  comm_->barrier();
  auto sub = comm_->split(0, 0, "dp");
  EXPECT_EQ(sub->axis(), "dp");
  EXPECT_EQ(sub->size(), 1);
}

}  // namespace
}  // namespace weft
