// Device communicators by name (comm/device_comm_registry.h): the built-in "mpi", defaults per
// backend, the messages for unknown names and for a communicator the backend does not take,
// and the engine's refusal of the interleaved schedule over a posting-order transport.
#include <gtest/gtest.h>

#include <string>

#include "backend/backend.h"
#include "comm/device_comm_registry.h"
#include "comm/self_comm.h"
#include "core/error.h"
#include "engine/engine.h"
#include "model/config.h"

namespace weft {
namespace {

std::string input_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

TEST(DeviceCommRegistry, MpiIsBuiltInAndTheDefaultOfTheCpuBackends) {
  const auto names = device_comm_names();
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names.front(), "mpi");
  EXPECT_EQ(default_device_comm("cpu"), "mpi");
  EXPECT_EQ(default_device_comm("cpu-guarded"), "mpi");
  EXPECT_NO_THROW(check_device_comm("mpi", "cpu-guarded"));
  auto be = make_cpu_backend();
  auto self = make_self_communicator("dp");
  auto dc = make_device_comm("", *self, *be);
  EXPECT_EQ(dc->axis(), "dp");
  EXPECT_EQ(&dc->backend(), be.get());
  EXPECT_EQ(&dc->host(), self.get());
}

TEST(DeviceCommRegistry, BadNamesAndMismatchesNameTheValues) {
  EXPECT_NE(input_error([] { check_device_comm("gloo", "cpu"); }).find("unknown communicator 'gloo' (known: mpi"),
            std::string::npos);
  if (default_device_comm("cuda") != "nccl") {  // a build without CUDA: nccl is not registered
    EXPECT_NE(input_error([] { check_device_comm("nccl", "cpu"); }).find("build weft with -DWEFT_CUDA=ON"),
              std::string::npos);
  }
  // A communicator limited to one backend, asked for with another.
  register_device_comm("test-only-fake", {{"fake-backend"}, false, true},
                       [](Communicator&, Backend&) -> std::unique_ptr<DeviceComm> { return nullptr; });
  EXPECT_EQ(input_error([] { check_device_comm("test-only-fake", "cpu"); }),
            "communicator 'test-only-fake' works with backend fake-backend only, not 'cpu'; use --comm mpi "
            "(host-staged) with backend 'cpu'");
  EXPECT_FALSE(device_comm_info("mpi", "cpu").posting_order_p2p);
}

TEST(DeviceCommRegistry, EngineRefusesInterleavedOverAPostingOrderTransport) {
  // Registered for the cpu backend by this test only: matched in posting order, like NCCL.
  register_device_comm("test-posting-order", {{"cpu"}, false, true},
                       [](Communicator& host, Backend& be) -> std::unique_ptr<DeviceComm> {
                         return make_device_comm("mpi", host, be);
                       });
  EngineConfig cfg;
  cfg.model = model_preset("tiny");
  cfg.seq = 16;
  cfg.grid.pp = 2;
  cfg.schedule = PipeSchedule::kInterleaved;
  cfg.virtual_stages = 2;
  cfg.comm = "test-posting-order";
  auto be = make_cpu_backend();
  auto world = make_self_communicator("world");
  EXPECT_EQ(input_error([&] { Engine e(cfg, *world, *be); }),
            "the interleaved pipeline schedule (pp 2) does not run over communicator 'test-posting-order' yet (its "
            "exchange order deadlocks under NCCL's in-order matching); use --schedule 1f1b or gpipe, or --comm mpi");
}

}  // namespace
}  // namespace weft
