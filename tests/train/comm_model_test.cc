// The analytic communication model (plan/comm_model.h) against the tracer, exactly: for every
// layout of the parity suites (tests/parallel/{dp,tp,pp}_parity_test.cc and the golden
// layouts of tests/golden/), `weft train --trace` runs a few steps and the traced calls of the
// training steps, counted here from the per-rank trace files on their own (a collective once
// per group: on the group's first rank; a send or receive once), must equal the model's count
// and bytes for every (op, axis, bytes). The run's comm_report.json must agree (zero
// mismatches, the same totals). Also: link levels with emulated nodes, bad ranks_per_node,
// the report's conventions (bus factors, trimmed mean, rank lists).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "comm/topology.h"
#include "comm/tracer.h"
#include "plan/comm_model.h"
#include "test_util.h"
#include "train/comm_report.h"
#include "train/config.h"
#include "train/engine_config.h"

namespace weft {
namespace {

using test::RunResult;
using test::TempDir;
namespace fs = std::filesystem;

// One layout of a suite: np ranks (0: a plain process) with args, on the suite's [train] lines.
struct Layout {
  int np;
  std::string args;
};

// "--key value ..." -> overrides.
std::vector<std::pair<std::string, std::string>> overrides_of(const std::string& args) {
  std::istringstream in(args);
  std::vector<std::pair<std::string, std::string>> out;
  std::string k, v;
  while (in >> k >> v) out.emplace_back(k.substr(2), v);
  return out;
}

using Totals = std::map<std::tuple<std::string, std::string, int64_t>, std::pair<int64_t, int64_t>>;

// The training steps' calls from the trace files alone.
Totals traced_totals(const std::string& run, int world) {
  Totals t;
  for (int r = 0; r < world; ++r) {
    for (const TraceEvent& ev : read_trace_jsonl(run + fmt::format("/trace-rank{}.jsonl", r))) {
      if (ev.phase != "train") continue;
      const bool p2p = ev.kind == "send" || ev.kind == "recv";
      if (!p2p && parse_ranks(ev.group.substr(6)).front() != r) continue;  // once per group
      auto& [n, b] = t[{ev.kind, ev.axis, ev.bytes}];
      n += 1;
      b += ev.bytes;
    }
  }
  return t;
}

class CommModelRuns : public ::testing::Test {
 protected:
  // A corpus and run.toml: the tiny preset, `train_lines` under [train], `model_lines` under [model].
  void prepare(const std::string& group, const std::string& model_lines, const std::string& train_lines,
               int vocab = 50257) {
    tmp = std::make_unique<TempDir>("comm-" + group);
    test::make_random_corpus(*tmp / "data", 20000, 4000, vocab);
    config = *tmp / "run.toml";
    std::ofstream(config) << "[model]\nmodel = \"tiny\"\n" << model_lines << "[data]\ndata = \"" << (*tmp / "data")
                          << "\"\n[train]\n" << train_lines << "steps = 2\nlr = 2e-3\nthreads = 1\n"
                          << "[eval]\nval_batches = 0\n[checkpoint]\nckpt_every = 0\n[parallel]\ncomm_timeout = 120.0\n";
  }

  // Runs the layout with --trace and compares trace, model and report; returns the report.
  nlohmann::json check(const Layout& l, const std::string& extra = "") {
    const std::string out = *tmp / fmt::format("run{}", n);
    const std::string args = l.args + extra;
    std::string prefix = test::mpi_launcher(l.np);
    RunResult r = test::run_weft_with(prefix, "train " + config + " " + args + " --trace true --out " + out,
                                      *tmp / fmt::format("cmd{}", n++));
    EXPECT_EQ(r.code, 0) << args << ": " << r.err;
    if (r.code != 0) return nullptr;
    const RunConfig cfg = load_run_config(config, overrides_of(args));
    const int world = std::max(1, l.np);
    const EngineConfig ec = engine_config(cfg, world);
    Totals model;
    for (const CommStepContext& ctx : contexts(cfg, ec)) {
      for (const auto& [k, v] : comm_totals(model_step_comm(ec, ctx))) {
        model[k].first += v.first;
        model[k].second += v.second;
      }
    }
    const Totals traced = traced_totals(out, world);
    EXPECT_FALSE(traced.empty()) << args;
    for (const auto& [k, v] : traced) {
      const auto it = model.find(k);
      const std::pair<int64_t, int64_t> m = it == model.end() ? std::pair<int64_t, int64_t>{0, 0} : it->second;
      EXPECT_EQ(v, m) << args << ": " << std::get<0>(k) << " on " << std::get<1>(k) << " of " << std::get<2>(k)
                      << " bytes: traced (count, bytes) vs model";
      ++checked;
    }
    for (const auto& [k, v] : model) {
      EXPECT_TRUE(traced.count(k)) << args << ": the model has " << v.first << " x " << std::get<0>(k) << " on "
                                   << std::get<1>(k) << " of " << std::get<2>(k) << " bytes, the trace none";
    }
    return check_report(out, traced, args);
  }

  // The run's report: zero mismatches, and its training rows add up to what was traced.
  nlohmann::json check_report(const std::string& out, const Totals& traced, const std::string& args) {
    std::ifstream in(out + "/comm_report.json");
    EXPECT_TRUE(in) << args << ": no comm_report.json";
    if (!in) return nullptr;
    const nlohmann::json rep = nlohmann::json::parse(in);
    EXPECT_EQ(rep["mismatches"].get<int64_t>(), 0) << args << "\n" << test::read_text(out + "/comm_report.txt");
    int64_t calls = 0, traced_calls = 0;
    for (const auto& row : rep["rows"]) calls += row["count"].get<int64_t>();
    for (const auto& [k, v] : traced) traced_calls += v.first;
    EXPECT_EQ(calls, traced_calls) << args;
    EXPECT_TRUE(fs::exists(out + "/comm_report.txt")) << args;
    ++layouts;
    return rep;
  }

  // What precedes each step: an evaluation (val_every) adds its forward passes.
  static std::vector<CommStepContext> contexts(const RunConfig& cfg, const EngineConfig& ec) {
    std::vector<CommStepContext> out(static_cast<size_t>(cfg.steps));
    if (cfg.val_batches <= 0) return out;
    const int64_t windows = cfg.val_batches * ec.global_batch;  // the corpus holds more
    const int64_t passes = ((windows + ec.layout.dp - 1) / ec.layout.dp + ec.layout.micro_batch - 1) / ec.layout.micro_batch;
    for (int64_t s = 0; s < cfg.steps; ++s) {
      out[static_cast<size_t>(s)].after_training = s > 0;
      const bool eval_before = s == 0 || (cfg.val_every > 0 && s % cfg.val_every == 0);
      if (eval_before) out[static_cast<size_t>(s)].eval_passes_before = passes;
    }
    return out;
  }

  void TearDown() override {
    std::printf("[comm model] %d layouts checked, %d (op, axis, bytes) entries compared\n", layouts, checked);
  }

  std::unique_ptr<TempDir> tmp;
  std::string config;
  int n = 0, layouts = 0, checked = 0;
};

// The golden layouts (tests/golden/golden_curves_test.cc: T 32, B 8, micro-batch 2, V 500).
class GoldenLayouts : public CommModelRuns {
 protected:
  void SetUp() override {
    prepare("golden", "vocab_size = 500\n", "seq_len = 32\nglobal_batch = 8\nmicro_batch = 2\nseed = 99\n", 500);
  }
};

TEST_F(GoldenLayouts, SingleProcessTraceEqualsTheModel) {
  for (const Layout& l : std::vector<Layout>{{0, ""}, {0, "--recompute full"}, {0, "--precision bf16"},
                                             {0, "--precision fp16 --initial_loss_scale 4194304 --loss_scale_window 2"},
                                             {0, "--recompute full --recompute_layers 1 --zero 1"}}) {
    check(l);
  }
}

TEST_F(GoldenLayouts, MultiRankTraceEqualsTheModel) {
  for (const Layout& l : std::vector<Layout>{{2, "--dp 2 --zero 0"}, {2, "--dp 2 --zero 1"}, {2, "--dp 2 --zero 2"},
                                             {2, "--dp 2 --zero 3"}, {2, "--tp 2 --sequence_parallel true"},
                                             {2, "--pp 2 --schedule interleaved --virtual_stages 2"},
                                             {8, "--tp 2 --pp 2 --dp 2 --zero 1 --micro_batch 1"}}) {
    check(l);
  }
}

// HSDP (dp = dp_shard x dp_replicate): every ZeRO stage on 4 ranks ("dp-shard" inside, the
// shards' all-reduce on "dp-replicate", the embedding's rows on "dp"), with pipelining and the
// tied embedding on 8, with tp on 8, and ZeRO++ (qwZ, hpZ, 2-hop qgZ) inside dp_shard groups of 4 on 8.
TEST_F(GoldenLayouts, HybridShardedDpTraceEqualsTheModel) {
  for (int z = 0; z <= 3; ++z) check({4, fmt::format("--dp_shard 2 --dp_replicate 2 --zero {} --micro_batch 1", z)});
  check({8, "--pp 2 --dp_shard 2 --dp_replicate 2 --zero 1 --micro_batch 1"});
  check({8, "--tp 2 --dp_shard 2 --dp_replicate 2 --zero 3 --micro_batch 1"});
  // Emulated nodes of 2 ranks: a dp_shard group of 4 spans 2 nodes, so qgZ hops inside the node
  // ("dp-node") and then across ("dp-net"); hpZ 2 stays in the node.
  check({8, "--dp_shard 4 --dp_replicate 2 --zero 3 --micro_batch 1 --ranks_per_node 2 --hpz_partition_size 2 "
            "--quantized_weights true --quantized_gradients true"});
}

// ZeRO-3 after evaluations: the evaluation's gathers stay valid into the next step.
TEST_F(GoldenLayouts, Zero3WithValidationEqualsTheModel) {
  check({2, "--dp 2 --zero 3 --steps 3 --val_every 1 --val_batches 1"});
}

// Link levels: tp 2 x dp 2 on emulated nodes of 2 ranks: tp stays inside a node, dp crosses.
TEST_F(GoldenLayouts, EmulatedNodesAttributeEveryByteToItsLevel) {
  const nlohmann::json rep = check({4, "--tp 2 --dp 2 --zero 1 --micro_batch 1"}, " --ranks_per_node 2");
  ASSERT_FALSE(rep.is_null());
  EXPECT_EQ(rep["node_source"], "emulated");
  EXPECT_EQ(rep["ranks_per_node"], 2);
  std::map<std::string, std::set<std::string>> levels;
  for (const auto& a : rep["by_axis_level"]) levels[a["axis"]].insert(a["level"]);
  EXPECT_EQ(levels["tp"], std::set<std::string>{"intra-node"});
  EXPECT_EQ(levels["dp"], std::set<std::string>{"inter-node"});
  // The same run on one real node (mpirun on this machine): everything intra-node.
  const nlohmann::json one = check({4, "--tp 2 --dp 2 --zero 1 --micro_batch 1"});
  ASSERT_FALSE(one.is_null());
  EXPECT_EQ(one["node_source"], "mpi-hostname");
  for (const auto& a : one["by_axis_level"]) EXPECT_EQ(a["level"], "intra-node") << a.dump();
}

TEST_F(GoldenLayouts, BadRanksPerNodeIsAnInputError) {
  RunResult r = test::run_weft_with(test::mpi_launcher(4), "train " + config + " --dp 4 --trace true --ranks_per_node 3 --out " + *tmp / "bad",
                                    *tmp / "cmd-bad");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("ranks_per_node 3 does not divide the world of 4 ranks"), std::string::npos) << r.err;
  r = test::run_weft("train " + config + " --ranks_per_node -1 --out " + *tmp / "bad2", *tmp / "cmd-bad2");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("ranks_per_node must be >= 0"), std::string::npos) << r.err;
}

// The data-parallel suite (tests/parallel/dp_parity_test.cc: T 64, B 8, micro-batch 2).
TEST_F(CommModelRuns, DataParallelSuiteTraceEqualsTheModel) {
  prepare("dp", "", "seq_len = 64\nglobal_batch = 8\nmicro_batch = 2\nseed = 4242\n");
  for (int z = 0; z <= 3; ++z) check({2, fmt::format("--zero {}", z)});
  for (int z = 0; z <= 3; ++z) check({4, fmt::format("--zero {} --micro_batch 1", z)});
}

// The tensor-parallel suite (tests/parallel/tp_parity_test.cc: T 64, B 4, micro-batch 2).
TEST_F(CommModelRuns, TensorParallelSuiteTraceEqualsTheModel) {
  prepare("tp", "", "seq_len = 64\nglobal_batch = 4\nmicro_batch = 2\nseed = 777\n");
  for (const Layout& l : std::vector<Layout>{{2, "--tp 2"}, {4, "--tp 4"}, {2, "--tp 2 --sequence_parallel true"},
                                             {4, "--tp 4 --sequence_parallel true"},
                                             {4, "--tp 2 --dp 2 --zero 1 --micro_batch 1"},
                                             {4, "--tp 2 --dp 2 --zero 3 --micro_batch 1 --sequence_parallel true"}}) {
    check(l);
  }
}

// The pipeline suite (tests/parallel/pp_parity_test.cc: T 64, B 8, micro-batch 2).
TEST_F(CommModelRuns, PipelineSuiteTraceEqualsTheModel) {
  prepare("pp", "", "seq_len = 64\nglobal_batch = 8\nmicro_batch = 2\nseed = 31\n");
  for (const Layout& l : std::vector<Layout>{
           {2, "--pp 2 --schedule gpipe"}, {2, "--pp 2 --schedule 1f1b"}, {3, "--pp 3"}, {4, "--pp 4 --schedule 1f1b"},
           {4, "--pp 4 --schedule gpipe --micro_batch 1"},
           {2, "--pp 2 --schedule interleaved --virtual_stages 2 --micro_batch 1"},
           {4, "--pp 2 --dp 2 --zero 1 --schedule interleaved --virtual_stages 2 --micro_batch 1"},
           {8, "--tp 2 --pp 2 --dp 2 --zero 1 --micro_batch 1"},
           {4, "--n_layer 8 --pp 4 --schedule interleaved --virtual_stages 2 --micro_batch 1"}}) {
    check(l);
  }
}

// The decoder variants (llama-tiny, its head untied): RMSNorm's weights summed under sequence
// parallelism, ZeRO-3's order of an untied head, no embedding shared between pipeline stages,
// the replicated kv heads' gradient sums (fewer kv heads than tp ranks).
TEST_F(CommModelRuns, DecoderVariantTraceEqualsTheModel) {
  prepare("llama", "", "seq_len = 32\nglobal_batch = 4\nmicro_batch = 2\nseed = 5\n");
  for (const Layout& l : std::vector<Layout>{{2, "--tp 2 --sequence_parallel true"}, {2, "--dp 2 --zero 3 --micro_batch 1"},
                                             {2, "--pp 2"}, {2, "--dp 2 --zero 1 --micro_batch 1"},
                                             {4, "--tp 4 --micro_batch 1"}}) {  // tp 4: 2 kv heads, each on 2 ranks
    check(l, " --model llama-tiny --model.tie_embeddings false");
  }
  // One kv head on both ranks of tp 2 (multi-query attention): each layer's backward sums its
  // gradient columns, one fp32 all-reduce.
  check({4, "--tp 2 --pp 2 --micro_batch 1"}, " --model llama-tiny --model.n_kv_head 1 --model.tie_embeddings false");
  // MPT's block: a bias-free LayerNorm's weight gradient summed alone (C, not 2C) under sp.
  check({2, "--tp 2 --sequence_parallel true"}, " --model.position alibi --model.bias false --model.mlp gelu_exact");
  // GPT-NeoX's parallel residual: the same collectives as the sequential block.
  check({2, "--tp 2 --sequence_parallel true"}, " --model.position rope --model.parallel_residual true");
}

// --- the report's conventions, without runs ---

TEST(CommReport, BusFactorsFollowNcclTests) {
  EXPECT_DOUBLE_EQ(bus_factor("all_reduce", 4), 1.5);
  EXPECT_DOUBLE_EQ(bus_factor("all_gather", 4), 0.75);
  EXPECT_DOUBLE_EQ(bus_factor("reduce_scatter", 2), 0.5);
  EXPECT_DOUBLE_EQ(bus_factor("send", 2), 1.0);
  EXPECT_DOUBLE_EQ(bus_factor("all_reduce", 1), 0.0);
}

TEST(CommReport, TrimmedMeanDropsTenPercentEachSide) {
  std::vector<double> v;
  for (int i = 1; i <= 10; ++i) v.push_back(i);
  v.back() = 1000;  // one outlier of ten: dropped with the lowest
  EXPECT_DOUBLE_EQ(trimmed_mean(v), (2 + 3 + 4 + 5 + 6 + 7 + 8 + 9) / 8.0);
  EXPECT_DOUBLE_EQ(trimmed_mean({3.0}), 3.0);
}

TEST(CommReport, RankListsRoundTrip) {
  for (const std::vector<int>& r : std::vector<std::vector<int>>{{0}, {0, 2}, {1, 3, 5, 7, 9, 11, 13, 15, 17}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}}) {
    EXPECT_EQ(parse_ranks(format_ranks(r)), r) << format_ranks(r);
  }
  EXPECT_THROW(parse_ranks(format_ranks({0, 1, 2, 3, 5, 8, 13, 21, 34})), InputError);
}

TEST(CommReport, CollectivesCountOncePerGroupWithTheSlowestLatency) {
  // Two ranks, one all-reduce on their dp group (0.002 s and 0.005 s) and a send from 0 to 1.
  auto ev = [](const char* kind, const char* group, double d) {
    TraceEvent e;
    e.kind = kind, e.axis = kind[0] == 'a' ? "dp" : "pp", e.bytes = 1024, e.group = group, e.duration_s = d;
    e.step = 1, e.phase = "train";
    return e;
  };
  const std::vector<std::vector<TraceEvent>> per_rank = {{ev("all_reduce", "ranks 0,1", 0.002), ev("send", "peer 1", 0.001)},
                                                         {ev("all_reduce", "ranks 0,1", 0.005), ev("recv", "peer 0", 0.003)}};
  CommReportInputs in;
  in.ec.layout.dp = 2;
  in.nodes = emulated_node_map(2, 1);
  in.first_step = 0, in.last_step = 1;  // no contexts: the model is not asked
  const nlohmann::json rep = build_comm_report(per_rank, in);
  ASSERT_EQ(rep["rows"].size(), 3u) << rep.dump(1);
  for (const auto& row : rep["rows"]) {
    EXPECT_EQ(row["count"], 1) << row.dump();
    EXPECT_EQ(row["level"], "inter-node") << row.dump();
    if (row["op"] == "all_reduce") {
      EXPECT_DOUBLE_EQ(row["time_s"].get<double>(), 0.005);
      EXPECT_DOUBLE_EQ(row["straggler_s"]["max"].get<double>(), 0.003);
      EXPECT_EQ(row["straggler_s"]["worst_rank"], 1);
      EXPECT_DOUBLE_EQ(row["busbw_gbps"].get<double>(), row["algbw_gbps"].get<double>());  // 2(n-1)/n = 1
    }
  }
  EXPECT_EQ(rep["mismatches"], 3);  // the model (not asked) predicts none of them
}

// The `levels` section from a hand-made trace of 4 ranks on 2 nodes of 2, with a level "gcd"
// of one rank each below the nodes. Step 1: a dp all_reduce of 1000 B and a dp all_to_all of
// 1600 B on ranks 0-3, tp all_gathers of 400 B on {0,1} and {2,3}, a pp transfer of 64 B from
// rank 1 to rank 2; step 2: the all_reduce again; a metrics all_reduce is not counted.
// By hand (crossing_bytes' closed forms):
//   all_reduce 0-3:  gcd 2 x 1000 x 3 = 6000, node 2 x 1000 x 1 = 2000
//   all_to_all 0-3:  gcd 1600 (1 - 4/16) = 1200, node 1600 (1 - 8/16) = 800
//   all_gather {0,1}, {2,3}: gcd 400 each, node 0
//   send 1 -> 2:     64 at both levels (counted once: the recv is the same transfer)
TEST(CommReport, LevelsCountCrossingBytesPerStepAndAxis) {
  auto ev = [](const char* kind, const char* axis, int64_t bytes, const char* group, int64_t step,
               const char* phase = "train") {
    TraceEvent e;
    e.kind = kind, e.axis = axis, e.bytes = bytes, e.group = group, e.duration_s = 0.001;
    e.step = step, e.phase = phase;
    return e;
  };
  std::vector<std::vector<TraceEvent>> per_rank(4);
  for (int r = 0; r < 4; ++r) {
    auto& t = per_rank[static_cast<size_t>(r)];
    t.push_back(ev("all_reduce", "dp", 1000, "ranks 0-3", 1));
    t.push_back(ev("all_to_all", "dp", 1600, "ranks 0-3", 1));
    t.push_back(ev("all_gather", "tp", 400, r < 2 ? "ranks 0,1" : "ranks 2,3", 1));
    if (r == 1) t.push_back(ev("send", "pp", 64, "peer 2", 1));
    if (r == 2) t.push_back(ev("recv", "pp", 64, "peer 1", 1));
    t.push_back(ev("all_reduce", "world", 8, "ranks 0-3", 1, "metrics"));
    t.push_back(ev("all_reduce", "dp", 1000, "ranks 0-3", 2));
  }
  CommReportInputs in;
  in.ec.layout.dp = 2;
  in.nodes = emulated_node_map(4, 2);
  in.first_step = 0, in.last_step = 2;
  in.levels = LinkLevels::from_nodes(in.nodes);
  in.levels.add_inner_level("gcd", 1);
  const nlohmann::json rep = build_comm_report(per_rank, in);
  EXPECT_EQ(rep["version"], 3);
  const nlohmann::json& lv = rep["levels"];
  EXPECT_EQ(lv["names"], nlohmann::json({"gcd", "node"}));
  EXPECT_EQ(lv["domains"], nlohmann::json({4, 2}));
  EXPECT_EQ(lv["ranks_per_domain"], nlohmann::json({1, 2}));
  ASSERT_EQ(lv["steps"].size(), 2u) << lv.dump(1);
  const nlohmann::json& s1 = lv["steps"][0];
  EXPECT_EQ(s1["step"], 1);
  EXPECT_EQ(s1["bytes"], nlohmann::json({{"gcd", 6000 + 1200 + 800 + 64}, {"node", 2000 + 800 + 64}}));
  EXPECT_EQ(s1["by_axis"]["dp"], nlohmann::json({{"gcd", 7200}, {"node", 2800}}));
  EXPECT_EQ(s1["by_axis"]["tp"], nlohmann::json({{"gcd", 800}, {"node", 0}}));
  EXPECT_EQ(s1["by_axis"]["pp"], nlohmann::json({{"gcd", 64}, {"node", 64}}));
  EXPECT_FALSE(s1["by_axis"].contains("world")) << "the metrics phase is not a training step";
  const nlohmann::json& s2 = lv["steps"][1];
  EXPECT_EQ(s2["step"], 2);
  EXPECT_EQ(s2["bytes"], nlohmann::json({{"gcd", 6000}, {"node", 2000}}));
  EXPECT_EQ(lv["total"]["bytes"], nlohmann::json({{"gcd", 14064}, {"node", 4864}}));
  EXPECT_EQ(lv["total"]["by_axis"]["dp"], nlohmann::json({{"gcd", 13200}, {"node", 4800}}));
  const std::string txt = format_comm_report(rep);
  EXPECT_NE(txt.find("bytes crossing link levels"), std::string::npos) << txt;
  EXPECT_NE(txt.find("gcd/step"), std::string::npos) << txt;

  // Default levels: the node map's one level, today's intra/inter view; the rows keep their
  // intra-node / inter-node classification.
  in.levels = LinkLevels{};
  const nlohmann::json def = build_comm_report(per_rank, in);
  EXPECT_EQ(def["levels"]["names"], nlohmann::json({"node"}));
  EXPECT_EQ(def["levels"]["total"]["bytes"], nlohmann::json({{"node", 4864}}));
  for (const auto& row : def["rows"]) {
    EXPECT_EQ(row["level"], row["op"] == "all_gather" ? "intra-node" : "inter-node") << row.dump();
  }
  // Levels over another world than the node map's are refused.
  in.levels = LinkLevels::from_nodes(emulated_node_map(8, 2));
  EXPECT_THROW(build_comm_report(per_rank, in), InputError);
}

TEST(CommNodes, EmulatedMapsAndLevels) {
  const NodeMap m = emulated_node_map(8, 4);
  EXPECT_EQ(m.nodes(), 2);
  EXPECT_EQ(m.ranks_per_node(), 4);
  EXPECT_EQ(m.level({0, 1, 2, 3}), LinkLevel::kIntraNode);
  EXPECT_EQ(m.level({3, 4}), LinkLevel::kInterNode);
  EXPECT_EQ(emulated_node_map(4, 16).nodes(), 1);
  EXPECT_THROW(emulated_node_map(8, 3), InputError);
  EXPECT_THROW(emulated_node_map(8, 0), InputError);
  EXPECT_EQ(node_map_from_keys({5, 5, 2, 2}, "x").node_of_rank, (std::vector<int>{0, 0, 1, 1}));
}

}  // namespace
}  // namespace weft
