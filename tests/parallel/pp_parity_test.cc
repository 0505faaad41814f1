// Pipeline parallelism by layout parity (fp32, 1e-5 relative, 12 steps of the tiny preset):
// pp 2 and 4 with the GPipe and 1F1B schedules, 3D tp 2 x pp 2 x dp 2 with ZeRO-1 on 8 ranks,
// checkpoints that resume across pipeline depths, and the layouts refused with a message.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace weft {
namespace {

using test::RunResult;
using test::TempDir;
namespace fs = std::filesystem;

using test::expect_same_series;
using test::metric_series;

class PipelineRuns : public test::ParityRuns {
 protected:
  void SetUp() override { prepare("pp", "seq_len = 32\nglobal_batch = 8\nmicro_batch = 2\nseed = 99\n", 1); }
};

TEST_F(PipelineRuns, SchedulesAndThreeDLayoutsMatchOneProcess) {
  RunResult r = train(0, "--ckpt_every 6 --out " + *tmp / "ref");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto ref = metric_series(*tmp / "ref", "loss"), ref_val = metric_series(*tmp / "ref", "val_loss");
  ASSERT_EQ(ref.size(), 12u);
  const std::vector<std::pair<int, std::string>> layouts = {
      {2, "--pp 2 --schedule gpipe"},
      {2, "--pp 2 --schedule 1f1b"},
      {4, "--pp 4 --schedule 1f1b"},
      {4, "--pp 4 --schedule gpipe --micro_batch 1"},
      {8, "--tp 2 --pp 2 --dp 2 --zero 1 --micro_batch 1"}};
  for (const auto& [np, args] : layouts) {
    const std::string out = *tmp / fmt::format("run{}", n);
    r = train(np, args + " --out " + out);
    ASSERT_EQ(r.code, 0) << args << ": " << r.err;
    expect_same_series(metric_series(out, "loss"), ref, args);
    expect_same_series(metric_series(out, "val_loss"), ref_val, args + " (validation)");
  }
}

TEST_F(PipelineRuns, CheckpointsResumeAcrossPipelineDepths) {
  RunResult r = train(0, "--out " + *tmp / "ref");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto ref = metric_series(*tmp / "ref", "loss");
  r = train(2, "--pp 2 --ckpt_every 6 --out " + *tmp / "pp2");
  ASSERT_EQ(r.code, 0) << r.err;
  // pp 2 -> one process, and pp 2 -> pp 4
  for (const auto& [np, args] : std::vector<std::pair<int, std::string>>{{0, ""}, {4, "--pp 4"}}) {
    const std::string out = *tmp / fmt::format("resume{}", np);
    fs::create_directories(out);
    fs::copy(*tmp / "pp2/step-000006", out + "/step-000006", fs::copy_options::recursive);
    r = train(np, args + " --resume --out " + out);
    ASSERT_EQ(r.code, 0) << r.err;
    auto c = metric_series(out, "loss");
    EXPECT_EQ(c.begin()->first, 7);
    expect_same_series(c, ref, "pp 2 -> " + (args.empty() ? std::string("pp 1") : args));
  }
}

TEST_F(PipelineRuns, UnsupportedCombinationsAreRefused) {
  RunResult r = train(2, "--pp 2 --zero 2 --out " + *tmp / "z2");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("zero 2 with pp 2"), std::string::npos) << r.err;
  r = train(2, "--pp 2 --schedule interleaved --virtual_stages 2 --out " + *tmp / "il");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("interleaved"), std::string::npos) << r.err;
  r = train(2, "--pp 2 --schedule zigzag --out " + *tmp / "zz");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("zigzag"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace weft
