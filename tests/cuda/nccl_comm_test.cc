// The NCCL communicator on a group of one rank (the only group one GPU allows: NCCL refuses
// two ranks on one device), and one engine training step through the "nccl" device
// communicator factory (comm/device_comm_registry.h) against the same step over "mpi" (the
// same bits: a group of one makes no transfer) and against the CPU backend (fp32, 1e-4
// relative, gpt_device_test.cc's loss bound). Multi-rank NCCL checks: weft_cuda_mpi_tests
// (nccl_mpi_collectives.cc) under mpirun on a machine with one GPU per rank. Without a visible
// GPU every test is skipped with the reason.
#include <gtest/gtest.h>

#include <vector>

#include <cmath>

#include "backend/cuda/cuda_backend.h"
#include "backend/device_buffer.h"
#include "comm/device_comm_registry.h"
#include "comm/nccl/nccl_comm.h"
#include "comm/self_comm.h"
#include "data/token_batch.h"
#include "engine/engine.h"
#include "model/config.h"

namespace weft {
namespace {

class NcclSelf : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (gpu::device_count(&why) == 0) GTEST_SKIP() << "no CUDA device visible (" << why << ")";
    be_ = cuda::make_cuda_backend(0);
    host_ = make_self_communicator("world");
    comm_ = make_nccl_communicator(*host_, *be_);
  }
  std::unique_ptr<cuda::CudaBackend> be_;
  std::unique_ptr<Communicator> host_;
  std::unique_ptr<NcclCommunicator> comm_;
};

TEST_F(NcclSelf, CollectivesOfOneRankAreCopies) {
  EXPECT_EQ(comm_->size(), 1);
  EXPECT_EQ(comm_->axis(), "world");
  std::vector<float> h = {1, 2, 3, 4};
  DeviceBuffer a = to_device(*be_, h, DType::kF32);
  comm_->all_reduce_sum(a.data<float>(), 4);
  EXPECT_EQ(a.download<float>(), h);
  DeviceBuffer b(*be_, DType::kF32, 4);
  comm_->all_gather(a.data<float>(), b.data<float>(), 4, CommDType::kF32);
  EXPECT_EQ(b.download<float>(), h);
  DeviceBuffer c(*be_, DType::kF32, 4);
  auto handle = comm_->ireduce_scatter_v(a.data<float>(), c.data<float>(), {4}, CommDType::kF32, ReduceOp::kSum);
  handle->wait();
  EXPECT_EQ(c.download<float>(), h);
  DeviceBuffer d(*be_, DType::kF32, 4);
  comm_->all_to_all_v(a.data<float>(), d.data<float>(), {4}, CommDType::kF32);
  EXPECT_EQ(d.download<float>(), h);
  DeviceBuffer e(*be_, DType::kF32, 4);
  comm_->iall_to_all_v(a.data<float>(), e.data<float>(), {4}, CommDType::kF32)->wait();
  EXPECT_EQ(e.download<float>(), h);
  comm_->barrier();
  auto sub = comm_->split(0, 0, "dp");
  EXPECT_EQ(sub->axis(), "dp");
  EXPECT_EQ(sub->size(), 1);
  EXPECT_EQ(&comm_->backend(), be_.get());
  EXPECT_EQ(&comm_->host(), host_.get());
}

// One training step of the tiny model (T 32, 2 sequences in 2 micro-batches) on `backend`
// with device communicator `comm`; returns the loss and the grad norm.
std::pair<double, double> one_step(Backend& be, const std::string& comm) {
  EngineConfig cfg;
  cfg.model = model_preset("tiny");
  cfg.seq = 32;
  cfg.layout.micro_batch = 1;
  cfg.global_batch = 2;
  cfg.comm = comm;
  auto world = make_self_communicator("world");
  Engine engine(cfg, *world, be);
  engine.init_params(7);
  const StepResult r = engine.step(1e-3f, token_batches([&](int64_t first, int64_t count, int32_t* in, int32_t* tg) {
    for (int64_t i = 0; i < count * cfg.seq; ++i) {
      const int64_t k = first * cfg.seq + i;
      in[i] = static_cast<int32_t>((k * 31 + 7) % cfg.model.vocab_size);
      tg[i] = static_cast<int32_t>((k * 31 + 38) % cfg.model.vocab_size);
    }
  }));
  return {r.loss, r.grad_norm};
}

TEST(NcclEngine, OneStepThroughTheNcclFactory) {
  std::string why;
  if (gpu::device_count(&why) == 0) GTEST_SKIP() << "no CUDA device visible (" << why << ")";
  register_nccl_device_comm();
  EXPECT_EQ(default_device_comm("cuda"), "nccl");
  auto cuda_be = cuda::make_cuda_backend(0);
  const auto nccl = one_step(*cuda_be, "nccl");
  const auto staged = one_step(*cuda_be, "mpi");
  auto cpu_be = make_cpu_backend();
  const auto cpu = one_step(*cpu_be, "");
  std::printf("one step, tiny: loss nccl %.9g, mpi %.9g, cpu %.9g; grad norm nccl %.9g cpu %.9g\n", nccl.first,
              staged.first, cpu.first, nccl.second, cpu.second);
  ASSERT_TRUE(std::isfinite(nccl.first) && std::isfinite(nccl.second));
  EXPECT_EQ(nccl, staged);
  EXPECT_NEAR(nccl.first, cpu.first, 1e-4 * std::abs(cpu.first));
  EXPECT_NEAR(nccl.second, cpu.second, 1e-4 * std::abs(cpu.second));
}

}  // namespace
}  // namespace weft
