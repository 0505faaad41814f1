// A ClimaX run (climax-tiny on generated weather fields, through `weft train`) against the
// planner's prediction of it (ClimaxDescription, plan/weft_memory.h, plan/comm_model.h): every
// rank's memory per category to the byte, on one process and on tp 2 x dp 2 with ZeRO-3; the
// communication model's calls equal the traced ones (the run's comm report has no mismatch);
// the planner's tensor-parallel bytes per step equal the traced ones; the run prints its
// predicted step time beside the measured one.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "comm/tracer.h"
#include "model/config.h"
#include "plan/predict.h"
#include "test_util.h"

namespace weft {
namespace {

using test::RunResult;
using test::TempDir;
namespace fs = std::filesystem;

class ClimaxPrediction : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp = std::make_unique<TempDir>("climax-plan");
    RunResult r = test::run_weft("prepare --synthetic-weather " + (*tmp / "weather") + " --days 20 --seed 3",
                                 *tmp / "prep");
    ASSERT_EQ(r.code, 0) << r.err;
    config = *tmp / "run.toml";
    std::ofstream(config) << "[model]\nmodel = \"climax-tiny\"\n[data]\ndata = \"" << (*tmp / "weather") << "\"\n"
                          << "lead_hours = [6]\n"
                          << "[train]\nglobal_batch = 8\nmicro_batch = 2\nsteps = 2\nlr = 1e-3\nthreads = 1\nseed = 5\n"
                          << "[eval]\nval_batches = 0\n[checkpoint]\nckpt_every = 0\n[parallel]\ncomm_timeout = 120.0\n";
  }
  RunResult train(int np, const std::string& args) {
    return test::run_weft_with(test::mpi_launcher(np), "train " + config + " " + args, *tmp / fmt::format("cmd{}", n++));
  }
  // The run's last line with `key`.
  nlohmann::json last(const std::string& out, const char* key) {
    std::ifstream in(out + "/metrics.jsonl");
    nlohmann::json r;
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line);
      if (j.contains(key)) r = j[key];
    }
    return r;
  }
  // Every rank's predicted memory equals its measured memory, category by category, to the byte;
  // prints rank 0's for the record.
  void expect_exact_memory(const std::string& out, const std::string& what, int ranks) {
    const nlohmann::json rep = last(out, "memory_report");
    ASSERT_EQ(static_cast<int>(rep.size()), ranks) << what;
    for (const auto& r : rep) {
      ASSERT_FALSE(r["predicted"].is_null()) << what << ": rank " << r["rank"] << " not priced";
      for (const char* k : {"params", "grads", "optimizer", "activations", "workspace", "comm"}) {
        EXPECT_EQ(r["predicted"][k].get<int64_t>(), r["measured"][k].get<int64_t>())
            << what << ", rank " << r["rank"].get<int>() << ": " << k;
      }
      EXPECT_GT(r["measured"]["activations"].get<int64_t>(), 0) << what;
    }
    const auto& p = rep[0]["predicted"];
    const auto& m = rep[0]["measured"];
    std::printf("%s, rank 0, bytes predicted / measured: params %lld / %lld, grads %lld / %lld, optimizer %lld / %lld, "
                "activations %lld / %lld, workspace %lld / %lld, comm %lld / %lld, total %lld / %lld (peak)\n",
                what.c_str(), p["params"].get<long long>(), m["params"].get<long long>(), p["grads"].get<long long>(),
                m["grads"].get<long long>(), p["optimizer"].get<long long>(), m["optimizer"].get<long long>(),
                p["activations"].get<long long>(), m["activations"].get<long long>(), p["workspace"].get<long long>(),
                m["workspace"].get<long long>(), p["comm"].get<long long>(), m["comm"].get<long long>(),
                p["total"].get<long long>(), m["total"].get<long long>());
  }
  std::unique_ptr<TempDir> tmp;
  std::string config;
  int n = 0;
};

TEST_F(ClimaxPrediction, MemoryOfOneProcessIsPredictedToTheByte) {
  for (const std::string args : {"", "--recompute full", "--zero 1"}) {
    const std::string out = *tmp / fmt::format("one{}", n);
    RunResult r = train(0, args + " --out " + out);
    ASSERT_EQ(r.code, 0) << args << ": " << r.err;
    EXPECT_EQ((r.out + r.err).find("not priced"), std::string::npos) << r.err;
    EXPECT_NE((r.out + r.err).find("memory predicted for this rank"), std::string::npos) << r.err;
    expect_exact_memory(out, "one process " + args, 1);
  }
}

TEST_F(ClimaxPrediction, MemoryOfHybridStopIsPredictedToTheByte) {
  // tp 2 x dp 2 with ZeRO-3 (ORBIT's Hybrid-STOP: ZeRO-3 over each rank's tensor-parallel shard),
  // and the plain layouts around it.
  for (const auto& [np, args] : std::vector<std::pair<int, std::string>>{
           {4, "--tp 2 --dp 2 --zero 3"}, {2, "--tp 2 --recompute full"}, {2, "--dp 2 --zero 2"}}) {
    const std::string out = *tmp / fmt::format("multi{}", n);
    RunResult r = train(np, args + " --out " + out);
    ASSERT_EQ(r.code, 0) << args << ": " << r.err;
    expect_exact_memory(out, args, np);
  }
}

// The traced calls of the training steps on one tensor-parallel group, in bytes per step.
int64_t traced_tp_bytes(const std::string& run, int rank, int64_t steps) {
  int64_t bytes = 0;
  for (const TraceEvent& ev : read_trace_jsonl(run + fmt::format("/trace-rank{}.jsonl", rank))) {
    if (ev.phase == "train" && ev.axis == "tp" && ev.bytes > 8) bytes += ev.bytes;  // not the f64 norm
  }
  return bytes / steps;
}

TEST_F(ClimaxPrediction, CommunicationModelEqualsTheTrace) {
  // Hybrid-STOP with a validation pass before the steps (ZeRO-3's buffers remember it) and full
  // recompute (one more all-reduce per block): the trainer's comm report compares every traced
  // call with plan/comm_model.h's; then the planner's tp bytes per step with the trace.
  const std::string out = *tmp / "traced";
  RunResult r = train(4, "--tp 2 --dp 2 --zero 3 --recompute full --val_batches 1 --val_every 1 --trace true --out " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream in(out + "/comm_report.json");
  ASSERT_TRUE(in);
  const nlohmann::json rep = nlohmann::json::parse(in);
  EXPECT_EQ(rep["mismatches"].get<int64_t>(), 0) << test::read_text(out + "/comm_report.txt");
  // The planner, fp32 wires and weft's own tp calls (what `weft calibrate` writes).
  plan::System sys;
  sys.name = "flat";
  sys.device.peak_flops_16 = sys.device.peak_flops_32 = 1e12;
  sys.device.memory_bytes = 1e10;
  sys.device.memory_bandwidth = 1e11;
  sys.levels.push_back(plan::LinkLevel{"net", 0, 1e10, 1e-6, {}});
  sys.defaults.tp_comm = "weft";
  sys.defaults.memory_model = "weft";
  sys.validate();
  plan::Options o = plan::Options::from_system(sys, Precision::kFp32, 8);
  plan::Layout l;
  l.tp = 2, l.dp = 2, l.micro_batch = 2, l.zero = 3, l.recompute = Recompute::kFull;
  const plan::Prediction p = plan::predict(plan::ModelShape::from_config(model_preset("climax-tiny")), sys, l, o);
  const int64_t traced = traced_tp_bytes(out, 0, 2);
  EXPECT_EQ(static_cast<int64_t>(p.traffic.tp.raw), traced);
  std::printf("tp bytes per step on one tensor-parallel group: planner %.0f, traced %lld\n", p.traffic.tp.raw,
              static_cast<long long>(traced));
}

TEST_F(ClimaxPrediction, RunsPrintThePredictedStepTime) {
  const std::string out = *tmp / "timed";
  RunResult r = train(2, "--tp 2 --steps 3 --system " + std::string(WEFT_SOURCE_DIR) + "/systems/dgx-h100.toml --out " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json rep = last(out, "step_time_report");
  ASSERT_FALSE(rep.empty());
  EXPECT_GT(rep["measured_s"].get<double>(), 0);
  EXPECT_GT(rep["predicted_s"].get<double>(), 0);
  EXPECT_GT(rep["predicted"]["tp_comm"].get<double>(), 0);  // tp 2: the blocks' and the aggregation's all-reduces
  EXPECT_NE((r.out + r.err).find("step time: predicted"), std::string::npos) << r.out;
  EXPECT_EQ((r.out + r.err).find("not priced"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace weft
