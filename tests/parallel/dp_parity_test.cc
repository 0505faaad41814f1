// Data parallelism by layout parity: the same seed and global batch on 2 and 4 MPI ranks, with
// every ZeRO stage, reproduce the single-process losses (fp32, 1e-5 relative). Also: resume
// across layouts, the memory ZeRO promises, the trace volumes, and failure handling.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace weft {
namespace {

using test::RunResult;
using test::TempDir;
namespace fs = std::filesystem;

std::vector<nlohmann::json> read_metrics(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

// step -> loss (training lines) and step -> val_loss.
struct Curve {
  std::map<int64_t, double> loss, val;
};
Curve curve(const std::string& run) {
  Curve c;
  for (const auto& j : read_metrics(run + "/metrics.jsonl")) {
    if (j.contains("loss")) c.loss[j["step"]] = j["loss"].get<double>();
    if (j.contains("val_loss")) c.val[j["step"]] = j["val_loss"].get<double>();
  }
  return c;
}

void expect_same_curve(const Curve& a, const Curve& ref, const std::string& what, int64_t from_step = 1) {
  int compared = 0;
  for (const auto& [step, loss] : a.loss) {
    if (step < from_step) continue;
    ASSERT_TRUE(ref.loss.count(step)) << what << ": reference has no step " << step;
    EXPECT_NEAR(loss, ref.loss.at(step), 1e-5 * ref.loss.at(step)) << what << ", step " << step;
    ++compared;
  }
  for (const auto& [step, v] : a.val) {
    if (step < from_step || !ref.val.count(step)) continue;
    EXPECT_NEAR(v, ref.val.at(step), 1e-5 * ref.val.at(step)) << what << ", validation at step " << step;
  }
  EXPECT_GE(compared, 1) << what;
}

class DataParallelRuns : public test::ParityRuns {
 protected:
  void SetUp() override { prepare("dp", "seq_len = 64\nglobal_batch = 8\nmicro_batch = 2\nseed = 4242\n", 2); }
  std::string reference() {
    RunResult r = train(0, "--out " + *tmp / "ref");
    EXPECT_EQ(r.code, 0) << r.err;
    return *tmp / "ref";
  }
};

TEST_F(DataParallelRuns, EveryZeroStageOnTwoRanksMatchesOneProcess) {
  const Curve ref = curve(reference());
  ASSERT_EQ(ref.loss.size(), 12u);
  int64_t n_params = 0;
  std::map<int, nlohmann::json> mem;
  for (int z = 0; z <= 3; ++z) {
    const std::string out = *tmp / fmt::format("dp2-z{}", z);
    RunResult r = train(2, fmt::format("--zero {} --out {}", z, out));
    ASSERT_EQ(r.code, 0) << r.err;
    expect_same_curve(curve(out), ref, fmt::format("dp 2, zero {}", z));
    mem[z] = read_metrics(out + "/metrics.jsonl").back().contains("memory")
                 ? read_metrics(out + "/metrics.jsonl").back()["memory"]
                 : read_metrics(out + "/metrics.jsonl")[1]["memory"];
    // Every layout writes the same layout-free checkpoint format.
    EXPECT_TRUE(fs::exists(out + "/step-000012/model.safetensors"));
  }
  // Memory per rank shrinks as ZeRO promises (rank 0 holds the largest shard, S = ceil(n/2)).
  n_params = mem[0]["params"].get<int64_t>() / 4;
  const int64_t S = (n_params + 1) / 2;
  EXPECT_EQ(mem[0]["optimizer"].get<int64_t>(), 8 * n_params);
  EXPECT_EQ(mem[0]["grads"].get<int64_t>(), 4 * n_params);
  EXPECT_EQ(mem[1]["optimizer"].get<int64_t>(), 8 * S);                 // stage 1: optimizer / dp
  EXPECT_EQ(mem[1]["params"].get<int64_t>(), 4 * n_params);
  EXPECT_EQ(mem[2]["optimizer"].get<int64_t>(), 8 * S);
  EXPECT_EQ(mem[2]["grads"].get<int64_t>() - mem[2]["grads_transient"].get<int64_t>(), 4 * S);  // + gradients / dp
  // Transient per-group buffers: the tied embedding group (held for the whole backward) plus
  // two layer-sized buffers in flight, never the whole model.
  const int64_t C = 256, V = 50304, ctx = 256, layer = 12 * C * C + 13 * C;
  EXPECT_EQ(mem[2]["grads_transient"].get<int64_t>(), 4 * ((V + ctx) * C + 2 * layer));
  EXPECT_EQ(mem[3]["optimizer"].get<int64_t>(), 8 * S);
  EXPECT_EQ(mem[3]["params"].get<int64_t>() - mem[3]["params_transient"].get<int64_t>(), 4 * S);  // + parameters / dp
  // Gather buffers: the embedding group (held from the first layer to the head) plus three
  // layer-sized buffers (current, prefetched, spare).
  EXPECT_EQ(mem[3]["params_transient"].get<int64_t>(), 4 * ((V + ctx) * C + 3 * layer));
}

TEST_F(DataParallelRuns, FourRanksMatchOneProcess) {
  const Curve ref = curve(reference());
  for (int z : {0, 1, 2, 3}) {
    const std::string out = *tmp / fmt::format("dp4-z{}", z);
    RunResult r = train(4, fmt::format("--zero {} --micro_batch 1 --out {}", z, out));
    ASSERT_EQ(r.code, 0) << r.err;
    expect_same_curve(curve(out), ref, fmt::format("dp 4, zero {}", z));
  }
}

// A dp=2 ZeRO-1 checkpoint resumed at dp=4 with ZeRO-3 continues the single-process curve.
TEST_F(DataParallelRuns, ResumeAcrossDataParallelSizesAndZeroStages) {
  const Curve ref = curve(reference());
  const std::string first = *tmp / "dp2-z1";
  RunResult r = train(2, "--zero 1 --ckpt_every 6 --out " + first);
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string second = *tmp / "dp4-z3";
  fs::create_directories(second);
  fs::copy(first + "/step-000006", second + "/step-000006", fs::copy_options::recursive);
  r = train(4, "--zero 3 --micro_batch 1 --resume --out " + second);
  ASSERT_EQ(r.code, 0) << r.err;
  Curve c = curve(second);
  EXPECT_EQ(c.loss.begin()->first, 7);
  expect_same_curve(c, ref, "dp 2 zero 1 -> dp 4 zero 3", 7);
  // And back to one process with ZeRO 0.
  const std::string third = *tmp / "single";
  fs::create_directories(third);
  fs::copy(second + "/step-000012", third + "/step-000012", fs::copy_options::recursive);
  r = train(0, "--steps 14 --lr_decay_steps 12 --resume --out " + third);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(curve(third).loss.size(), 2u);
}

// The trace of one step: bytes handed to DP collectives equal the formulas.
TEST_F(DataParallelRuns, TraceVolumesMatchTheFormulas) {
  std::map<int, std::map<std::string, int64_t>> bytes;  // zero -> kind -> bytes in step 2
  int64_t n_params = 0;
  for (int z : {0, 1, 3}) {
    const std::string out = *tmp / fmt::format("trace-z{}", z);
    RunResult r = train(2, fmt::format("--zero {} --steps 2 --val_batches 0 --trace true --out {}", z, out));
    ASSERT_EQ(r.code, 0) << r.err;
    std::ifstream in(out + "/trace-rank0.jsonl");
    ASSERT_TRUE(in) << "no trace written";
    std::string line;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line);
      // The training step itself (the run also traces its final checkpoint gathers at step 2).
      if (j["step"] == 2 && j["axis"] == "dp" && j["phase"] == "train") bytes[z][j["kind"].get<std::string>()] += j["bytes"].get<int64_t>();
    }
    // n from the accounting: AdamW state of the whole model (zero 0) is 8 bytes per parameter.
    if (z == 0) n_params = read_metrics(out + "/metrics.jsonl")[0]["memory"]["optimizer"].get<int64_t>() / 8;
    nlohmann::json m;  // the last step's line
    for (const auto& j : read_metrics(out + "/metrics.jsonl")) {
      if (j.contains("loss")) m = j;
    }
    ASSERT_TRUE(m.contains("comm")) << m.dump();
    EXPECT_GT(m["comm"]["dp"]["calls"].get<int64_t>(), 0);
  }
  const int64_t grad_bytes = 4 * n_params;
  // zero 0: gradients all-reduced once per step (accumulation over micro-batches is local),
  // plus the step's loss and each of the 2 ranks' busy time (3 f64, StepResult::imbalance).
  EXPECT_EQ(bytes[0]["all_reduce"], grad_bytes + 24);
  EXPECT_EQ(bytes[0].count("reduce_scatter"), 0u);
  // ... and the embedding lookup's gradient exchanged as (token, row) pairs in the last
  // micro-batch: dp x B*T tokens (int32) and dp x B*T*C floats.
  const int64_t B = 2, T = 64, C = 256;
  EXPECT_EQ(bytes[0]["all_gather"], 2 * B * T * 4 + 2 * B * T * C * 4);
  // zero 1: gradients reduce-scattered once, parameters all-gathered once, norm, loss and busy times.
  EXPECT_EQ(bytes[1]["reduce_scatter"], grad_bytes);
  EXPECT_EQ(bytes[1]["all_gather"], grad_bytes + 2 * B * T * 4 + 2 * B * T * C * 4);
  EXPECT_EQ(bytes[1]["all_reduce"], 8 + 24);
  // zero 3: each of the 2 micro-batches per rank (8 / dp 2 / micro 2) reduce-scatters every
  // gradient. Every group is gathered at least once per step; gathered groups stay valid until
  // the optimizer changes the shards, so later uses reuse them while their buffer is not
  // needed for another group: at most twice (forward and backward) per micro-batch.
  const int64_t micro = 2;
  EXPECT_EQ(bytes[3]["reduce_scatter"], micro * grad_bytes);
  EXPECT_GE(bytes[3]["all_gather"], grad_bytes);
  EXPECT_LE(bytes[3]["all_gather"], micro * 2 * grad_bytes);
}

TEST_F(DataParallelRuns, StalledOrDeadRankStopsTheJob) {
  const auto t0 = std::chrono::steady_clock::now();
  // tests/mpi/fault_train.cc: `weft train` with rank 1 stalling (exiting) before step 3.
  auto faulty = [&](const std::string& fault, const std::string& args) {
    return test::run_weft_with(test::mpi_launcher(2), fault + " " + config + " " + args, *tmp / ("fault-" + fault),
                               WEFT_FAULT_TRAIN_BINARY);
  };
  RunResult r = faulty("stall:1:3", "--comm_timeout 3 --out " + *tmp / "stall");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(r.code, 0);
  EXPECT_LT(secs, 60.0);
  EXPECT_NE(r.err.find("did not complete within 3"), std::string::npos) << r.err;
  const auto t1 = std::chrono::steady_clock::now();
  r = faulty("exit:1:3", "--comm_timeout 5 --out " + *tmp / "dead");
  const double secs2 = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  EXPECT_NE(r.code, 0);
  EXPECT_LT(secs2, 60.0);
  EXPECT_NE(r.err.find("injecting fault 'exit' before step 3"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace weft
