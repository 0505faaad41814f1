// `weft plan` and `weft calibrate` on the command line: output formats and bad input (one
// line on stderr naming the values, exit code 2); system files load and round-trip.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "comm/self_comm.h"
#include "plan/calibrate.h"
#include "plan/system.h"
#include "test_util.h"
#include "train/run_layout.h"

namespace weft {
namespace {

using test::RunResult;
using test::TempDir;

void expect_bad_input(const RunResult& r, const std::vector<std::string>& fragments) {
  EXPECT_EQ(r.code, 2) << "stderr: " << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "stderr should be one line: " << r.err;
  for (const auto& f : fragments) EXPECT_NE(r.err.find(f), std::string::npos) << "missing '" << f << "' in: " << r.err;
}

class PlanCli : public ::testing::Test {
 protected:
  void SetUp() override { tmp = std::make_unique<TempDir>("plan"); }
  RunResult weft(const std::string& args) { return test::run_weft(args, *tmp / fmt::format("cmd{}", n++)); }
  std::unique_ptr<TempDir> tmp;
  int n = 0;
};

// weft calibrate --check measures a few figures of a system file again beside the file's (exit 0
// when they hold, 1 when not: either may happen on a shared machine; the table is what is
// checked), names a thread count other than the file's, and refuses a missing file (exit 2).
// weft plan notes a file calibrated on another machine; a published file draws no note.
TEST_F(PlanCli, CalibrateCheckMeasuresTheFileAgainAndPlanNotesAnotherMachine) {
  const std::string file = *tmp / "local.toml";
  const RunResult c = weft("calibrate --quick --threads 2 --out " + file);
  ASSERT_EQ(c.code, 0) << c.err;
  RunResult r = weft("calibrate --check " + file);
  ASSERT_TRUE(r.code == 0 || r.code == 1) << r.err;
  for (const char* row : {"fp32 product 256^3", "fp32 product 512^3", "memory bandwidth (STREAM triad)",
                          "kernel latency (OpenMP fork/join)", "silu, elements/s", "other processes kept"}) {
    EXPECT_NE(r.out.find(row), std::string::npos) << row << " in: " << r.out;
  }
  EXPECT_EQ(r.out.find("machine differs"), std::string::npos) << r.out;
  r = weft("calibrate --check " + file + " --threads 1");
  EXPECT_NE(r.out.find("machine differs: threads per rank 2 -> 1"), std::string::npos) << r.out;
  expect_bad_input(weft("calibrate --check " + *tmp / "missing.toml"), {"missing.toml", "does not exist"});
  // Another machine's file: its CPU and libraries named by weft plan.
  std::string text = test::read_text(file);
  const size_t at = text.find("cpu = \"");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, text.find('\n', at) - at, "cpu = \"Some Other CPU 9000\"");
  std::ofstream(*tmp / "other.toml") << text;
  r = weft("plan --model tiny --seq 32 --gpus 1 --global-batch 8 --precision fp32 --system " + *tmp / "other.toml");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("was calibrated on another machine: CPU 'Some Other CPU 9000' -> '"), std::string::npos) << r.err;
  r = weft("plan --model tiny --seq 32 --gpus 1 --global-batch 8 --precision fp32 --system " + file);
  EXPECT_EQ(r.err.find("another machine"), std::string::npos) << r.err;
}

// The decoder variants have fp32 storage only in weft's own runs: on a system whose memory model
// is weft's (what `weft calibrate` writes), `weft plan` defaults to fp32 for them and refuses an
// asked-for bf16 by name; on a published system it plans them in bf16, as Megatron-LM runs them.
TEST_F(PlanCli, DecoderVariantsDefaultToFp32OnWeftsOwnRuns) {
  std::string sys = test::read_text(std::string(WEFT_SOURCE_DIR) + "/systems/dgx-h100.toml") + "\n";
  const size_t d = sys.find("[defaults]");
  ASSERT_NE(d, std::string::npos);
  sys.insert(sys.find('\n', d) + 1, "memory_model = \"weft\"\n");
  std::ofstream(*tmp / "weft-sys.toml") << sys;
  const std::string common = "plan --model llama-tiny --seq 64 --global-batch 8 --gpus 2 --system ";
  RunResult r = weft(common + *tmp / "weft-sys.toml");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("global batch 8, fp32"), std::string::npos) << r.out.substr(0, 400);
  r = weft(common + *tmp / "weft-sys.toml --precision bf16");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("run with fp32 storage only for now, not bf16"), std::string::npos) << r.err;
  r = weft(common + std::string(WEFT_SOURCE_DIR) + "/systems/dgx-h100.toml");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("global batch 8, bf16"), std::string::npos) << r.out.substr(0, 400);
}

TEST_F(PlanCli, JsonOfAPinnedLayoutIsOneElement) {
  const RunResult r = weft(
      "plan --model gpt-175b --system systems/frontier.toml --global-batch 640 --precision fp16 --tp 4 --pp 16 --dp 2 "
      "--micro-batch 1 --zero 1 --recompute full --no-sequence-parallel --schedule 1f1b --format json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), 1u);
  const auto& e = j[0];
  for (const char* k : {"tp", "pp", "dp", "micro_batch", "zero", "recompute", "sequence_parallel", "schedule",
                        "virtual_stages"}) {
    EXPECT_TRUE(e["layout"].contains(k)) << k;
  }
  EXPECT_EQ(e["layout"]["tp"], 4);
  EXPECT_EQ(e["layout"]["recompute"], "full");
  for (const char* k : {"step_time_s", "tokens_per_s", "mfu", "memory_bytes", "fits"}) EXPECT_TRUE(e.contains(k)) << k;
  for (const char* k : {"params", "grads", "optimizer", "activations", "workspace", "comm", "total"}) {
    EXPECT_TRUE(e["memory_bytes"].contains(k)) << k;
  }
  EXPECT_TRUE(e["fits"].get<bool>());
  EXPECT_GT(e["mfu"].get<double>(), 0.0);
  EXPECT_LT(e["mfu"].get<double>(), 1.0);
}

TEST_F(PlanCli, MatmulModePricesTheProductsAtTheirRate) {
  // --matmul exact prices 16-bit products at peak_flops_32 (weft's exact mode widens them),
  // fast (default) at peak_flops_16; memory does not change, and an fp32 run is the same in both.
  const std::string base = "plan --model gpt-175b --system systems/frontier.toml --global-batch 640 --tp 4 --pp 16 "
                           "--dp 2 --micro-batch 1 --zero 1 --recompute full --no-sequence-parallel --schedule 1f1b "
                           "--format json";
  auto run = [&](const std::string& extra) {
    const RunResult r = weft(base + " " + extra);
    EXPECT_EQ(r.code, 0) << r.err;
    return r.code == 0 ? nlohmann::json::parse(r.out)[0] : nlohmann::json();
  };
  const auto fast = run("--precision fp16"), exact = run("--precision fp16 --matmul exact");
  ASSERT_FALSE(fast.is_null());
  ASSERT_FALSE(exact.is_null());
  EXPECT_GT(exact["step_time_s"].get<double>(), 1.5 * fast["step_time_s"].get<double>());
  EXPECT_EQ(exact["memory_bytes"], fast["memory_bytes"]);
  EXPECT_EQ(run("--precision fp32")["step_time_s"], run("--precision fp32 --matmul exact")["step_time_s"]);
  const RunResult bad = weft(base + " --matmul turbo");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("turbo"), std::string::npos) << bad.err;
}

TEST_F(PlanCli, TextTableAndExplanation) {
  const RunResult r = weft("plan --model gpt2-350m --system systems/dgx-a100-80gb.toml --gpus 16 --global-batch 64 --top 3");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("searched"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" beats "), std::string::npos) << r.out;
  const RunResult s = weft(
      "plan --model gpt-175b --system systems/frontier.toml --gpus 1024 --global-batch 8000 --precision fp16 --tp 4 "
      "--pp 16 --micro-batch 1 --zero 1 --recompute full --scaling both --scaling-gpus 128,256,512,1024 --csv " +
      *tmp / "s.csv");
  ASSERT_EQ(s.code, 0) << s.err;
  EXPECT_NE(s.out.find("strong scaling"), std::string::npos);
  EXPECT_NE(s.out.find("weak scaling"), std::string::npos);
  EXPECT_NE(test::read_text(*tmp / "s.csv").find("strong,1024,8000"), std::string::npos);
}

// --explain: every term of the step, in text and JSON, adding up to the step time; refused
// with --scaling.
TEST_F(PlanCli, ExplainTakesTheStepApart) {
  const std::string pinned =
      "plan --model gpt-175b --system systems/frontier.toml --global-batch 640 --precision fp16 --tp 4 --pp 16 --dp 2 "
      "--micro-batch 1 --zero 1 --recompute full --no-sequence-parallel --schedule 1f1b --explain";
  const RunResult t = weft(pinned);
  ASSERT_EQ(t.code, 0) << t.err;
  for (const char* k : {"where the step goes", "matrix products", "attention core", "recomputed forward", "all-reduces",
                        "fill + drain", "parameter all-gather", "stragglers", "world all-reduces", "dominant term"}) {
    EXPECT_NE(t.out.find(k), std::string::npos) << k << " in: " << t.out;
  }
  const RunResult j = weft(pinned + " --format json");
  ASSERT_EQ(j.code, 0) << j.err;
  const auto e = nlohmann::json::parse(j.out)[0];
  ASSERT_TRUE(e.contains("explain"));
  double sum = 0;
  for (const auto& term : e["explain"]["terms"]) sum += term["seconds"].get<double>();
  EXPECT_NEAR(sum, e["step_time_s"].get<double>(), 1e-6 * e["step_time_s"].get<double>());
  EXPECT_EQ(e["explain"]["dominant"]["group"], "compute");
  for (const char* k : {"stragglers", "overhead"}) EXPECT_TRUE(e["time_s"].contains(k)) << k;
  // The tp collectives of TP 4 stay in a node; the pipeline's transfers carry whole activations.
  bool tp_node = false;
  for (const auto& term : e["explain"]["terms"]) tp_node |= term["group"] == "tp" && term["where"] == "node";
  EXPECT_TRUE(tp_node) << e["explain"].dump();
  const RunResult bad = weft("plan --model gpt-175b --system systems/frontier.toml --gpus 1024 --global-batch 8000 "
                             "--precision fp16 --scaling strong --explain");
  EXPECT_EQ(bad.code, 2) << bad.err;
  EXPECT_NE(bad.err.find("--explain"), std::string::npos) << bad.err;
}

TEST_F(PlanCli, ScalingWritesCsvAndPngPlot) {
  // gnuplot-nox is installed by scripts/setup.sh; the PNG must be a real image.
  const std::string png = *tmp / "scaling.png", csv = *tmp / "scaling.csv";
  const RunResult r = weft("plan --model gpt-175b --system systems/frontier.toml --gpus 1024 --global-batch 8000 "
                           "--precision fp16 --tp 4 --pp 16 --micro-batch 1 --zero 1 --recompute full "
                           "--scaling both --scaling-gpus 128,256,512,1024 --csv " + csv + " --plot " + png);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("strong scaling"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("weak scaling"), std::string::npos) << r.out;
  const std::string img = test::read_text(png);
  ASSERT_GT(img.size(), 1000u);
  EXPECT_EQ(img.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_NE(test::read_text(csv).find("strong"), std::string::npos);
}

// Issue 34 class 6: bounded work on any model. Thousands of layers with pp free took minutes
// (every virtual stage count 2..L/p was walked); the interleaved schedule's counts are pruned
// for deep models (2..32, the powers of two, the even splits), and a search that still runs
// past --time-limit stops there and says so.
TEST_F(PlanCli, DeepModelsAreSearchedInSecondsAndTheTimeLimitIsSaid) {
  const auto t0 = std::chrono::steady_clock::now();
  RunResult r = weft("plan --model tiny --layers 10000 --seq 256 --global-batch 512 --gpus 1024 --system "
                     "systems/dgx-h100.toml --format json --top 3");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_LT(s, 15.0) << "plan took " << s << " s";  // 122 s before the pruning, 1.1 s after (this machine)
  EXPECT_EQ(r.err.find("time limit"), std::string::npos) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 3u);
  // An interleaved schedule of a pinned pp keeps its even splits: 10000 = 2 x 8 x 625.
  r = weft("plan --model tiny --layers 10000 --seq 256 --global-batch 512 --gpus 1024 --system systems/dgx-h100.toml "
           "--pp 2 --schedule interleaved --virtual-stages 625 --format json --top 1");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)[0]["layout"]["virtual_stages"], 625);
  // A search stopped by its limit ranks what it priced and says so on stderr (the JSON stays whole).
  r = weft("plan --model tiny --layers 3000 --seq 256 --global-batch 512 --gpus 1024 --system systems/dgx-h100.toml "
           "--format json --top 2 --time-limit 0.05");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("the search stopped at its time limit of 0.05 s after"), std::string::npos) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out).size(), 2u);
  for (const char* bad : {"-1", "nan", "inf"}) {
    expect_bad_input(weft(std::string("plan --model tiny --gpus 8 --global-batch 8 --system systems/dgx-h100.toml --time-limit ") + bad),
                     {"--time-limit must be a finite number of seconds >= 0"});
  }
}

TEST_F(PlanCli, BadInput) {
  const std::string base = "plan --system systems/frontier.toml --global-batch 640 ";
  expect_bad_input(weft(base + "--model gpt-175b --gpus 128 --tp 7"), {"--tp 7", "96 attention heads"});
  expect_bad_input(weft(base + "--model gpt-175b --gpus 128 --pp 128"), {"--pp 128", "128 model chunks", "the model has 96"});
  expect_bad_input(weft(base + "--model gpt-175b --gpus 100 --tp 8 --pp 16"), {"world size 100", "tp 8", "pp 16"});
  expect_bad_input(weft(base + "--model gpt-175b --gpus 128 --tp 4 --pp 16 --dp 4"), {"dp 4", "256", "128"});
  expect_bad_input(weft(base + "--model gpt-9 --gpus 8"), {"unknown model preset 'gpt-9'"});
  expect_bad_input(weft(base + "--model gpt-175b --gpus 8"), {"no layout", "fits in memory", "GB"});
  expect_bad_input(weft(base + "--model gpt-175b --gpus 128 --precision fp8"), {"unknown precision 'fp8'"});
  expect_bad_input(weft(base + "--model gpt-175b --gpus 128 --recompute some"), {"unknown recompute mode 'some'"});
  expect_bad_input(weft("plan --system systems/nope.toml --global-batch 8 --model tiny --gpus 1"),
                   {"systems/nope.toml", "does not exist"});
  expect_bad_input(weft("plan --system systems/frontier.toml --global-batch 8 --gpus 1"), {"--model", "--layers"});
  expect_bad_input(weft("plan --system systems/frontier.toml --global-batch 8 --model tiny"), {"--gpus is required"});
  std::ofstream(*tmp / "bad.toml") << "[device]\npeak_flops_16 = 1e12\npeak_flops_32 = 1e12\nmemory_bytes = 1e9\n"
                                   << "memory_bandwidth = 1e9\nfrobs = 3\n[[level]]\nbandwidth = 1e9\nlatency = 0\n";
  expect_bad_input(weft("plan --system " + *tmp / "bad.toml" + " --global-batch 8 --model tiny --gpus 1"),
                   {"bad.toml", "unknown key 'frobs'"});
}

// Pins that the trainer refuses get the layout rule's message (parallel/layout_rules.h), the
// one `weft train` prints for the same layout.
TEST_F(PlanCli, PinsTheTrainerRefusesAreRefusedWithItsRule) {
  const std::string base = "plan --model tiny --system systems/dgx-h100.toml --global-batch 8 ";
  expect_bad_input(weft(base + "--gpus 8 --pp 2 --dp 4 --zero 3"),
                   {"--pp 2 --dp 4 --zero 3", "zero 3 with pp 2: ZeRO-2/3 reduce gradients every micro-batch"});
  expect_bad_input(weft(base + "--tp 1 --pp 2 --dp 2 --zero 2"), {"zero 2 with pp 2"});
  expect_bad_input(weft(base + "--gpus 2 --tp 1 --sequence-parallel"), {"sequence parallelism needs tp > 1"});
  expect_bad_input(weft(base + "--gpus 4 --pp 2 --schedule interleaved --virtual-stages 3"),
                   {"pp 2 x virtual_stages 3 = 6 model chunks", "the model has 4"});
  expect_bad_input(weft(base + "--gpus 4 --tp 3"), {"4 attention heads are not divisible by tp 3"});
}

// A search for the tiny model ranks only layouts that `weft train` accepts (its validation
// entry point on every ranked layout), and the best of them trains.
class PlanTrainRuns : public test::ParityRuns {
 protected:
  void SetUp() override { prepare("plan-train", "seq_len = 32\nglobal_batch = 8\nmicro_batch = 2\n", 0); }
};

std::string train_args(const nlohmann::json& l) {
  return fmt::format("--tp {} --pp {} --dp {} --dp_replicate {} --micro_batch {} --zero {} --recompute {} "
                     "--sequence_parallel {} --schedule {} --virtual_stages {}",
                     l["tp"].get<int>(), l["pp"].get<int>(), l["dp"].get<int>(), l["dp_replicate"].get<int>(),
                     l["micro_batch"].get<int>(), l["zero"].get<int>(), l["recompute"].get<std::string>(),
                     l["sequence_parallel"].get<bool>(), l["schedule"].get<std::string>(), l["virtual_stages"].get<int>());
}

TEST_F(PlanTrainRuns, EveryRankedLayoutIsOneTheTrainerRuns) {
  const RunResult p = test::run_weft("plan --model tiny --seq 32 --gpus 4 --global-batch 8 --precision fp32 "
                                     "--system systems/dgx-h100.toml --top 100000 --format json", *tmp / "plan");
  ASSERT_EQ(p.code, 0) << p.err;
  const auto ranked = nlohmann::json::parse(p.out);
  ASSERT_GT(ranked.size(), 50u);
  for (const auto& e : ranked) {
    std::vector<std::pair<std::string, std::string>> overrides;
    for (const auto& [k, v] : e["layout"].items()) overrides.emplace_back(k, v.is_string() ? v.get<std::string>() : v.dump());
    const RunConfig cfg = load_run_config(config, overrides);
    EXPECT_NO_THROW(validate_run_layout(cfg, 4)) << e["layout"].dump();
  }
  const RunResult r = train(4, train_args(ranked[0]["layout"]) + " --steps 1 --val_batches 0 --out " + *tmp / "best");
  EXPECT_EQ(r.code, 0) << train_args(ranked[0]["layout"]) << ": " << r.err;
}

TEST(PlanSystem, FilesLoadAndRoundTrip) {
  for (const char* name : {"frontier", "dgx-a100-80gb", "dgx-h100", "lassen"}) {
    const plan::System s = plan::load_system(std::string(WEFT_SOURCE_DIR) + "/systems/" + name + ".toml");
    EXPECT_EQ(s.name, name);
    EXPECT_GE(s.levels.size(), 2u);
    TempDir tmp("plan");
    const std::string p = tmp / "copy.toml";
    std::ofstream(p) << plan::system_to_toml(s, {"a note"});
    const plan::System c = plan::load_system(p);
    EXPECT_DOUBLE_EQ(c.device.peak_flops_16, s.device.peak_flops_16);
    EXPECT_DOUBLE_EQ(c.levels.back().bandwidth, s.levels.back().bandwidth);
    EXPECT_EQ(c.defaults.flash_attention, s.defaults.flash_attention);
  }
  const plan::System f = plan::load_system(std::string(WEFT_SOURCE_DIR) + "/systems/frontier.toml");
  EXPECT_DOUBLE_EQ(f.device.peak_flops_16, 191.5e12);
  EXPECT_EQ(f.levels[0].devices, 2);
  EXPECT_EQ(f.levels[1].devices, 8);
}

// `[system] base = FILE`: the base is read first (relative to the file's folder), the file's
// keys replace its keys table by table, an array ([[level]]) replaces the base's whole, the
// base's name is not inherited; a missing base, a non-string one and a cycle are refused naming
// the files.
TEST(PlanSystem, BaseFileIsMergedUnderTheFile) {
  TempDir tmp("plan");
  const std::string hw = std::string(WEFT_SOURCE_DIR) + "/systems/dgx-h100.toml";
  const plan::System h = plan::load_system(hw);
  std::filesystem::create_directories(tmp / "stacks");
  const std::string over = tmp / "stacks/h100-stack.toml";
  std::ofstream(tmp / "h100.toml") << std::ifstream(hw).rdbuf();
  std::ofstream(over) << "[system]\nbase = \"../h100.toml\"\n[device]\nmatmul_efficiency = 0.6\n"
                         "[defaults]\noverlap_dp = false\n";
  const plan::System s = plan::load_system(over);
  EXPECT_EQ(s.name, "h100-stack");
  EXPECT_DOUBLE_EQ(s.device.matmul_efficiency, 0.6);
  EXPECT_DOUBLE_EQ(s.device.peak_flops_16, h.device.peak_flops_16);
  EXPECT_DOUBLE_EQ(s.device.attention_efficiency, h.device.attention_efficiency);
  EXPECT_FALSE(s.defaults.overlap_dp);
  EXPECT_EQ(s.defaults.flash_attention, h.defaults.flash_attention);
  ASSERT_EQ(s.levels.size(), h.levels.size());
  EXPECT_DOUBLE_EQ(s.levels.back().bandwidth, h.levels.back().bandwidth);
  // The published stack files load through their base.
  const plan::System f = plan::load_system(std::string(WEFT_SOURCE_DIR) + "/systems/dgx-h100-fsdp.toml");
  EXPECT_EQ(f.name, "dgx-h100-fsdp");
  EXPECT_DOUBLE_EQ(f.device.peak_flops_16, h.device.peak_flops_16);
  EXPECT_LT(f.device.memory_efficiency, 1.0);
  EXPECT_TRUE(f.defaults.overlap_dp);
  EXPECT_EQ(plan::load_system(std::string(WEFT_SOURCE_DIR) + "/systems/dgx-a100-80gb-fsdp.toml").name,
            "dgx-a100-80gb-fsdp");
  // DeepSpeed's ZeRO-3 stack: the base's device, dp overlap on, both levels restated, the
  // network's collectives at the fitted share.
  const plan::System a = plan::load_system(std::string(WEFT_SOURCE_DIR) + "/systems/dgx-a100-80gb.toml");
  const plan::System z = plan::load_system(std::string(WEFT_SOURCE_DIR) + "/systems/dgx-a100-80gb-ds-zero3.toml");
  EXPECT_DOUBLE_EQ(z.device.matmul_efficiency, a.device.matmul_efficiency);
  EXPECT_TRUE(z.defaults.overlap_dp);
  EXPECT_FALSE(a.defaults.overlap_dp);
  ASSERT_EQ(z.levels.size(), 2u);
  EXPECT_DOUBLE_EQ(z.levels[0].bandwidth, a.levels[0].bandwidth);
  EXPECT_TRUE(z.levels[0].collective_efficiency.empty());
  EXPECT_DOUBLE_EQ(z.levels[1].collective_efficiency.at("all_gather"), 0.109);
  // [[level]] in the file replaces the base's levels.
  std::ofstream(over) << "[system]\nname = \"one-level\"\nbase = \"../h100.toml\"\n[[level]]\nname = \"node\"\n"
                         "devices = 0\nbandwidth = 1e11\nlatency = 1e-6\n";
  const plan::System o = plan::load_system(over);
  EXPECT_EQ(o.name, "one-level");
  ASSERT_EQ(o.levels.size(), 1u);
  EXPECT_DOUBLE_EQ(o.levels[0].bandwidth, 1e11);
  const auto refused = [](const std::string& path, const std::vector<std::string>& parts) {
    try {
      plan::load_system(path);
      ADD_FAILURE() << path << " loaded";
    } catch (const InputError& e) {
      for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
  };
  std::ofstream(over) << "[system]\nbase = \"missing.toml\"\n";
  refused(over, {"h100-stack.toml", "base = 'missing.toml'", "does not exist"});
  std::ofstream(over) << "[system]\nbase = \"/dev/zero\"\n";
  refused(over, {"is not a regular file"});
  std::ofstream(over) << "[system]\nbase = 3\n";
  refused(over, {"base must be the path of a system file"});
  std::ofstream(tmp / "a.toml") << "[system]\nbase = \"b.toml\"\n";
  std::ofstream(tmp / "b.toml") << "[system]\nbase = \"a.toml\"\n";
  refused(tmp / "a.toml", {"more than 8 files deep"});
  // A key the base does not know is still refused, naming it.
  std::ofstream(over) << "[system]\nbase = \"../h100.toml\"\n[device]\nmatmul_eficiency = 0.6\n";
  refused(over, {"matmul_eficiency"});
}

// A quick calibration in one process writes a loadable system whose figures are positive.
TEST(PlanSystem, QuickCalibration) {
  auto self = make_self_communicator();
  plan::CalibrationOptions o;
  o.quick = true;
  o.threads = 1;
  const plan::Calibration c = plan::calibrate(o, *self);
  EXPECT_GT(c.system.device.peak_flops_32, 1e8);
  EXPECT_GT(c.system.device.memory_bandwidth, 1e8);
  EXPECT_FALSE(c.link_measured);
  EXPECT_EQ(c.system.device.matmul_curve.size(), 5u);
  // What the CPU model is priced from (docs/planner.md "Calibration"): products by shape in
  // each layout (quick: a 4 x 4 x 4 grid), memory-bound kernels by size, the optimizer's curve.
  // (Beside other tests, ctest -j2, the machine may count as busy: then the table and the
  // optimizer's curve are dropped, and a note says so.)
  const plan::GemmTable& gt = c.system.device.gemm_table;
  const bool busy = c.other_load > 0.25;
  bool dropped_note = false;
  for (const auto& n : c.notes) dropped_note = dropped_note || n.rfind("NOT KEPT (the machine was busy)", 0) == 0;
  EXPECT_EQ(dropped_note, busy);
  for (const auto& r : gt.rates) EXPECT_EQ(r.size(), busy ? 0u : 64u);
  if (!busy) EXPECT_GT(gt.rate(plan::GemmTrans::kNT, 256, 512, 512), 1e8);
  ASSERT_GE(c.system.device.memory_curve.size(), 4u);
  for (size_t i = 1; i < c.system.device.memory_curve.size(); ++i) {
    EXPECT_GT(c.system.device.memory_curve[i].first, c.system.device.memory_curve[i - 1].first);
  }
  EXPECT_EQ(c.system.device.adamw_curve.size(), busy ? 0u : 3u);
  EXPECT_EQ(c.system.device.norm_param_seconds > 0.0, !busy);
  EXPECT_DOUBLE_EQ(c.system.defaults.comm_overlap, 1.0);  // one rank: nothing measured, nothing kept
  // The codecs of the compressed collectives, one core each, as the runtime runs them (zfp is
  // the slow one: ~0.1-0.3 GB/s per core here).
  for (const char* codec : {"bf16", "fp16", "int8", "int4", "zfp", "zfp:4", "zfp:8", "zfp:16", "zstd"}) {
    ASSERT_TRUE(c.system.codecs.per_core.count(codec)) << codec;
    EXPECT_GT(c.system.codecs.per_core.at(codec).encode, 1e6) << codec;
    EXPECT_GT(c.system.codecs.per_core.at(codec).decode, 1e6) << codec;
  }
  // zstd on random gradients: lossless and barely smaller (the exponent bytes' redundancy).
  EXPECT_GT(c.system.codecs.zstd_ratio, 0.8);
  EXPECT_LT(c.system.codecs.zstd_ratio, 1.0);
  TempDir tmp("plan");
  std::ofstream(tmp / "local.toml") << plan::system_to_toml(c.system, c.notes);
  const plan::System back = plan::load_system(tmp / "local.toml");
  const double enc = c.system.codecs.per_core.at("int8").encode;
  EXPECT_NEAR(back.codecs.per_core.at("int8").encode, enc, 1e-5 * enc);
  EXPECT_NEAR(back.codecs.per_core.at("zfp:8").decode, c.system.codecs.per_core.at("zfp:8").decode,
              1e-5 * c.system.codecs.per_core.at("zfp:8").decode);
  EXPECT_NEAR(back.codecs.zstd_ratio, c.system.codecs.zstd_ratio, 1e-5);
  if (!busy) {
    EXPECT_NEAR(back.device.gemm_table.rate(plan::GemmTrans::kTN, 100, 100, 100),
                gt.rate(plan::GemmTrans::kTN, 100, 100, 100), 1e-5 * gt.rate(plan::GemmTrans::kTN, 100, 100, 100));
  }
  // The machine it measured ([machine]) and how busy it was, read back; the same machine and
  // threads differ in nothing, another thread count is named.
  EXPECT_FALSE(back.machine.empty());
  EXPECT_EQ(back.machine.cpu, c.system.machine.cpu);
  EXPECT_EQ(back.machine.threads, 1);
  EXPECT_EQ(back.machine.ranks, 1);
  EXPECT_NE(back.machine.blas.find("OpenBLAS"), std::string::npos) << back.machine.blas;
  EXPECT_NE(back.machine.onednn.find("oneDNN"), std::string::npos) << back.machine.onednn;
  EXPECT_GE(back.machine.other_load, 0.0);
  EXPECT_TRUE(plan::fingerprint_differences(back.machine, plan::this_machine(1, 1)).empty());
  const auto diff = plan::fingerprint_differences(back.machine, plan::this_machine(1, 2));
  ASSERT_EQ(diff.size(), 1u);
  EXPECT_EQ(diff[0], "threads per rank 1 -> 2");
  EXPECT_TRUE(plan::fingerprint_differences(back.machine, plan::this_machine(4, 2), false).empty());
  bool load_note = false;
  for (const auto& n : c.notes) load_note = load_note || n.rfind("load: other processes kept", 0) == 0;
  EXPECT_TRUE(load_note);
}

// A system file's [machine] against another machine: each difference named; a published file
// (no [machine]) differs in nothing; a bad [machine] key is refused naming it.
TEST(PlanSystem, MachineFingerprintsNameWhatDiffers) {
  plan::MachineFingerprint a;
  a.cpu = "Intel(R) Xeon(R) Processor", a.hardware_threads = 2, a.ranks = 1, a.threads = 2;
  a.blas = "OpenBLAS 0.3.21 Haswell", a.onednn = "oneDNN 2.7.3 avx512_core_amx";
  plan::MachineFingerprint b = a;
  b.cpu = "AMD EPYC 7763", b.hardware_threads = 128, b.blas = "OpenBLAS 0.3.21 Zen";
  const auto d = plan::fingerprint_differences(a, b);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0], "CPU 'Intel(R) Xeon(R) Processor' -> 'AMD EPYC 7763'");
  EXPECT_EQ(d[1], "hardware threads 2 -> 128");
  EXPECT_EQ(d[2], "OpenBLAS 0.3.21 Haswell -> OpenBLAS 0.3.21 Zen");
  EXPECT_TRUE(plan::fingerprint_differences(plan::MachineFingerprint{}, b).empty());
  TempDir tmp("plan_machine");
  plan::System s = plan::load_system(std::string(WEFT_SOURCE_DIR) + "/systems/dgx-h100.toml");
  EXPECT_TRUE(s.machine.empty());
  s.machine = a;
  s.machine.other_load = 0.8;
  std::ofstream(tmp / "m.toml") << plan::system_to_toml(s);
  const plan::System back = plan::load_system(tmp / "m.toml");
  EXPECT_EQ(back.machine.cpu, a.cpu);
  EXPECT_EQ(back.machine.onednn, a.onednn);
  EXPECT_DOUBLE_EQ(back.machine.other_load, 0.8);
  std::ofstream(tmp / "bad.toml") << plan::system_to_toml(s) << "gpu = \"none\"\n";
  try {
    plan::load_system(tmp / "bad.toml");
    FAIL() << "an unknown [machine] key was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown key 'gpu' in [machine]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace weft
