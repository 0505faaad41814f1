// What the golden curves do not cover, on cpu-guarded (device memory fenced from the host)
// against cpu, bit for bit: the GPipe and 1F1B pipeline schedules, a checkpoint written on one
// backend and resumed on the other, `weft eval` and `weft generate` in several layouts. The
// golden curves (tests/golden) run the other layouts and features on cpu-guarded.
// And on cpu-guarded-staged (host access refused, as on a GPU) with `--comm mpi`: every
// transfer of device memory is then copied out, sent by MPI and copied in, the path that
// `--backend cuda --comm mpi` takes when ranks share a GPU: the layout-parity runs against one
// rank (1e-5 relative, the GPU checklist's criterion) and a checkpoint that moves between
// cpu and cpu-guarded-staged in a pipeline x data-parallel layout.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using test::metric_series;
using test::RunResult;

class GuardedEngine : public test::ParityRuns {
 protected:
  void SetUp() override { prepare("guarded", "seq_len = 32\nglobal_batch = 4\nmicro_batch = 1\nseed = 5\n", 1); }
  RunResult weft(int np, const std::string& args) {
    return test::run_weft_with(test::mpi_launcher(np), args, *tmp / fmt::format("cmd{}", n++));
  }
  // Every step's loss and grad norm and every validation loss of a run folder.
  static std::vector<std::map<int64_t, double>> curves(const std::string& run) {
    return {metric_series(run, "loss"), metric_series(run, "grad_norm"), metric_series(run, "val_loss")};
  }
  // `steps` steps of `layout` on 4 ranks on cpu in one go; the same run stopped at `stop` on
  // backend `a` (a --backend value, options may follow) and resumed on `b`, and the other way
  // round: every step's loss bit for bit.
  void expect_resume_across(const std::string& layout, int steps, int stop, const std::string& a,
                            const std::string& b, const std::string& tag) {
    const std::string ref = *tmp / ("ref-" + tag);
    RunResult r = train(4, fmt::format("--steps {} {} --out {}", steps, layout, ref));
    ASSERT_EQ(r.code, 0) << r.err;
    for (const auto& [first, second] : std::vector<std::pair<std::string, std::string>>{{a, b}, {b, a}}) {
      const std::string out = *tmp / fmt::format("{}-{}", tag, first == a ? "forth" : "back");
      r = train(4, fmt::format("--steps {} --ckpt_every {} {} --backend {} --out {}", stop, stop, layout, first, out));
      ASSERT_EQ(r.code, 0) << r.err;
      r = train(4, fmt::format("--steps {} {} --resume --backend {} --out {}", steps, layout, second, out));
      ASSERT_EQ(r.code, 0) << r.err;
      const auto x = metric_series(ref, "loss"), y = metric_series(out, "loss");
      for (int s = 1; s <= steps; ++s) EXPECT_EQ(x.at(s), y.at(s)) << first << " then " << second << ", step " << s;
    }
  }
};

TEST_F(GuardedEngine, PipelineSchedulesGiveTheCpuBits) {
  for (const char* schedule : {"gpipe", "1f1b"}) {
    const std::string args = fmt::format("--steps 3 --pp 2 --schedule {} --val_every 3", schedule);
    const std::string a = *tmp / fmt::format("{}-cpu", schedule), b = *tmp / fmt::format("{}-guarded", schedule);
    RunResult r = train(2, args + " --out " + a);
    ASSERT_EQ(r.code, 0) << r.err;
    r = train(2, args + " --backend cpu-guarded --out " + b);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(curves(a), curves(b)) << schedule;
    EXPECT_EQ(metric_series(a, "loss").size(), 3u);
  }
}

TEST_F(GuardedEngine, CheckpointsResumeAcrossBackends) {
  // tp 2 x dp 2, ZeRO 1, bf16: 6 steps, stopped at step 3.
  expect_resume_across("--tp 2 --dp 2 --zero 1 --precision bf16 --val_batches 0", 6, 3, "cpu-guarded", "cpu",
                       "tp-dp");
}

TEST_F(GuardedEngine, HostStagedLayoutsFollowOneRank) {
  const std::string common = "--steps 4 --val_batches 0 --micro_batch 1";
  const std::string ref = *tmp / "one-rank";
  RunResult r = train(0, common + " --out " + ref);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto x = metric_series(ref, "loss");
  ASSERT_EQ(x.size(), 4u);
  for (const auto& [name, layout] : std::vector<std::pair<std::string, std::string>>{
           {"dp2-zero1", "--dp 2 --zero 1"},
           {"tp2-sp", "--tp 2 --sequence_parallel true"},
           {"pp2-1f1b", "--pp 2 --schedule 1f1b"}}) {
    const std::string out = *tmp / ("staged-" + name);
    r = train(2, common + " " + layout + " --backend cpu-guarded-staged --comm mpi --out " + out);
    ASSERT_EQ(r.code, 0) << name << ": " << r.err;
    const auto y = metric_series(out, "loss");
    ASSERT_EQ(y.size(), x.size()) << name;
    for (const auto& [step, loss] : x) EXPECT_NEAR(y.at(step), loss, 1e-5 * std::abs(loss)) << name << " step " << step;
  }
}

TEST_F(GuardedEngine, CheckpointsMoveBetweenCpuAndHostStaging) {
  // pp 2 x dp 2 (ZeRO 1, 1F1B): 4 steps, stopped at step 2; host staging on one side.
  expect_resume_across("--pp 2 --dp 2 --zero 1 --micro_batch 1 --val_batches 0", 4, 2,
                       "cpu-guarded-staged --comm mpi", "cpu", "pp-dp");
}

TEST_F(GuardedEngine, CommNamesAreCheckedAgainstTheBackend) {
  RunResult r = train(0, "--steps 1 --comm nccl --out " + *tmp / "bad");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("communicator 'nccl'"), std::string::npos) << r.err;
  r = train(0, "--steps 1 --comm gloo --out " + *tmp / "bad");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unknown communicator 'gloo' (known: mpi"), std::string::npos) << r.err;
}

TEST_F(GuardedEngine, EvalAndGenerateGiveTheCpuBits) {
  RunResult r = train(0, "--steps 2 --val_batches 0 --out " + *tmp / "run");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string eval = "eval --checkpoint " + *tmp / "run" + " --data " + *tmp / "data" + " --windows 5 --format json ";
  for (const auto& [np, layout] : std::vector<std::pair<int, std::string>>{
           {0, "--batch 2"}, {4, "--tp 2 --pp 2 --batch 2"}, {2, "--dp 2 --zero 3 --batch 2"}}) {
    RunResult a = weft(np, eval + layout);
    RunResult b = weft(np, eval + layout + " --backend cpu-guarded");
    ASSERT_EQ(a.code, 0) << layout << ": " << a.err;
    ASSERT_EQ(b.code, 0) << layout << ": " << b.err;
    EXPECT_EQ(nlohmann::json::parse(a.out)["loss"].get<double>(), nlohmann::json::parse(b.out)["loss"].get<double>())
        << layout;
  }
  const std::string gen = "generate --checkpoint " + *tmp / "run" + " --tokens 10 --prompt Hello --seed 3 ";
  for (const auto& [np, layout] : std::vector<std::pair<int, std::string>>{{0, ""}, {4, "--tp 2 --pp 2"}}) {
    RunResult a = weft(np, gen + layout);
    RunResult b = weft(np, gen + layout + " --backend cpu-guarded");
    ASSERT_EQ(a.code, 0) << layout << ": " << a.err;
    ASSERT_EQ(b.code, 0) << layout << ": " << b.err;
    EXPECT_EQ(a.out, b.out) << layout;
    EXPECT_GT(a.out.size(), 5u);
  }
}

}  // namespace
}  // namespace weft
