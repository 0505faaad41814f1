// The ClimaX model (climax-tiny) through `weft train` on generated weather fields: layout parity
// (fp32, 1e-5 relative) of tensor parallelism, ZeRO-3 data parallelism, HSDP (dp_shard x
// dp_replicate) and Hybrid-STOP (tp 2 x dp_shard 2 x dp_replicate 2 on 8 ranks) against one
// process; layout-free checkpoints (tp 2 resumes a one-process run); the gather buffers.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/climax/climax_description.h"
#include "model/config.h"
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
      {4, "--dp-shard 2 --dp-replicate 2 --zero 3 --micro_batch 1"},
      // Hybrid-STOP: tp innermost, then ZeRO-3 over dp_shard, replicas across dp_replicate.
      {8, "--tp 2 --dp-shard 2 --dp-replicate 2 --zero 3 --micro_batch 1"},
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

// Hybrid-STOP's memory claim: ZeRO-3 over each rank's tensor-parallel shard gathers only 1/tp of
// a block. The gather buffers (the front group, held through the step, and three block-sized
// slots: current, prefetched, spare) measured on rank 0 equal the model's own counts, and the
// block slots of tp 2 x dp 2 are those of plain ZeRO-3 (dp 4) over 2, but for the replicated
// LayerNorms and row-parallel biases.
TEST_F(ClimaxRuns, HybridStopGathersATensorParallelShardOfEachBlock) {
  const std::string common = " --steps 2 --global_batch 8 --micro_batch 2 --val_batches 0 --zero 3 --out ";
  RunResult r = train(4, "--dp 4" + common + (*tmp / "zero3"));
  ASSERT_EQ(r.code, 0) << r.err;
  r = train(4, "--tp 2 --dp 2" + common + (*tmp / "hstop"));
  ASSERT_EQ(r.code, 0) << r.err;
  auto transient = [&](const std::string& run) {  // of the last step that reports memory
    std::ifstream in(*tmp / (run + "/metrics.jsonl"));
    int64_t bytes = -1;
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line);
      if (j.contains("memory") && j["memory"].contains("params_transient")) {
        bytes = j["memory"]["params_transient"].get<int64_t>();
      }
    }
    return bytes;
  };
  ClimaxRunSpec spec;
  spec.model = model_preset("climax-tiny");
  const ClimaxDescription d(spec);
  const int64_t zero3 = transient("zero3"), hstop = transient("hstop");
  EXPECT_EQ(zero3, 4 * (d.front_params(1) + 3 * d.layer_params(1)));
  EXPECT_EQ(hstop, 4 * (d.front_params(2) + 3 * d.layer_params(2)));
  const double block_ratio = static_cast<double>(d.layer_params(2)) / static_cast<double>(d.layer_params(1));
  EXPECT_NEAR(block_ratio, 0.5, 0.01);
  std::printf("ZeRO-3 gather buffers: dp 4 %lld B, tp 2 x dp 2 %lld B (ratio %.3f; one block %.3f of its whole)\n",
              static_cast<long long>(zero3), static_cast<long long>(hstop),
              static_cast<double>(hstop) / static_cast<double>(zero3), block_ratio);
}

}  // namespace
}  // namespace weft
