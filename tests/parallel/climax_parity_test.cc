// The ClimaX model (climax-tiny) through `weft train` on generated weather fields: layout parity
// (fp32, 1e-5 relative) of tensor parallelism, ZeRO-3 data parallelism and both together against
// one process, and layout-free checkpoints (tp 2 resumes a one-process run).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "test_util.h"

namespace weft {
namespace {

using test::RunResult;
using test::TempDir;
namespace fs = std::filesystem;
using test::expect_same_series;
using test::metric_series;

class ClimaxRuns : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp = std::make_unique<TempDir>("climax");
    RunResult r = test::run_weft("prepare --synthetic-weather " + (*tmp / "weather") + " --days 30 --seed 5",
                                 *tmp / "prep");
    ASSERT_EQ(r.code, 0) << r.err;
    config = *tmp / "run.toml";
    std::ofstream(config) << "[model]\nmodel = \"climax-tiny\"\n[data]\ndata = \"" << (*tmp / "weather") << "\"\n"
                          << "lead_hours = [6, 12]\n"
                          << "[train]\nglobal_batch = 4\nmicro_batch = 2\nsteps = 6\nlr = 1e-3\nwarmup_steps = 2\n"
                          << "threads = 1\nseed = 11\n[eval]\nval_every = 3\nval_batches = 1\n"
                          << "[checkpoint]\nkeep_last = 0\n[parallel]\ncomm_timeout = 120.0\n";
  }
  RunResult train(int np, const std::string& args) {
    return test::run_weft_with(test::mpi_launcher(np), "train " + config + " " + args,
                               *tmp / fmt::format("cmd{}", n++));
  }
  std::unique_ptr<TempDir> tmp;
  std::string config;
  int n = 0;
};

TEST_F(ClimaxRuns, TensorAndShardedDataParallelMatchOneProcess) {
  RunResult r = train(0, "--out " + *tmp / "ref");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto ref = metric_series(*tmp / "ref", "loss"), ref_val = metric_series(*tmp / "ref", "val_loss");
  ASSERT_EQ(ref.size(), 6u);
  ASSERT_EQ(ref_val.size(), 3u);
  EXPECT_LT(ref_val.rbegin()->second, ref_val.begin()->second);  // it learns
  const std::vector<std::pair<int, std::string>> layouts = {
      {2, "--tp 2"},
      {2, "--dp 2 --zero 3 --micro_batch 1"},
      {4, "--tp 2 --dp 2 --zero 3 --micro_batch 1"},
  };
  for (const auto& [np, args] : layouts) {
    const std::string out = *tmp / fmt::format("run{}", n);
    r = train(np, args + " --out " + out);
    ASSERT_EQ(r.code, 0) << args << ": " << r.err;
    expect_same_series(metric_series(out, "loss"), ref, args);
    expect_same_series(metric_series(out, "val_loss"), ref_val, args + " (validation)");
  }
}

TEST_F(ClimaxRuns, CheckpointsAreLayoutFreeAndBadLayoutsAreRefused) {
  RunResult r = train(0, "--ckpt_every 3 --out " + *tmp / "ref");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto ref = metric_series(*tmp / "ref", "loss");
  fs::create_directories(*tmp / "a");
  fs::copy(*tmp / "ref/step-000003", *tmp / "a/step-000003", fs::copy_options::recursive);
  r = train(2, "--tp 2 --resume --out " + *tmp / "a");
  ASSERT_EQ(r.code, 0) << r.err;
  expect_same_series(metric_series(*tmp / "a", "loss"), ref, "tp 1 -> tp 2");
  // ClimaX has no pipeline stages: refused with the numbers, before anything is written.
  r = train(2, "--pp 2 --out " + *tmp / "pp");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("ClimaX models run without pipeline stages: pp must be 1, got 2"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(*tmp / "pp/metrics.jsonl"));
}

}  // namespace
}  // namespace weft
