// The launcher's kill timeout against what a stop needs (train/kill_timeout.h, issue 34 class 4):
// where Open MPI's timeout is read from, when the warning comes, and `weft train` under mpirun
// saying it at launch only when the timeout is too short.
#include "train/kill_timeout.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>

#include "test_util.h"

namespace weft {
namespace {

namespace fs = std::filesystem;

// Sets (or, with nullptr, unsets) an environment variable for one scope.
class EnvScope {
 public:
  EnvScope(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~EnvScope() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(KillTimeout, ReadFromTheLaunchersEnvironment) {
  {
    EnvScope world("OMPI_COMM_WORLD_SIZE", nullptr);
    EXPECT_FALSE(openmpi_kill_timeout().has_value());  // not launched by Open MPI's mpirun
  }
  test::TempDir tmp("kill-timeout");
  EnvScope world("OMPI_COMM_WORLD_SIZE", "4");
  EnvScope home("HOME", (tmp / "").c_str());
  {
    EnvScope mca("OMPI_MCA_odls_base_sigkill_timeout", "45");
    const auto t = openmpi_kill_timeout();
    ASSERT_TRUE(t.has_value());
    EXPECT_EQ(t->seconds, 45);
    EXPECT_EQ(t->source, "OMPI_MCA_odls_base_sigkill_timeout");
  }
  // No setting in the environment: the user's parameter file, then Open MPI's default.
  EnvScope mca("OMPI_MCA_odls_base_sigkill_timeout", nullptr);
  fs::create_directories(tmp / ".openmpi");
  std::ofstream(tmp / ".openmpi/mca-params.conf") << "# comment\nbtl = self\nodls_base_sigkill_timeout = 20  # s\n";
  auto t = openmpi_kill_timeout();
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->seconds, 20);
  EXPECT_NE(t->source.find("mca-params.conf"), std::string::npos);
  std::ofstream(tmp / ".openmpi/mca-params.conf") << "odls_base_sigkill_timeout = soon\n";  // not a number: ignored
  t = openmpi_kill_timeout();
  ASSERT_TRUE(t.has_value());
  // Then the system's file, or Open MPI's default of 1 s.
  if (t->source == "Open MPI's default") {
    EXPECT_EQ(t->seconds, 1);
  } else {
    EXPECT_EQ(t->source, "/etc/openmpi/openmpi-mca-params.conf");
  }
}

TEST(KillTimeout, WarnsWhenTheStopDoesNotFitTwice) {
  StopNeed need;
  need.step_s = 0.5;
  need.checkpoint_bytes = int64_t{300} << 20;
  need.rate = 100.0 * (1 << 20);
  need.checkpoint_s = 3.0;
  const std::string w = kill_timeout_warning(need, {1.0, "Open MPI's default"});
  for (const char* part : {"a stop needs about 3.5 s", "300.0 MiB at 100 MiB/s", "kill timeout of 1 s (Open MPI's default)",
                           "mpirun --mca odls_base_sigkill_timeout 30", "OMPI_MCA_odls_base_sigkill_timeout=30"}) {
    EXPECT_NE(w.find(part), std::string::npos) << part << " not in: " << w;
  }
  EXPECT_EQ(kill_timeout_warning(need, {7.0, "x"}), "");   // 2 x 3.5 s fits
  EXPECT_NE(kill_timeout_warning(need, {6.9, "x"}), "");
  need.checkpoint_s = 20;  // a long write: the suggestion grows with it (4 x, in tens of seconds)
  EXPECT_NE(kill_timeout_warning(need, {1.0, "x"}).find("odls_base_sigkill_timeout 90"), std::string::npos);
}

TEST(KillTimeout, SyncedWriteRateLeavesNothingBehind) {
  test::TempDir tmp("kill-timeout-rate");
  EXPECT_GT(synced_write_rate(tmp / "", 1 << 20), 0.0);
  EXPECT_TRUE(fs::is_empty(tmp / ""));
  EXPECT_EQ(synced_write_rate(tmp / "missing", 1 << 20), 0.0);
}

class KillTimeoutRuns : public test::CliFixture {
 protected:
  KillTimeoutRuns() : CliFixture("kill-timeout-runs") {}
};

TEST_F(KillTimeoutRuns, TrainUnderMpirunSaysWhenTheTimeoutIsTooShort) {
  const std::string warn = "preemption: a stop needs about";
  // mpirun passes `--mca odls_base_sigkill_timeout 0` to the ranks: nothing fits in 0 s.
  test::RunResult r = test::run_weft_with(test::mpi_launcher(1) + " --mca odls_base_sigkill_timeout 0",
                                          "train " + config + " --out " + (*tmp / "short"), *tmp / "short");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find(warn), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("kill timeout of 0 s (OMPI_MCA_odls_base_sigkill_timeout)"), std::string::npos) << r.err;
  r = test::run_weft_with(test::mpi_launcher(1) + " --mca odls_base_sigkill_timeout 3600",
                          "train " + config + " --out " + (*tmp / "long"), *tmp / "long");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err.find(warn), std::string::npos) << r.err;
  r = weft("train " + config + " --out " + (*tmp / "plain"));  // no mpirun: no launcher's timeout
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err.find(warn), std::string::npos) << r.err;
  for (const char* run : {"short", "long", "plain"}) {
    for (const auto& e : fs::directory_iterator(*tmp / run)) {
      EXPECT_EQ(e.path().filename().string().rfind(".weft-write-probe", 0), std::string::npos) << e.path();
    }
  }
}

}  // namespace
}  // namespace weft
