// The command line under mpirun: an error that every rank detects ends the job with one line of
// weft's message and its exit code, without MPI_Abort's banner (comm/world.h,
// end_job_on_error). One rank's failure still ends the job: the fault tests
// (tests/mpi/fault_*.cc, dp_parity_test's StalledOrDeadRankStopsTheJob) hold that.
#include <gtest/gtest.h>

#include <chrono>

#include "plan/system.h"
#include "test_util.h"

namespace weft {
namespace {

using test::RunResult;
using test::TempDir;
namespace fs = std::filesystem;

int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

class CliMpi : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!WEFT_HAVE_MPI) GTEST_SKIP() << "weft was built without MPI (WEFT_WITH_MPI=OFF): no mpirun job to test";
    tmp = std::make_unique<TempDir>("cli_mpi");
  }
  // `weft ARGS` on np ranks; `launcher_flags` go to mpirun (e.g. --quiet).
  RunResult weft(int np, const std::string& args, const std::string& launcher_flags = "") {
    std::string launcher = test::mpi_launcher(np);
    launcher.insert(std::string("mpirun").size(), " " + launcher_flags);
    const auto t0 = std::chrono::steady_clock::now();
    RunResult r = test::run_weft_with(launcher, args, *tmp / fmt::format("cmd{}", n++));
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
  }
  std::unique_ptr<TempDir> tmp;
  int n = 0;
  double seconds = 0;
};

// weft calibrate on 2 ranks measures how the ranks' times differ between synchronisations and
// notes it; --sync-jitter keeps it as [defaults] sync_jitter (segments increasing, cv
// non-increasing), which `weft plan --explain` then prices a tp 2 layout's waits from.
TEST_F(CliMpi, CalibrateMeasuresTheWaitsAtSynchronisations) {
  const std::string file = *tmp / "local.toml";
  RunResult r = weft(2, "calibrate --quick --threads 1 --sync-jitter --out " + file);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("synchronisation of 2 ranks after segments of products"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("kept as sync_jitter"), std::string::npos) << r.out;
  const plan::System s = plan::load_system(file);
  ASSERT_EQ(s.defaults.sync_jitter.size(), 3u);
  for (size_t i = 1; i < 3; ++i) {
    EXPECT_GT(s.defaults.sync_jitter[i].first, s.defaults.sync_jitter[i - 1].first);
    EXPECT_LE(s.defaults.sync_jitter[i].second, s.defaults.sync_jitter[i - 1].second);
  }
  r = test::run_weft("plan --model tiny --seq 64 --global-batch 8 --precision fp32 --gpus 2 --tp 2 --explain --system " +
                         file,
                     *tmp / "plan");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("measured sync_jitter: "), std::string::npos) << r.out;
}

TEST_F(CliMpi, BadConfigOnEveryRankEndsWithOneLineAndExit2) {
  const std::string bad = *tmp / "bad.toml";
  std::ofstream(bad) << "[train]\nlrr = 1.0\n[run]\nout = \"" << (*tmp / "run") << "\"\n";
  for (int np : {2, 3}) {
    RunResult r = weft(np, "train " + bad);
    const std::string all = r.out + r.err;
    EXPECT_EQ(r.code, 2) << all;
    EXPECT_EQ(count_of(all, "unknown key 'train.lrr'"), 1) << all;  // printed once, by rank 0
    EXPECT_EQ(count_of(all, "weft: " + bad), 1) << all;
    EXPECT_EQ(all.find("MPI_ABORT"), std::string::npos) << all;
    EXPECT_EQ(all.find("[rank "), std::string::npos) << all;
    EXPECT_LT(seconds, 20.0) << all;
  }
  // With mpirun --quiet (which silences mpirun's own non-zero exit banner) the whole output is
  // weft's one line.
  RunResult q = weft(2, "train " + bad, "--quiet");
  EXPECT_EQ(q.code, 2);
  EXPECT_EQ(q.out, "");
  EXPECT_EQ(count_of(q.err, "\n"), 1) << q.err;
  EXPECT_EQ(q.err.rfind("weft: " + bad + ": unknown key 'train.lrr'", 0), 0u) << q.err;
  EXPECT_FALSE(fs::exists(*tmp / "run"));
}

// Both ranks of one node predict the node's sum and refuse together: one line, exit 2, no
// folder, nothing allocated.
TEST_F(CliMpi, MemoryRefusalOnTwoRanksIsOneLine) {
  test::make_random_corpus(*tmp / "data", 6000, 1200);
  const std::string cfg = *tmp / "big.toml";
  std::ofstream(cfg) << "[model]\nn_layer = 48\nn_head = 64\nn_embd = 8192\nn_ctx = 16\n[data]\ndata = \""
                     << (*tmp / "data") << "\"\n[train]\nglobal_batch = 2\nmicro_batch = 1\n[run]\nout = \""
                     << (*tmp / "run") << "\"\n";
  RunResult r = weft(2, "train " + cfg, "--quiet");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(count_of(r.err, "\n"), 1) << r.err;
  EXPECT_NE(r.err.find("does not fit in memory: node 0 (ranks 0,1) needs"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("2 ranks"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(*tmp / "run"));
}

TEST_F(CliMpi, BadOptionOfASubcommandIsPrintedOnce) {
  RunResult r = weft(2, "eval --checkpoint x --data y --bogus 1", "--quiet");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(count_of(r.err, "--bogus"), 1) << r.err;
}

}  // namespace
}  // namespace weft
