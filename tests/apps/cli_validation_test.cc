// Inputs validated before any work or folder, through the command line: each class of bad
// input gets one line naming the values, its exit code, and nothing written.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>

#include "ckpt/checkpoint.h"
#include "model/config.h"
#include "model/gpt/gpt_config.h"
#include "model/params.h"
#include "test_util.h"

namespace weft {
namespace {

using test::RunResult;
using test::TempDir;
namespace fs = std::filesystem;

// `code`, one line on stderr holding every fragment.
void expect_refused(const RunResult& r, int code, const std::vector<std::string>& fragments) {
  EXPECT_EQ(r.code, code) << "stderr: " << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "stderr should be one line: " << r.err;
  for (const auto& f : fragments) EXPECT_NE(r.err.find(f), std::string::npos) << "missing '" << f << "' in: " << r.err;
}

class CliValidation : public test::CliFixture {
 protected:
  CliValidation() : CliFixture("cli_validation") {}
  void SetUp() override {
    CliFixture::SetUp();
    fs::create_directories(*tmp / "folder");
  }
  RunResult weft(const std::string& args) {
    const auto t0 = std::chrono::steady_clock::now();
    RunResult r = CliFixture::weft(args);
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
  }
  // A checkpoint of the test's model whose every parameter is `value` except where `fill` says.
  std::string checkpoint_with(const std::string& name, float value) {
    const ModelConfig mc = make_model_config("tiny", 1, 2, 32, 16, 50257);
    ParamLayout layout = param_layout(mc);
    std::vector<float> params(static_cast<size_t>(layout.total()), 0.01f);
    for (const ParamTensor& t : layout.tensors()) {
      if (t.name.find("ln_f.weight") != std::string::npos || t.name.find("wte") != std::string::npos) {
        std::fill_n(params.begin() + t.offset, t.numel, value);
      }
    }
    CheckpointData d;
    d.model = &mc;
    d.layout = &layout;
    d.params = params.data();
    d.trainer = {{"step", 1}};
    const std::string dir = *tmp / name;
    save_checkpoint(dir, d);
    return dir;
  }
  double seconds = 0;
};

TEST_F(CliValidation, FoldersGivenAsFilesAreRefused) {
  expect_refused(weft("train " + *tmp / "folder"), 2, {*tmp / "folder", "is a folder, not a config file"});
  expect_refused(weft("train " + config + " --system " + *tmp / "folder"), 2,
                 {"system file " + *tmp / "folder", "is a folder"});
  expect_refused(weft("plan --model tiny --system " + *tmp / "folder" + " --gpus 1 --global-batch 8"), 2,
                 {"is a folder"});
  EXPECT_FALSE(fs::exists(*tmp / "run"));
}

// A system file's numbers are finite and a level's devices a whole number, whatever command
// reads it (plan, train's step-time prediction before the engine exists).
TEST_F(CliValidation, NonFiniteOrFractionalSystemValuesAreRefused) {
  const std::string base = test::read_text(std::string(WEFT_SOURCE_DIR) + "/systems/dgx-a100-80gb.toml");
  auto variant = [&](const std::string& name, const std::string& from, const std::string& to) {
    std::string text = base;
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    std::ofstream(*tmp / name) << text;
    return *tmp / name;
  };
  const std::string plan = " --model tiny --gpus 8 --global-batch 8";
  const std::string inf = variant("inf.toml", "peak_flops_16 = 312e12", "peak_flops_16 = inf");
  expect_refused(weft("plan --system " + inf + plan), 2, {inf, "peak_flops_16 must be a finite number", "inf"});
  const std::string nan = variant("nan.toml", "memory_bytes = 85.9e9", "memory_bytes = nan");
  expect_refused(weft("train " + config + " --system " + nan), 2, {nan, "memory_bytes must be a finite number"});
  const std::string frac = variant("frac.toml", "devices = 8", "devices = 2.5");
  expect_refused(weft("plan --system " + frac + plan), 2, {frac, "devices must be a whole number", "2.5"});
  EXPECT_FALSE(fs::exists(*tmp / "run"));
}

TEST_F(CliValidation, NonFiniteAndOutOfRangeConfigValuesAreRefused) {
  std::ofstream(*tmp / "inf.toml") << "[train]\nlr = inf\n";
  expect_refused(weft("train " + *tmp / "inf.toml" + " --out " + *tmp / "run"), 2, {"train.lr", "finite", "inf"});
  std::ofstream(*tmp / "nan.toml") << "[train]\nweight_decay = nan\n";
  expect_refused(weft("train " + *tmp / "nan.toml" + " --out " + *tmp / "run"), 2, {"train.weight_decay", "nan"});
  expect_refused(weft("train " + config + " --steps 0"), 2, {"steps must be >= 1", "got 0"});
  expect_refused(weft("train " + config + " --eps 0"), 2, {"eps must be positive", "got 0"});
  expect_refused(weft("train " + config + " --threads 100000"), 2, {"threads = 100000"});
  expect_refused(weft("train " + config + " --steps 4000000000 --global_batch 2000000000 --micro_batch 2000000000"), 2,
                 {"overflows a 64-bit integer", "steps 4000000000 x global_batch 2000000000"});
  EXPECT_FALSE(fs::exists(*tmp / "run"));
}

// The model of 48 layers of width 8192 (about 39 G parameters, 16 bytes each with Adam) fits
// no test machine: refused before the engine allocates, in well under the time an allocation
// of that size would take, naming every category.
TEST_F(CliValidation, AModelThatDoesNotFitInMemoryIsRefusedBeforeAllocating) {
  const std::string big = " --n_layer 48 --n_embd 8192 --n_head 64";
  RunResult r = weft("train " + config + big);
  expect_refused(r, 2, {"does not fit in memory", "node 0 (ranks 0)", "params ", "grads ", "optimizer ",
                        "activations ", "workspace ", "comm buffers ", "are available", "--memory_check off"});
  EXPECT_LT(seconds, 10.0);
  EXPECT_FALSE(fs::exists(*tmp / "run"));
  // The check's mode is a config key: a bad one is refused like any other.
  expect_refused(weft("train " + config + big + " --memory_check sometimes"), 2, {"memory_check", "sometimes"});
}

TEST_F(CliValidation, EvalAndGenerateValidateTheirOptions) {
  const std::string ckpt = checkpoint_with("ckpt", 0.01f);
  const std::string data = " --data " + *tmp / "data/x_val_000000.bin";
  expect_refused(weft("eval --checkpoint " + ckpt + data + " --threads -1"), 2, {"--threads = -1"});
  expect_refused(weft("generate --checkpoint " + ckpt + " --threads 100000"), 2, {"--threads = 100000"});
  expect_refused(weft("eval --checkpoint " + ckpt + data + " --tp 0"), 2, {"--tp 0"});
  expect_refused(weft("generate --checkpoint " + ckpt + " --pp 99999999999"), 2, {"--pp 99999999999"});
  expect_refused(weft("generate --checkpoint " + ckpt + " --temperature inf"), 2, {"--temperature", "inf"});
  expect_refused(weft("generate --checkpoint " + *tmp / "folder"), 2, {*tmp / "folder"});
  expect_refused(weft("eval --checkpoint " + config + data), 2, {config});
  // The same checkpoint with sane options evaluates to a finite loss.
  RunResult ok = weft("eval --checkpoint " + ckpt + data + " --windows 2 --format json");
  ASSERT_EQ(ok.code, 0) << ok.err;
  EXPECT_TRUE(std::isfinite(nlohmann::json::parse(ok.out)["loss"].get<double>()));
}

TEST_F(CliValidation, NonFiniteWeightsOrLossesAreErrors) {
  const std::string data = " --data " + *tmp / "data/x_val_000000.bin --windows 2";
  const std::string nan_ckpt = checkpoint_with("nan", std::numeric_limits<float>::quiet_NaN());
  expect_refused(weft("eval --checkpoint " + nan_ckpt + data), 1, {nan_ckpt, "wte", "non-finite weights"});
  expect_refused(weft("generate --checkpoint " + nan_ckpt + " --tokens 2"), 1, {nan_ckpt, "non-finite weights"});
  // Finite weights so large that the logits overflow: the loss is not a number.
  const std::string huge = checkpoint_with("huge", 3e38f);
  RunResult r = weft("eval --checkpoint " + huge + data);
  expect_refused(r, 1, {"eval: the mean loss of " + huge, "not a number"});
  EXPECT_EQ(r.out, "");  // no "loss nan" line
}

TEST_F(CliValidation, CalibrateChecksItsOutputBeforeMeasuring) {
  expect_refused(weft("calibrate --quick --out " + *tmp / "folder"), 2, {"--out " + *tmp / "folder", "is a folder"});
  EXPECT_LT(seconds, 5.0);  // refused before measuring (a quick calibration takes longer)
  std::ofstream(*tmp / "file") << "x";
  expect_refused(weft("calibrate --quick --out " + *tmp / "file/local.toml"), 2, {*tmp / "file", "is not a folder"});
  EXPECT_EQ(test::read_text(*tmp / "file"), "x");
  expect_refused(weft("calibrate --threads -2 --out " + *tmp / "x.toml"), 2, {"--threads = -2"});
  EXPECT_FALSE(fs::exists(*tmp / "x.toml"));
}

}  // namespace
}  // namespace weft
