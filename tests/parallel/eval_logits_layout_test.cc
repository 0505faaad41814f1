// weft eval --logits and weft generate in other layouts: tp 2, pp 2 (the last stage shares the
// logits), tp 2 x pp 2 and dp 2 with ZeRO-3 give the one-process logits of every position
// within 1e-5 of the largest logit, the same loss, and the same greedy continuation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "ckpt/safetensors.h"
#include "test_util.h"

namespace weft {
namespace {

using test::RunResult;

class EvalLogitsLayouts : public test::ParityRuns {
 protected:
  void SetUp() override { prepare("eval-logits", "seq_len = 64\nglobal_batch = 4\nmicro_batch = 2\n", 1); }
  std::vector<float> read_logits(const std::string& path) {
    SafetensorsFile f(path);
    std::vector<float> out(static_cast<size_t>(f.info("logits").numel));
    std::memcpy(out.data(), f.data("logits"), out.size() * sizeof(float));
    return out;
  }
};

TEST_F(EvalLogitsLayouts, EveryLayoutGivesTheOneProcessLogits) {
  RunResult r = train(0, "--steps 4 --ckpt_every 4 --out " + *tmp / "run");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string ckpt = *tmp / "run/step-000004";
  const std::string eval = "eval --checkpoint " + ckpt + " --data " + *tmp / "data/x_val_000000.bin" +
                           " --windows 2 --batch 1 --format json --logits ";
  const std::string gen = "generate --checkpoint " + ckpt + " --prompt Hello --tokens 12 --top-k 1";
  r = test::run_weft(eval + *tmp / "ref.st", *tmp / "ref-eval");
  ASSERT_EQ(r.code, 0) << r.err;
  const double ref_loss = nlohmann::json::parse(r.out)["loss"].get<double>();
  const std::vector<float> ref = read_logits(*tmp / "ref.st");
  float scale = 0;
  for (float v : ref) scale = std::max(scale, std::abs(v));
  r = test::run_weft(gen, *tmp / "ref-gen");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string ref_text = r.out;

  const std::vector<std::pair<int, std::string>> layouts = {
      {2, "--tp 2"}, {2, "--pp 2"}, {4, "--tp 2 --pp 2"}, {2, "--dp 2 --zero 3"}};
  for (const auto& [np, args] : layouts) {
    const std::string out = *tmp / fmt::format("l{}.st", n);
    r = test::run_weft_with(test::mpi_launcher(np), eval + out + " " + args, *tmp / fmt::format("eval{}", n++));
    ASSERT_EQ(r.code, 0) << args << ": " << r.err;
    EXPECT_NEAR(nlohmann::json::parse(r.out)["loss"].get<double>(), ref_loss, 1e-5 * ref_loss) << args;
    const std::vector<float> got = read_logits(out);
    ASSERT_EQ(got.size(), ref.size()) << args;
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, static_cast<double>(std::abs(got[i] - ref[i])));
    EXPECT_LE(worst, 1e-5 * scale) << args << ": the largest logit is " << scale;
    r = test::run_weft_with(test::mpi_launcher(np), gen + " " + args, *tmp / fmt::format("gen{}", n++));
    ASSERT_EQ(r.code, 0) << args << ": " << r.err;
    EXPECT_EQ(r.out, ref_text) << args;
  }
}

}  // namespace
}  // namespace weft
