// [compression] through `weft train` on 8 MPI ranks in a 3D layout (tp 2 x pp 2 x dp 2, ZeRO-1):
// every codec named off reproduces the uncompressed run bit for bit (no compressing
// communicator exists then); bf16 on every axis stays within bf16's tolerance of the fp32
// curve; the hybrid policy (int4 gradients with error feedback, int8 parameters, bf16
// activations) trains near the baseline, matches the communication model call for call on raw
// bytes, and its report shows the wire bytes per (op, axis) at the codecs' ratios.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace weft {
namespace {

using test::RunResult;

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

const nlohmann::json* entry(const nlohmann::json& rep, const std::string& op, const std::string& axis) {
  for (const auto& e : rep["compression"]["by_op_axis"]) {
    if (e["op"] == op && e["axis"] == axis) return &e;
  }
  return nullptr;
}

class CompressionRuns : public test::ParityRuns {
 protected:
  void SetUp() override { prepare("compression", "seq_len = 64\nglobal_batch = 8\nmicro_batch = 1\nseed = 77\n", 1); }
  std::string run(const std::string& name, const std::string& args) {
    const std::string out = *tmp / name;
    RunResult r = train(8, fmt::format("--tp 2 --pp 2 --zero 1 --trace --ranks_per_node 4 --out {} {}", out, args));
    EXPECT_EQ(r.code, 0) << name << ": " << r.err;
    return out;
  }
};

TEST_F(CompressionRuns, OffIsBitwiseBf16IsNearAndHybridMatchesTheModel) {
  const std::string base = run("base", "");
  const std::string off = run("off", "--compression.dp off --compression.tp off --compression.pp off --compression.params off");
  const std::string bf = run("bf16", "--compression.dp bf16 --compression.tp bf16 --compression.pp bf16 --compression.params bf16");
  const std::string hyb = run("hybrid", "--compression.dp int4 --compression.params int8 --compression.tp bf16 "
                                        "--compression.error_feedback true");
  const auto b = test::metric_series(base, "loss"), o = test::metric_series(off, "loss"),
             h = test::metric_series(bf, "loss"), y = test::metric_series(hyb, "loss");
  ASSERT_EQ(b.size(), 12u);
  ASSERT_EQ(o.size(), b.size());
  for (const auto& [step, loss] : b) EXPECT_EQ(o.at(step), loss) << "off, step " << step << ": not bitwise";
  // bf16 on the wire: each coded value carries a relative error of at most 2^-9; over 12 steps
  // of a tiny model the loss moves by far less than 1%.
  for (const auto& [step, loss] : b) EXPECT_NEAR(h.at(step), loss, 1e-2 * loss) << "bf16, step " << step;
  // int4 gradients with error feedback on a random corpus at lr 2e-3: the curve departs from
  // the baseline's by up to ~10% in the first steps (both ways); what it costs a real run is
  // bench/compression_study.sh's question. Here: it trains, and ends near the baseline.
  const double last = b.rbegin()->second;
  EXPECT_NEAR(y.rbegin()->second, last, 0.1 * last) << "hybrid, last step";
  const nlohmann::json rep = read_json(hyb + "/comm_report.json");
  EXPECT_EQ(rep["mismatches"], 0) << rep["mismatches"].dump();
  // Gradients: ZeRO-1 reduce-scatters on dp in int4 (1/8 of fp32 plus a scale per block, more
  // for the small tensors: a piece of n values costs at least 8 bytes); parameters gathered
  // in int8 (1/4 plus the same); tp activations in bf16 (1/2).
  const nlohmann::json* rs = entry(rep, "reduce_scatter", "dp");
  const nlohmann::json* ag = entry(rep, "all_gather", "dp");
  const nlohmann::json* tp = entry(rep, "all_reduce", "tp");
  ASSERT_TRUE(rs && ag && tp) << rep["compression"].dump();
  EXPECT_GT((*rs)["ratio"].get<double>(), 0.125);
  EXPECT_LT((*rs)["ratio"].get<double>(), 0.2);
  EXPECT_GT((*ag)["ratio"].get<double>(), 0.25);
  EXPECT_LT((*ag)["ratio"].get<double>(), 0.32);
  EXPECT_NEAR((*tp)["ratio"].get<double>(), 0.5, 0.005);
  EXPECT_GT((*rs)["rel_err"]["max"].get<double>(), 0.0);
  // The hybrid run's residual is in its memory line.
  nlohmann::json mem;
  std::ifstream in(hyb + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("memory")) mem = j["memory"];
  }
  EXPECT_GT(mem.value("qgz_residual", int64_t{0}) + mem.value("residual", int64_t{0}), 0) << mem.dump();
}

TEST_F(CompressionRuns, RefusesWhatCannotApply) {
  RunResult r = train(0, fmt::format("--out {} --compression.dp zfp:40", std::string(*tmp / "bad1")));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("compression.dp"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("zfp:40"), std::string::npos) << r.err;
  r = train(0, fmt::format("--out {} --compression.dp zstd --compression.error_feedback true", std::string(*tmp / "bad2")));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("lossy"), std::string::npos) << r.err;
  // A codec on an axis of one rank: trains, and says it has no effect.
  r = train(0, fmt::format("--out {} --steps 1 --compression.tp bf16", std::string(*tmp / "note")));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE((r.out + r.err).find("has no effect: tp = 1"), std::string::npos) << r.out << r.err;
}

}  // namespace
}  // namespace weft
