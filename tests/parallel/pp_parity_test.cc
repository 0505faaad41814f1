// Pipeline parallelism by layout parity (fp32, 1e-5 relative, 12 steps of the tiny preset):
// pp 2, 3 (uneven stages) and 4 with the GPipe and 1F1B schedules, interleaved 1F1B with 2 virtual stages (pp 2,
// pp 2 x dp 2, and pp 4 on an 8-layer model), 3D tp 2 x pp 2 x dp 2 with ZeRO-1 on 8 ranks, the activation sets each stage keeps
// in flight, checkpoints that resume across pipeline depths and schedules, and the layouts
// refused with a message.
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

// The `pipeline` object of a run's first step.
nlohmann::json first_pipeline(const std::string& run) {
  std::ifstream in(run + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("pipeline")) return j["pipeline"];
  }
  return {};
}

TEST_F(PipelineRuns, SchedulesAndThreeDLayoutsMatchOneProcess) {
  RunResult r = train(0, "--ckpt_every 6 --out " + *tmp / "ref");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto ref = metric_series(*tmp / "ref", "loss"), ref_val = metric_series(*tmp / "ref", "val_loss");
  ASSERT_EQ(ref.size(), 12u);
  const std::vector<std::pair<int, std::string>> layouts = {
      {2, "--pp 2 --schedule gpipe"},
      {2, "--pp 2 --schedule 1f1b"},
      {3, "--pp 3"},  // 4 layers on 3 stages: the partition's uneven 2, 1, 1
      {4, "--pp 4 --schedule 1f1b"},
      {4, "--pp 4 --schedule gpipe --micro_batch 1"},
      {2, "--pp 2 --schedule interleaved --virtual_stages 2 --micro_batch 1"},
      {4, "--pp 2 --dp 2 --zero 1 --schedule interleaved --virtual_stages 2 --micro_batch 1"},
      {8, "--tp 2 --pp 2 --dp 2 --zero 1 --micro_batch 1"}};
  // Activation sets in flight per stage, measured while running the schedule: m for GPipe,
  // min(p - s, m) for 1F1B, and for interleaved (p 2, v 2, m 8) the Megatron warm-up
  // W = (p - s - 1) * 2 + (v - 1) * p forwards plus one: 5 and 3 (m 8 or 4).
  const std::vector<std::vector<int>> in_flight = {{4, 4}, {2, 1}, {3, 2, 1}, {4, 3, 2, 1}, {8, 8, 8, 8}, {5, 3}, {5, 3}, {2, 1}};
  for (size_t k = 0; k < layouts.size(); ++k) {
    const auto& [np, args] = layouts[k];
    const std::string out = *tmp / fmt::format("run{}", n);
    r = train(np, args + " --out " + out);
    ASSERT_EQ(r.code, 0) << args << ": " << r.err;
    expect_same_series(metric_series(out, "loss"), ref, args);
    expect_same_series(metric_series(out, "val_loss"), ref_val, args + " (validation)");
    const nlohmann::json pipe = first_pipeline(out);
    ASSERT_TRUE(pipe.contains("in_flight_peak")) << args;
    EXPECT_EQ(pipe["in_flight_peak"].get<std::vector<int>>(), in_flight[k]) << args;
    EXPECT_EQ(pipe["in_flight_planned"].get<std::vector<int>>(), in_flight[k]) << args;
  }
}

TEST_F(PipelineRuns, FourStagesInterleavedMatchOneProcess) {
  // pp 4 x v 2 = 8 chunks: the tiny preset with 8 layers, one layer per chunk; m = 8. Chunk
  // c on stage c % 4, so every micro-batch crosses the four stages twice.
  RunResult r = train(0, "--n_layer 8 --out " + *tmp / "ref8");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string out = *tmp / "pp4v2";
  r = train(4, "--n_layer 8 --pp 4 --schedule interleaved --virtual_stages 2 --micro_batch 1 --out " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  expect_same_series(metric_series(out, "loss"), metric_series(*tmp / "ref8", "loss"), "pp 4 interleaved v 2");
  expect_same_series(metric_series(out, "val_loss"), metric_series(*tmp / "ref8", "val_loss"), "pp 4 interleaved (validation)");
  // Megatron's warm-up + 1 per stage s: min((4 - s - 1) * 2 + (2 - 1) * 4 + 1, m v = 16).
  const nlohmann::json pipe = first_pipeline(out);
  EXPECT_EQ(pipe["in_flight_peak"].get<std::vector<int>>(), (std::vector<int>{11, 9, 7, 5}));
}

TEST_F(PipelineRuns, CheckpointsResumeAcrossPipelineDepths) {
  RunResult r = train(0, "--out " + *tmp / "ref");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto ref = metric_series(*tmp / "ref", "loss");
  r = train(2, "--pp 2 --schedule interleaved --virtual_stages 2 --ckpt_every 6 --out " + *tmp / "pp2");
  ASSERT_EQ(r.code, 0) << r.err;
  // pp 2 interleaved -> one process, -> pp 4, -> pp 2 1F1B
  for (const auto& [np, args] : std::vector<std::pair<int, std::string>>{{0, ""}, {4, "--pp 4"}, {2, "--pp 2"}}) {
    const std::string out = *tmp / fmt::format("resume{}", np);
    fs::create_directories(out);
    fs::copy(*tmp / "pp2/step-000006", out + "/step-000006", fs::copy_options::recursive);
    r = train(np, args + " --resume --out " + out);
    ASSERT_EQ(r.code, 0) << r.err;
    auto c = metric_series(out, "loss");
    EXPECT_EQ(c.begin()->first, 7);
    expect_same_series(c, ref, "pp 2 interleaved -> " + (args.empty() ? std::string("pp 1") : args));
  }
}

TEST_F(PipelineRuns, UnsupportedCombinationsAreRefused) {
  struct Case {
    int np;
    std::string args, message;
  };
  const std::vector<Case> cases = {
      {2, "--pp 2 --zero 2", "zero 2 with pp 2"},
      {2, "--pp 2 --schedule 1f1b --virtual_stages 2", "virtual_stages 2 needs the interleaved schedule"},
      {2, "--pp 2 --schedule interleaved --virtual_stages 4", "pp 2 x virtual_stages 4 = 8 model chunks"},
      {4, "--n_layer 8 --pp 4 --schedule interleaved --virtual_stages 2 --micro_batch 4",  // m = 2
       "the interleaved schedule needs micro-batches 2"},
      {2, "--pp 2 --schedule interleaved", "the interleaved schedule needs virtual_stages >= 2, got 1"},
      // One stage ignores the schedule: refused rather than silently run as 1F1B.
      {0, "--schedule gpipe", "schedule 'gpipe' needs pp > 1"},
      // Sequence parallelism with tp 1 would change nothing: refused, not a warning.
      {0, "--sequence_parallel true", "sequence parallelism needs tp > 1"},
      {2, "--pp 2 --schedule zigzag", "zigzag"}};
  for (const Case& c : cases) {
    const std::string out = *tmp / fmt::format("refused{}", n);
    const RunResult r = train(c.np, c.args + " --out " + out);
    EXPECT_EQ(r.code, 2) << c.args;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << ": " << r.err;
    EXPECT_FALSE(fs::exists(out + "/metrics.jsonl")) << c.args;
  }
}

}  // namespace
}  // namespace weft
