// make_world_communicator without an MPI launcher, abort_job and end_job_on_error without MPI
// (their multi-rank paths: tests/apps/cli_mpi_test.cc and the mpi_fault_* tests).
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

TEST(CommWorld, EndJobOnErrorWithoutMpiPrintsOneWeftLine) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(end_job_on_error("bad.toml: unknown key 'train.lrr'", 2), ::testing::ExitedWithCode(2),
              "^weft: bad.toml: unknown key 'train.lrr'\n$");
  // A message that names weft already is not prefixed twice.
  EXPECT_EXIT(end_job_on_error("weft: rank 0: stalled", 1), ::testing::ExitedWithCode(1), "^weft: rank 0: stalled\n$");
}

TEST(CommWorld, ErrorAgreementTimeoutFromTheEnvironment) {
  ::unsetenv("WEFT_ERROR_AGREE_TIMEOUT");
  EXPECT_EQ(error_agreement_timeout_s(), 2.0);
  ::setenv("WEFT_ERROR_AGREE_TIMEOUT", "0.5", 1);
  EXPECT_EQ(error_agreement_timeout_s(), 0.5);
  for (const char* bad : {"-1", "0", "soon", "1e9", "nan"}) {
    ::setenv("WEFT_ERROR_AGREE_TIMEOUT", bad, 1);
    EXPECT_EQ(error_agreement_timeout_s(), 2.0) << bad;  // ignored: the default
  }
  ::unsetenv("WEFT_ERROR_AGREE_TIMEOUT");
}

}  // namespace
}  // namespace weft
