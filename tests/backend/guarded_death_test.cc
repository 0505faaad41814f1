// cpu-guarded's fence: a host read or write of device memory outside a backend call, an
// op running past its buffer, or a host access past either end kills the process with
// SIGSEGV, after one line that names the buffer. Death tests run in a re-executed child
// ("threadsafe" style: OpenMP threads exist in the parent).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <memory>
#include <vector>

#include "backend/cpu_guarded/guarded_backend.h"
#include "backend/device_buffer.h"

namespace weft {
namespace {

// The diagnostic line: buffer address, size, category, faulting address.
std::string line(const std::string& what, int bytes, const std::string& category, const std::string& tail) {
  return "cpu-guarded: " + what + " device buffer 0x[0-9a-f]+ \\(" + std::to_string(bytes) + " bytes, category " +
         category + "\\) at address 0x[0-9a-f]+ .*" + tail;
}

class GuardedDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
  std::unique_ptr<Backend> be = make_cpu_guarded_backend();
  DeviceBuffer buf{*be, DType::kF32, 1024, MemCategory::kParams};  // 4096 bytes: ends at the guard page
};

TEST_F(GuardedDeathTest, HostReadFaults) {
  buf.fill(1.0f);
  EXPECT_EXIT({ [[maybe_unused]] volatile float x = buf.data<float>()[3]; }, ::testing::KilledBySignal(SIGSEGV),
              line("host access to", 4096, "params", "something above the backend touched device memory"));
}

TEST_F(GuardedDeathTest, HostWriteFaults) {
  EXPECT_EXIT({ buf.data<float>()[1000] = 2.0f; }, ::testing::KilledBySignal(SIGSEGV),
              line("host access to", 4096, "params", "something above the backend touched device memory"));
}

TEST_F(GuardedDeathTest, HostWriteAfterAnOpFaults) {
  be->scale(buf.data<float>(), 2.0f, 1024);  // opened and closed again
  EXPECT_EXIT({ buf.data<float>()[0] = 2.0f; }, ::testing::KilledBySignal(SIGSEGV), "host access to device buffer");
}

TEST_F(GuardedDeathTest, OpOverrunFaults) {
  DeviceBuffer a(*be, DType::kF32, 1024, MemCategory::kActivations);
  a.fill(1.0f);
  buf.fill(1.0f);
  EXPECT_EXIT(be->add(buf.data<float>(), buf.data<float>(), a.data<float>(), 1024 + 16),
              ::testing::KilledBySignal(SIGSEGV),
              "cpu-guarded: access [0-9]+ bytes past the end of device buffer .* an overrun inside backend call 'add'");
}

TEST_F(GuardedDeathTest, HostOverrunPastEitherEndFaults) {
  DeviceBuffer small(*be, DType::kF32, 25, MemCategory::kWorkspace);  // 100 bytes: slack before the guard page
  EXPECT_EXIT({ small.data<float>()[25] = 0.0f; }, ::testing::KilledBySignal(SIGSEGV),
              "cpu-guarded: access 1 bytes past the end of device buffer 0x[0-9a-f]+ \\(100 bytes, category "
              "workspace\\)");
  EXPECT_EXIT({ [[maybe_unused]] volatile float x = buf.data<float>()[-1]; }, ::testing::KilledBySignal(SIGSEGV),
              "cpu-guarded: access 4 bytes before the start of device buffer");
}

// Host-access scopes are reference-counted per buffer: two overlapping scopes on one buffer
// (the send and receive views of an in-place gather) and the calls made while they are open
// keep it unfenced until the last scope closes; then a host access faults again.
TEST_F(GuardedDeathTest, HostAccessFencesAgainWhenTheLastScopeCloses) {
  buf.fill(1.0f);
  auto outer = std::make_unique<HostAccess>(*be, buf.raw(), buf.bytes());
  {
    HostAccess inner(*be, buf.data<float>() + 8, 16 * sizeof(float));  // inside the outer view
    ASSERT_TRUE(outer->direct() && inner.direct());
    be->scale(buf.data<float>(), 2.0f, 1024);  // opens and closes it once more
    buf.data<float>()[9] = 5.0f;
  }
  buf.data<float>()[10] = 6.0f;  // the outer scope still holds it open
  be->add(buf.data<float>(), buf.data<float>(), buf.data<float>(), 1024);  // two arguments, one buffer
  EXPECT_EQ(buf.data<float>()[9], 10.0f);
  EXPECT_EQ(buf.data<float>()[10], 12.0f);
  outer.reset();
  EXPECT_EQ(buf.download<float>(8, 3), (std::vector<float>{4.0f, 10.0f, 12.0f}));
  EXPECT_EXIT({ buf.data<float>()[9] = 0.0f; }, ::testing::KilledBySignal(SIGSEGV),
              line("host access to", 4096, "params", "something above the backend touched device memory"));
}

TEST_F(GuardedDeathTest, EndingHostAccessThatWasNeverBegunAborts) {
  EXPECT_DEATH(be->end_host_access(buf.raw(), buf.bytes()), "closed more often than it was opened");
}

// The handler hands the signal on to the one installed before it. Only meaningful in a
// fresh process (the child), where no cpu-guarded backend has installed its handler yet.
void previous_handler(int) {
  const char msg[] = "previous handler ran\n";
  (void)!write(2, msg, sizeof(msg) - 1);
  _exit(3);
}

TEST(GuardedHandlerDeathTest, ChainsToThePreviousHandler) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        signal(SIGSEGV, previous_handler);
        auto be = make_cpu_guarded_backend();
        DeviceBuffer b(*be, DType::kF32, 8, MemCategory::kOther);
        [[maybe_unused]] volatile float x = b.data<float>()[0];
      },
      ::testing::ExitedWithCode(3), "host access to device buffer.*previous handler ran");
}

}  // namespace
}  // namespace weft
