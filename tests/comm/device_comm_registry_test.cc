// Device communicators by name (comm/device_comm_registry.h): the built-in "mpi", defaults per
// backend, and the messages for unknown names and for a communicator the backend does not take.
// (The interleaved schedule over a posting-order transport: tests/mpi/mpi_engine_posting_order.cc.)
#include <gtest/gtest.h>

#include <string>

#include "backend/backend.h"
#include "comm/device_comm_registry.h"
#include "comm/self_comm.h"
#include "core/error.h"

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

}  // namespace
}  // namespace weft
