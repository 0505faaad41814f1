// weft eval, generate and bench run any layout through the engine: the loss of a checkpoint
// in tp x pp and dp x ZeRO-3 layouts equals the single process's (1e-6 relative), sampling
// through a pipeline and tensor parallelism gives the single process's text token for token,
// and the bench times a tp 2 x pp 2 layout and reports it.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace weft {
namespace {

using test::RunResult;

class EngineCommands : public test::ParityRuns {
 protected:
  void SetUp() override {
    prepare("engine", "seq_len = 32\nglobal_batch = 4\nmicro_batch = 2\nseed = 7\n", 1);
    RunResult r = train(0, "--steps 2 --out " + *tmp / "run");
    ASSERT_EQ(r.code, 0) << r.err;
  }
  RunResult weft(int np, const std::string& args) {
    return test::run_weft_with(test::mpi_launcher(np), args, *tmp / fmt::format("cmd{}", n++));
  }
  double eval_loss(int np, const std::string& layout) {
    RunResult r = weft(np, "eval --checkpoint " + *tmp / "run" + " --data " + *tmp / "data" +
                               " --windows 6 --format json " + layout);
    EXPECT_EQ(r.code, 0) << layout << ": " << r.err;
    return nlohmann::json::parse(r.out)["loss"].get<double>();
  }
};

TEST_F(EngineCommands, EvalInAnyLayoutMatchesOneProcess) {
  const double ref = eval_loss(0, "--batch 2");
  ASSERT_GT(ref, 0.0);
  for (const auto& [np, layout] : std::vector<std::pair<int, std::string>>{
           {2, "--pp 2 --batch 1"}, {4, "--tp 2 --pp 2 --batch 2"}, {4, "--tp 2 --dp 2 --zero 3 --batch 2"},
           {2, "--tp 2 --sequence-parallel --batch 2"}}) {
    EXPECT_NEAR(eval_loss(np, layout), ref, 1e-6 * ref) << layout;
  }
}

TEST_F(EngineCommands, GenerateThroughAPipelineMatchesOneProcess) {
  const std::string args = "generate --checkpoint " + *tmp / "run" + " --tokens 12 --prompt Hello --seed 3";
  RunResult ref = weft(0, args);
  ASSERT_EQ(ref.code, 0) << ref.err;
  ASSERT_GT(ref.out.size(), 6u);
  for (const auto& [np, layout] : std::vector<std::pair<int, std::string>>{{2, "--pp 2"}, {4, "--tp 2 --pp 2"}}) {
    RunResult r = weft(np, args + " " + layout);
    ASSERT_EQ(r.code, 0) << layout << ": " << r.err;
    EXPECT_EQ(r.out, ref.out) << layout;
  }
}

TEST_F(EngineCommands, BenchTimesAnyLayout) {
  RunResult r = weft(4, "bench --model tiny --batch 4 --seq 32 --steps 2 --warmup 1 --tp 2 --pp 2 --micro-batch 1 --format json");
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["world"], 4);
  EXPECT_EQ(j["tp"], 2);
  EXPECT_EQ(j["pp"], 2);
  EXPECT_EQ(j["dp"], 1);
  EXPECT_EQ(j["micro_batch"], 1);
  EXPECT_GT(j["tokens_per_s"].get<double>(), 0.0);
  // Every layout key is an option (the TOML binding's keys, one parser): ZeRO++ and the
  // compressed collectives too, spelt as `weft train` takes them.
  r = weft(2, "bench --model tiny --batch 4 --seq 32 --steps 1 --warmup 0 --dp 2 --zero 3 "
              "--zero.quantized-weights --zero.hpz_partition_size 2 --compression.dp int8 --micro_batch 1 --format json");
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json z = nlohmann::json::parse(r.out);
  EXPECT_EQ(z["zero"], 3);
  EXPECT_EQ(z["micro_batch"], 1);
  EXPECT_NE(z["zeropp"].get<std::string>().find("qwZ int8"), std::string::npos) << z["zeropp"];
  EXPECT_NE(z["zeropp"].get<std::string>().find("hpZ 2"), std::string::npos) << z["zeropp"];
  EXPECT_NE(z["compression"].get<std::string>().find("dp=int8"), std::string::npos) << z["compression"];
  // The binding's checks are the config's: a bad codec names the key.
  r = weft(1, "bench --model tiny --batch 2 --seq 32 --steps 1 --compression.dp int3");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("compression.dp"), std::string::npos) << r.err;
  // A layout that does not divide the world: one line naming the numbers, exit 2.
  r = weft(3, "bench --model tiny --batch 4 --seq 32 --steps 1 --tp 2");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("world size 3 is not divisible by tp 2"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace weft
