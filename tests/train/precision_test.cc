// Mixed precision on the CPU backend (16-bit storage emulated by rounding): the rounding
// itself against PyTorch's conversions, bf16 training following the fp32 curve, fp16 dynamic
// loss scaling (overflow -> skipped step and halved scale, growth after the window), exact
// resume with fp32 master weights, and bad settings refused.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "core/precision.h"
#include "test_util.h"

namespace weft {
namespace {

using test::RunResult;
using test::metric_series;
namespace fs = std::filesystem;

TEST(Precision, RoundingMatchesKnownValues) {
  EXPECT_EQ(round_bf16(1.0f), 1.0f);
  EXPECT_EQ(round_bf16(1.0f + std::ldexp(1.0f, -8)), 1.0f);                               // tie -> even
  EXPECT_EQ(round_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 1.0f + std::ldexp(1.0f, -6));    // tie -> even (up)
  EXPECT_EQ(round_bf16(1.0f + std::ldexp(1.0f, -7)), 1.0f + std::ldexp(1.0f, -7));        // representable
  EXPECT_TRUE(std::isinf(round_bf16(3.4e38f)));
  EXPECT_TRUE(std::isnan(round_bf16(NAN)));
  EXPECT_EQ(round_fp16(65504.0f), 65504.0f);
  EXPECT_TRUE(std::isinf(round_fp16(65520.0f)));  // halfway to 2^16 rounds to even: inf
  EXPECT_EQ(round_fp16(1e-8f), 0.0f);
  EXPECT_EQ(round_fp16(std::ldexp(1.0f, -24)), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(round_fp16(1.0f + std::ldexp(1.0f, -11)), 1.0f);           // tie -> even
  auto be = make_cpu_backend();
  std::vector<float> x = {1.0f + std::ldexp(1.0f, -12), 70000.0f};
  be->round_to(x.data(), 2, Precision::kFp16);
  EXPECT_EQ(x[0], 1.0f);
  EXPECT_TRUE(std::isinf(x[1]));
  EXPECT_EQ(parse_precision("bf16"), Precision::kBf16);
  EXPECT_THROW(parse_precision("fp8"), InputError);
}

TEST(Precision, RoundingMatchesPyTorch) {
  // 20000 values over many binades, converted by torch (x.to(bfloat16/float16).float()).
  test::TempDir tmp("prec");
  std::mt19937 g(4);
  std::uniform_real_distribution<float> mant(-2.0f, 2.0f);
  std::uniform_int_distribution<int> ex(-30, 20);
  std::vector<float> x(20000);
  for (auto& v : x) v = std::ldexp(mant(g), ex(g));
  const std::string in = tmp / "x.bin", out = tmp / "y.bin";
  std::ofstream(in, std::ios::binary).write(reinterpret_cast<const char*>(x.data()), x.size() * 4);
  const std::string py =
      "import sys, numpy as np, torch\n"
      "x = torch.from_numpy(np.fromfile(sys.argv[1], dtype=np.float32))\n"
      "np.concatenate([x.to(torch.bfloat16).float().numpy(), x.to(torch.float16).float().numpy()]).tofile(sys.argv[2])\n";
  std::ofstream(tmp / "conv.py") << py;
  ASSERT_EQ(std::system(("/usr/bin/python3 " + (tmp / "conv.py") + " " + in + " " + out).c_str()), 0);
  std::vector<float> y(2 * x.size());
  std::ifstream(out, std::ios::binary).read(reinterpret_cast<char*>(y.data()), y.size() * 4);
  int bad_bf = 0, bad_fp = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float b = round_bf16(x[i]), h = round_fp16(x[i]);
    if (!(b == y[i] || (std::isnan(b) && std::isnan(y[i])))) ++bad_bf;
    if (!(h == y[x.size() + i] || (std::isinf(h) && std::isinf(y[x.size() + i])))) ++bad_fp;
  }
  EXPECT_EQ(bad_bf, 0);
  EXPECT_EQ(bad_fp, 0);
}

class PrecisionRuns : public test::ParityRuns {
 protected:
  void SetUp() override { prepare("prec", "seq_len = 32\nglobal_batch = 8\nmicro_batch = 4\nseed = 3\n", 1); }
  std::vector<nlohmann::json> steps(const std::string& out) {
    std::vector<nlohmann::json> v;
    std::ifstream in(out + "/metrics.jsonl");
    std::string line;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line);
      if (j.contains("loss")) v.push_back(j);
    }
    return v;
  }
};

TEST_F(PrecisionRuns, Bf16FollowsTheFp32Curve) {
  // 50 steps of the tiny preset: bf16 keeps about 3 significant digits per value. Measured:
  // bf16 learns slightly slower (its loss is 0-2.8% above fp32's, 1.1% on average); the test
  // holds every step within 4% and the mean within 2%, and both learn.
  RunResult r = train(0, "--steps 50 --val_batches 0 --out " + *tmp / "fp32");
  ASSERT_EQ(r.code, 0) << r.err;
  r = train(0, "--steps 50 --val_batches 0 --precision bf16 --out " + *tmp / "bf16");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto a = metric_series(*tmp / "fp32", "loss"), b = metric_series(*tmp / "bf16", "loss");
  ASSERT_EQ(a.size(), 50u);
  ASSERT_EQ(b.size(), 50u);
  double worst = 0, mean = 0;
  for (const auto& [s, l] : a) {
    worst = std::max(worst, std::abs(b.at(s) - l) / l);
    mean += std::abs(b.at(s) - l) / l / static_cast<double>(a.size());
  }
  EXPECT_LT(worst, 0.04);
  EXPECT_LT(mean, 0.02);
  EXPECT_GT(worst, 0.0);  // the rounding does happen
  EXPECT_LT(b.at(50), 0.8 * b.at(1));
  std::printf("bf16 vs fp32 over 50 steps: worst relative loss difference %.3g, mean %.3g (final %.4f vs %.4f)\n",
              worst, mean, b.at(50), a.at(50));
}

TEST_F(PrecisionRuns, Fp16DynamicLossScalingSkipsOverflowsAndGrows) {
  // Starting at 2^26 the scaled gradients overflow fp16 (the output head's gradient alone is
  // up to scale / tokens): the first steps are skipped with the scale halving each time, until
  // it fits; after `window` good steps it doubles (and may overflow again). Measured: 5 skips
  // down to 2^21, two more overflows settle it at 2^18, which doubles after 4 good steps.
  RunResult r = train(0, "--steps 16 --val_batches 0 --precision fp16 --initial_loss_scale 67108864 "
                         "--loss_scale_window 4 --out " + *tmp / "fp16");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto s = steps(*tmp / "fp16");
  ASSERT_EQ(s.size(), 16u);
  for (const auto& j : s) std::printf("step %d: loss scale %g%s\n", j["step"].get<int>(), j["loss_scale"].get<double>(), j.value("skipped", false) ? " (skipped)" : "");
  // The scale each step used follows DeepSpeed's DynamicLossScaler exactly: halved after an
  // overflow (that step skipped), doubled after 4 consecutive good steps.
  int skipped = 0, grown = 0, good = 0;
  size_t first_good = s.size();
  EXPECT_EQ(s[0]["loss_scale"].get<double>(), 67108864.0);
  for (size_t i = 0; i < s.size(); ++i) {
    const bool skip = s[i].value("skipped", false);
    if (i > 0) {
      const double prev = s[i - 1]["loss_scale"].get<double>();
      const bool prev_skip = s[i - 1].value("skipped", false);
      double expect = prev;
      if (prev_skip) {
        expect = prev / 2, good = 0;
      } else if (++good == 4) {
        expect = prev * 2, good = 0, ++grown;
      }
      EXPECT_EQ(s[i]["loss_scale"].get<double>(), expect) << "step " << i + 1;
    }
    if (skip) ++skipped;
    if (!skip && first_good == s.size()) first_good = i;
  }
  EXPECT_GE(skipped, 1);
  EXPECT_GE(grown, 1);
  ASSERT_LT(first_good, s.size());
  EXPECT_NE(r.err.find("fp16 gradient overflow"), std::string::npos) << r.err;
  // The updates that happen learn like fp32's (same data; a skipped step's batch is lost).
  EXPECT_LT(s.back()["loss"].get<double>(), s[first_good]["loss"].get<double>());
}

TEST_F(PrecisionRuns, ResumeWithMasterWeightsIsExact) {
  for (const char* prec : {"bf16", "fp16"}) {
    const std::string a = *tmp / fmt::format("{}-a", prec), b = *tmp / fmt::format("{}-b", prec);
    RunResult r = train(0, fmt::format("--steps 6 --ckpt_every 3 --val_batches 0 --precision {} --out {}", prec, a));
    ASSERT_EQ(r.code, 0) << r.err;
    fs::create_directories(b);
    fs::copy(a + "/step-000003", b + "/step-000003", fs::copy_options::recursive);
    r = train(0, fmt::format("--steps 6 --val_batches 0 --precision {} --resume --out {}", prec, b));
    ASSERT_EQ(r.code, 0) << r.err;
    const auto x = metric_series(a, "loss"), y = metric_series(b, "loss");
    for (int s = 4; s <= 6; ++s) EXPECT_EQ(x.at(s), y.at(s)) << prec << " step " << s;
  }
}

TEST_F(PrecisionRuns, SixteenBitWorksOnEveryAxis) {
  RunResult r = train(0, "--steps 4 --val_batches 0 --precision bf16 --out " + *tmp / "one");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto ref = metric_series(*tmp / "one", "loss");
  r = train(4, "--steps 4 --val_batches 0 --precision bf16 --tp 2 --pp 2 --micro_batch 2 --out " + *tmp / "3d");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto d = metric_series(*tmp / "3d", "loss");
  // Another layout sums in another order, so the 16-bit roundings differ: bf16 tolerance.
  for (const auto& [s, l] : ref) EXPECT_NEAR(d.at(s), l, 0.01 * l) << "step " << s;
  // fp16 with dynamic scaling across a pipeline and data parallelism: the overflow decision
  // comes from the gradient norm reduced over every axis, so all ranks skip together (a rank
  // that did not would hang or diverge); the run learns.
  r = train(4, "--steps 8 --val_batches 0 --precision fp16 --initial_loss_scale 67108864 --loss_scale_window 3 "
               "--pp 2 --dp 2 --zero 1 --micro_batch 2 --out " + *tmp / "fp16-3d");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto f = steps(*tmp / "fp16-3d");
  ASSERT_EQ(f.size(), 8u);
  int skipped = 0;
  for (const auto& j : f) skipped += j.value("skipped", false) ? 1 : 0;
  EXPECT_GE(skipped, 1);
  EXPECT_LT(skipped, 8);
  EXPECT_LT(f.back()["loss"].get<double>(), f.front()["loss"].get<double>());
}

TEST_F(PrecisionRuns, FastMatmulFollowsTheExactCurve) {
  // [precision] matmul: exact is the default's bits; fast (oneDNN's native bf16 product where
  // the CPU has one, else the exact product) follows it within bf16's noise over 50 steps;
  // an fp32 run is the same in either mode.
  RunResult r = train(0, "--steps 4 --val_batches 0 --precision bf16 --out " + *tmp / "default");
  ASSERT_EQ(r.code, 0) << r.err;
  r = train(0, "--steps 4 --val_batches 0 --precision bf16 --matmul exact --out " + *tmp / "exact4");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(metric_series(*tmp / "default", "loss"), metric_series(*tmp / "exact4", "loss"));  // bitwise
  r = train(0, "--steps 50 --val_batches 0 --precision bf16 --matmul exact --out " + *tmp / "exact");
  ASSERT_EQ(r.code, 0) << r.err;
  r = train(0, "--steps 50 --val_batches 0 --precision bf16 --matmul fast --out " + *tmp / "fast");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto e = metric_series(*tmp / "exact", "loss"), f = metric_series(*tmp / "fast", "loss");
  ASSERT_EQ(e.size(), 50u);
  ASSERT_EQ(f.size(), 50u);
  // Another summation order of the same bf16 terms: the curves part like two seeds of bf16's
  // rounding noise (measured: worst step 1.5%, last 10 steps' mean -0.65%).
  double worst = 0, last10 = 0;
  for (const auto& [s, l] : e) {
    worst = std::max(worst, std::abs(f.at(s) - l) / l);
    if (s > 40) last10 += (f.at(s) - l) / l / 10.0;
  }
  EXPECT_LT(worst, 0.03);
  EXPECT_LT(std::abs(last10), 0.01);
  EXPECT_LT(f.at(50), 0.8 * f.at(1));
  std::printf("bf16 fast vs exact over 50 steps: worst relative loss difference %.3g, mean of the last 10 %.3g, "
              "step 50 %.4f vs %.4f\n", worst, last10, f.at(50), e.at(50));
  r = train(0, "--steps 4 --val_batches 0 --out " + *tmp / "fp32");
  ASSERT_EQ(r.code, 0) << r.err;
  r = train(0, "--steps 4 --val_batches 0 --matmul fast --out " + *tmp / "fp32-fast");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(metric_series(*tmp / "fp32", "loss"), metric_series(*tmp / "fp32-fast", "loss"));
  // oneDNN's fp32 product: another summation order, within the fp32 parity rule.
  r = train(0, "--steps 4 --val_batches 0 --fp32_kernel onednn --out " + *tmp / "fp32-onednn");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto a = metric_series(*tmp / "fp32", "loss"), o = metric_series(*tmp / "fp32-onednn", "loss");
  ASSERT_EQ(o.size(), 4u);
  for (const auto& [s, l] : a) EXPECT_NEAR(o.at(s), l, 1e-5 * l) << "step " << s;
}

TEST_F(PrecisionRuns, FastMatmulWorksOnEveryAxis) {
  // The fast product in tp x pp and in ZeRO-3 data parallelism against one rank (bf16 tolerance).
  RunResult r = train(0, "--steps 4 --val_batches 0 --precision bf16 --matmul fast --out " + *tmp / "one");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto ref = metric_series(*tmp / "one", "loss");
  const std::pair<int, const char*> layouts[] = {{4, "--tp 2 --pp 2 --micro_batch 2"}, {2, "--dp 2 --zero 3 --micro_batch 2"}};
  for (const auto& [np, layout] : layouts) {
    const std::string out = *tmp / fmt::format("l{}", n);
    r = train(np, fmt::format("--steps 4 --val_batches 0 --precision bf16 --matmul fast {} --out {}", layout, out));
    ASSERT_EQ(r.code, 0) << r.err;
    const auto d = metric_series(out, "loss");
    ASSERT_EQ(d.size(), 4u) << layout;
    for (const auto& [s, l] : ref) EXPECT_NEAR(d.at(s), l, 0.01 * l) << layout << " step " << s;
  }
}

TEST_F(PrecisionRuns, SixteenBitWiresAreLosslessAndHalveTheBytes) {
  // A 16-bit run moves what it stores in 16 bits as 16 bits, through no codec. Pipeline sends
  // carry GPT's residual stream, a 16-bit tensor since issue 32 (PipelineRuntime's message dtype),
  // so [precision] wires = "fp32" has nothing left to widen (a note says so) and the run is bit for
  // bit the default one. ZeRO's parameter all-gathers move the 16-bit working parameters as stored.
  // Both: exactly half the bytes of the same calls in an fp32 run. The communication model
  // matches the trace in every run.
  struct Case {
    const char* prec;
    int np;
    const char* layout;
    bool pp;
  };
  const Case cases[] = {{"bf16", 4, "--pp 2 --dp 2 --zero 1", true},
                        {"fp16", 4, "--pp 2 --dp 2 --zero 1", true},
                        {"bf16", 2, "--dp 2 --zero 3", false}};
  // Traced bytes of one (op, axis) over the training rows.
  const auto traced = [](const nlohmann::json& report, const std::string& op, const std::string& axis) {
    int64_t bytes = 0;
    for (const auto& row : report["rows"]) {
      if (row["op"] == op && row["axis"] == axis) bytes += row["total_bytes"].get<int64_t>();
    }
    return bytes;
  };
  for (const Case& c : cases) {
    const std::string base = fmt::format("--steps 3 --val_batches 0 {} --micro_batch 2 --trace --ranks_per_node 2",
                                         c.layout);
    const std::string a = *tmp / fmt::format("w{}", n), b = *tmp / fmt::format("w{}-fp32", n),
                      f = *tmp / fmt::format("w{}-fp32run", n);
    SCOPED_TRACE(fmt::format("{} {}", c.prec, base));
    const std::string run16 = base + fmt::format(" --precision {}", c.prec);
    RunResult r = train(c.np, run16 + " --out " + a);
    ASSERT_EQ(r.code, 0) << r.err;
    r = train(c.np, run16 + " --wires fp32 --out " + b);
    ASSERT_EQ(r.code, 0) << r.err;
    if (c.pp) {
      EXPECT_NE(r.err.find(fmt::format("wires = \"fp32\" has no effect on the pipeline sends: GPT's residual stream is "
                                       "stored in {}", c.prec)),
                std::string::npos)
          << r.err;
    }
    r = train(c.np, base + " --out " + f);
    ASSERT_EQ(r.code, 0) << r.err;
    const auto x = metric_series(a, "loss"), y = metric_series(b, "loss");
    ASSERT_EQ(x.size(), 3u);
    EXPECT_EQ(x, y);  // bitwise
    const auto report = nlohmann::json::parse(std::ifstream(a + "/comm_report.json"));
    const auto fp32run = nlohmann::json::parse(std::ifstream(f + "/comm_report.json"));
    EXPECT_EQ(report["mismatches"].get<int>(), 0);
    EXPECT_EQ(fp32run["mismatches"].get<int>(), 0);
    // The parameter gathers and the pipeline's sends and receives: half the fp32 run's bytes.
    const int64_t gathered = traced(report, "all_gather", "dp");
    EXPECT_GT(gathered, 0);
    EXPECT_EQ(2 * gathered, traced(fp32run, "all_gather", "dp"));
    for (const char* op : {"send", "recv"}) {
      const int64_t sent = traced(report, op, "pp");
      EXPECT_EQ(sent > 0, c.pp) << op;
      EXPECT_EQ(2 * sent, traced(fp32run, op, "pp")) << op;
    }
    // No codec anywhere: every call moves its payload as stored.
    EXPECT_EQ(report["compression"]["total"]["ratio"].get<double>(), 1.0);
    for (const auto& e : report["compression"]["by_op_axis"]) {
      EXPECT_EQ(e["compressed_calls"], 0) << e["op"] << " " << e["axis"];
    }
    const auto fp32wires = nlohmann::json::parse(std::ifstream(b + "/comm_report.json"));
    EXPECT_EQ(fp32wires["compression"]["total"]["ratio"].get<double>(), 1.0);
  }
}

TEST_F(PrecisionRuns, Bf16GradientReductionSumsInFp32) {
  // [precision] reduce_dtype = "bf16": dp 2 ZeRO 1 reduces its gradients through the bf16 codec
  // (blocks in bf16, fp32 sums at the receiver): within bf16's noise of the fp32 reduction, the
  // trace's dp reduction on bf16 wires; a second coder of the same traffic is refused.
  const std::string base = "--steps 4 --val_batches 0 --precision bf16 --dp 2 --zero 1 --micro_batch 2 --trace "
                           "--ranks_per_node 2";
  RunResult r = train(2, base + " --out " + *tmp / "fp32-reduce");
  ASSERT_EQ(r.code, 0) << r.err;
  r = train(2, base + " --reduce_dtype bf16 --out " + *tmp / "bf16-reduce");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto a = metric_series(*tmp / "fp32-reduce", "loss"), b = metric_series(*tmp / "bf16-reduce", "loss");
  ASSERT_EQ(b.size(), 4u);
  for (const auto& [s, l] : a) EXPECT_NEAR(b.at(s), l, 0.01 * l) << "step " << s;
  const auto report = nlohmann::json::parse(std::ifstream(*tmp / "bf16-reduce/comm_report.json"));
  EXPECT_EQ(report["mismatches"].get<int>(), 0);
  int reductions = 0;
  for (const auto& e : report["compression"]["by_op_axis"]) {
    if (e["axis"] != "dp" || (e["op"] != "reduce_scatter" && e["op"] != "all_reduce") || e["raw_bytes"] == 0) continue;
    if (e["op"] == "all_reduce" && e["compressed_calls"] == 0) continue;  // the step's small fp32 statistics
    ++reductions;
    EXPECT_EQ(e["codecs"], nlohmann::json::array({"bf16"})) << e.dump();
    EXPECT_LT(e["ratio"].get<double>(), 1.0) << e.dump();
    EXPECT_GT(e["rel_err"]["max"].get<double>(), 0.0) << e.dump();   // lossy: the blocks are rounded
    EXPECT_LT(e["rel_err"]["max"].get<double>(), 1e-2) << e.dump();  // by bf16's 2^-9 at most
    std::printf("dp %s on bf16 wires: wire/raw %.4f, relative error mean %.3g max %.3g\n",
                e["op"].get<std::string>().c_str(), e["ratio"].get<double>(), e["rel_err"]["mean"].get<double>(),
                e["rel_err"]["max"].get<double>());
  }
  double worst = 0;
  for (const auto& [s, l] : a) worst = std::max(worst, std::abs(b.at(s) - l) / l);
  std::printf("bf16 vs fp32 gradient reduction over 4 steps: worst relative loss difference %.3g\n", worst);
  EXPECT_GE(reductions, 1);
  r = train(2, base + " --reduce_dtype bf16 --compression.dp int8 --out " + *tmp / "both");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("reduce_dtype = \"bf16\" and compression.dp = \"int8\" both set"), std::string::npos) << r.err;
}

TEST_F(PrecisionRuns, BadSettingsAreRefused) {
  RunResult r = train(0, "--precision fp8 --out " + *tmp / "x1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unknown precision 'fp8'"), std::string::npos) << r.err;
  r = train(0, "--precision fp16 --loss_scale_window 0 --out " + *tmp / "x2");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("loss_scale_window must be >= 1, got 0"), std::string::npos) << r.err;
  r = train(0, "--precision fp16 --initial_loss_scale 4 --min_loss_scale 8 --out " + *tmp / "x3");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("initial_loss_scale 4 and min_loss_scale 8"), std::string::npos) << r.err;
  r = train(0, "--precision bf16 --matmul turbo --out " + *tmp / "x4");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unknown matmul mode 'turbo', expected one of: exact, fast"), std::string::npos) << r.err;
  r = train(0, "--fp32_kernel mkl --out " + *tmp / "x5");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unknown fp32_kernel 'mkl', expected one of: openblas, onednn"), std::string::npos) << r.err;
  r = train(0, "--wires bf16 --out " + *tmp / "x6");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unknown wires 'bf16', expected one of: storage, fp32"), std::string::npos) << r.err;
  // The 16-bit working parameters are gathered as stored; a codec reads fp32.
  r = train(2, "--precision bf16 --dp 2 --zero 1 --compression.params int8 --out " + *tmp / "x7");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("compression.params = \"int8\" with precision bf16: the working parameters are stored in bf16"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(std::filesystem::exists((*tmp / "x7") + "/metrics.jsonl"));
}

TEST_F(PrecisionRuns, CodecsReadSixteenBitPayloads) {
  // [compression] pp and tp in a 16-bit GPT run: the pipeline messages (the 16-bit residual
  // stream) and the tensor-parallel sums and gathers (16-bit since issue 32) go through the codec
  // widened to fp32 (comm/compressed_comm.h). Against the same run uncoded: the losses within
  // int8's noise; every call of the axis's activation traffic coded, at about half the raw
  // (16-bit) bytes; the communication model equal to the trace.
  struct Case {
    int np;
    const char* layout;
    const char* axis;
    std::vector<const char*> ops;
  };
  const Case cases[] = {{2, "--pp 2 --compression.pp int8", "pp", {"send", "recv"}},
                        {2, "--tp 2 --compression.tp int8", "tp", {"all_reduce"}},
                        {2, "--tp 2 --sequence_parallel true --compression.tp int8", "tp",
                         {"all_gather", "reduce_scatter"}}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.layout);
    const std::string base = "--steps 3 --val_batches 0 --precision bf16 --micro_batch 2 --trace --ranks_per_node 2 ";
    const std::string coded = *tmp / fmt::format("coded{}", n), plain = *tmp / fmt::format("plain{}", n);
    std::string uncoded_layout = c.layout;
    uncoded_layout.erase(uncoded_layout.find(" --compression"));
    RunResult r = train(c.np, base + uncoded_layout + " --out " + plain);
    ASSERT_EQ(r.code, 0) << r.err;
    r = train(c.np, base + c.layout + " --out " + coded);
    ASSERT_EQ(r.code, 0) << r.err;
    const auto a = metric_series(plain, "loss"), b = metric_series(coded, "loss");
    ASSERT_EQ(b.size(), 3u);
    for (const auto& [step, l] : a) EXPECT_NEAR(b.at(step), l, 0.02 * l) << "step " << step;
    const auto report = nlohmann::json::parse(std::ifstream(coded + "/comm_report.json"));
    EXPECT_EQ(report["mismatches"].get<int>(), 0);
    for (const char* op : c.ops) {
      bool seen = false;
      for (const auto& e : report["compression"]["by_op_axis"]) {
        if (e["op"] != op || e["axis"] != c.axis) continue;
        seen = true;
        EXPECT_GT(e["compressed_calls"].get<int>(), 0) << e.dump();
        EXPECT_EQ(e["codecs"], nlohmann::json::array({"int8"})) << e.dump();
        EXPECT_LT(e["ratio"].get<double>(), 0.6) << e.dump();  // int8 + block scales of 16-bit values
        EXPECT_GT(e["ratio"].get<double>(), 0.45) << e.dump();
        std::printf("%s: %s %s int8 on bf16, wire/raw %.4f, relative error mean %.3g\n", c.layout, op, c.axis,
                    e["ratio"].get<double>(), e["rel_err"]["mean"].get<double>());
      }
      EXPECT_TRUE(seen) << op;
    }
  }
}

}  // namespace
}  // namespace weft
