// Error-feedback residuals across checkpoints and loss-scale events (train/feedback_state.h):
// a run with [compression]'s or qgZ's error feedback resumed in the same layout continues bit
// for bit (the residuals, non-zero, come back from feedback.safetensors); resumed in another
// layout it starts them from zero and says so; with fp16's dynamic loss scaling an overflow
// step drops the residuals instead of carrying inf/NaN into every later step.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "ckpt/safetensors.h"
#include "test_util.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using test::RunResult;

class FeedbackRuns : public test::ParityRuns {
 protected:
  void SetUp() override { prepare("feedback", "seq_len = 32\nglobal_batch = 4\nmicro_batch = 1\nseed = 9\n", 1); }
  // A 12-step run with a checkpoint at step 6, then a resume of that checkpoint in `resumed`:
  // both curves must agree bit for bit on steps 7-12.
  void expect_bitwise_resume(int np, const std::string& name, const std::string& args, size_t tensors) {
    const std::string full = *tmp / name;
    RunResult r = train(np, fmt::format("--ckpt_every 6 --out {} {}", full, args));
    ASSERT_EQ(r.code, 0) << r.err;
    const std::string ckpt = full + "/step-000006";
    const SafetensorsFile f(ckpt + "/feedback.safetensors");
    ASSERT_EQ(f.size(), tensors) << "one residual per rank";
    double most = 0.0;
    for (const std::string& n : f.names()) {
      std::vector<float> v(static_cast<size_t>(f.info(n).numel));
      f.read_f32(n, f.info(n).shape, v.data());
      for (float x : v) {
        ASSERT_TRUE(std::isfinite(x)) << n;
        most = std::max(most, static_cast<double>(std::fabs(x)));
      }
    }
    EXPECT_GT(most, 0.0) << "the residuals saved are all zero: the resume below would prove nothing";
    const std::string resumed = *tmp / (name + "-resumed");
    fs::create_directories(resumed);
    fs::copy(ckpt, resumed + "/step-000006", fs::copy_options::recursive);
    r = train(np, fmt::format("--resume --out {} {}", resumed, args));
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("residuals restored from the checkpoint"), std::string::npos) << r.out;
    const auto a = test::metric_series(full, "loss"), b = test::metric_series(resumed, "loss");
    ASSERT_EQ(b.size(), 6u);
    for (const auto& [step, loss] : b) EXPECT_EQ(a.at(step), loss) << name << ", step " << step << ": not bitwise";
  }
};

TEST_F(FeedbackRuns, CompressionResidualsResumeBitForBit) {
  expect_bitwise_resume(2, "int4-ef", "--compression.dp int4 --compression.error_feedback true", 2);
}

TEST_F(FeedbackRuns, QgzResidualsResumeBitForBitAndAnotherLayoutStartsFromZero) {
  const std::string args = "--zero 3 --ranks_per_node 2 --zero-quantized-gradients --zero.error_feedback true";
  expect_bitwise_resume(4, "qgz-ef", args, 4);
  // The same checkpoint on 2 ranks with [compression]'s error feedback: another layout, so
  // the residuals restart from zero, and the log names both layouts.
  const std::string other = *tmp / "qgz-to-dp2";
  fs::create_directories(other);
  fs::copy(*tmp / "qgz-ef/step-000006", other + "/step-000006", fs::copy_options::recursive);
  RunResult r = train(2, "--resume --compression.dp int8 --compression.error_feedback true --out " + other);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("belong to layout tp 1 x pp 1 x dp 4, 1 virtual stage(s), this run is tp 1 x pp 1 x dp 2"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(test::metric_series(other, "loss").size(), 6u);
}

// fp16 with a first loss scale far too large: the first steps overflow (their residuals would
// be inf/NaN and poison every later step); they are skipped, the residuals dropped, and the
// run trains once the scale has come down.
TEST_F(FeedbackRuns, Fp16OverflowDropsTheResidual) {
  const std::string out = *tmp / "fp16-ef";
  RunResult r = train(2, "--precision fp16 --initial_loss_scale 1073741824 --loss_scale_window 4 --steps 30 "
                         "--compression.dp int8 --compression.error_feedback true --out " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream in(out + "/metrics.jsonl");
  int skipped = 0, applied = 0;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("loss")) continue;
    if (j.value("skipped", false)) {
      ++skipped;
    } else {
      ASSERT_TRUE(std::isfinite(j["loss"].get<double>()));
      ++applied;
    }
  }
  EXPECT_GT(skipped, 0) << "the first scale did not overflow: the test proves nothing";
  // The scale halves per overflow (2^30 -> about 2^14 in 16 steps) and doubles after 4 good
  // steps (the residuals rescaled with it), which overflows again now and then.
  EXPECT_GE(applied, 8) << skipped << " steps skipped, " << applied << " applied";
}

}  // namespace
}  // namespace weft
