// make_world_communicator without an MPI launcher, and abort_job without MPI.
#include <gtest/gtest.h>

#include <cstdlib>

#include "comm/world.h"

namespace weft {
namespace {

TEST(CommWorld, SingleProcessRunIsTheSelfCommunicator) {
  ::setenv("WEFT_MPI", "0", 1);
  auto world = make_world_communicator(nullptr, nullptr);
  ::unsetenv("WEFT_MPI");
  EXPECT_EQ(world->size(), 1);
  EXPECT_EQ(world->rank(), 0);
  EXPECT_EQ(world->axis(), "world");
  EXPECT_FALSE(mpi_active());
}

TEST(CommWorld, AbortJobWithoutMpiExitsWithTheCode) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(abort_job("weft: something broke", 3), ::testing::ExitedWithCode(3), "weft: something broke");
}

}  // namespace
}  // namespace weft
