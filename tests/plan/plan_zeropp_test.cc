// ZeRO++ in the planner (plan/zeropp.h, predict.cc dp_cost, memory.cc): closed-form bytes per
// link level for ZeRO-3, "zero++" and "3-level" on a 2-level and a 3-level machine (the
// ZeRO++ paper's cross-node 3M : 0.75M with 16-bit wires), the counts of each mechanism, the
// hpZ memory, the presets' resolution and the refusals (also through the CLI: exit 2).
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "model/gpt/gpt_description.h"
#include "model/config.h"
#include "model/gpt/gpt_config.h"
#include "plan/comm_model.h"
#include "plan/predict.h"
#include "plan/search.h"
#include "plan/zeropp.h"
#include "test_util.h"

namespace weft::plan {
namespace {

constexpr double kG = 2048;  // the default quantization block

// A device of 1 TFLOP/s; levels as given (innermost first).
System machine(std::vector<LinkLevel> levels) {
  System s;
  s.name = "zpp";
  s.device.peak_flops_16 = s.device.peak_flops_32 = 1e12;
  s.device.memory_bytes = 1e12;
  s.device.memory_bandwidth = 1e12;
  s.levels = std::move(levels);
  s.validate();
  return s;
}
System two_level() { return machine({{"node", 8, 100e9, 1e-6}, {"network", 0, 10e9, 1e-5}}); }
System three_level() { return machine({{"pair", 2, 200e9, 1e-6}, {"node", 8, 50e9, 1e-6}, {"network", 0, 10e9, 1e-5}}); }

ModelShape small_model() { return ModelShape::from_config(make_model_config("t", 4, 4, 256, 256, 1024)); }

Layout zero3(int dp, ZeroPP z) {
  Layout l;
  l.dp = dp;
  l.zero = 3;
  l.zeropp = z;
  return l;
}

Options opts(int64_t batch) {
  Options o;
  o.precision = Precision::kBf16;
  o.global_batch = batch;
  o.fp32_grad_accumulation = false;  // 16-bit gradient wires, as the ZeRO++ paper counts
  o.overlap_dp = false;
  o.explain = true;
  return o;
}

double level(const Prediction& p, const std::string& name) {
  for (const auto& [n, b] : p.dp_level_bytes) {
    if (n == name) return b;
  }
  ADD_FAILURE() << "no level " << name;
  return 0;
}

const ExplainTerm* find_term(const Prediction& p, const std::string& prefix) {
  for (const ExplainTerm& t : p.explain) {
    if (t.name.rfind(prefix, 0) == 0) return &t;
  }
  return nullptr;
}

TEST(PlanZeroPP, StepCommCounts) {
  const double per_mb = zero3_gathers_per_micro_batch(4, DataParallelConfig{}.prefetch);
  const ZeroPPStepComm plain = zeropp_step_comm(6, DataParallelConfig{}.prefetch, 3, 32, {});
  EXPECT_DOUBLE_EQ(plain.primary_gathers, 3 * per_mb);
  EXPECT_DOUBLE_EQ(plain.secondary_gathers, 0);
  EXPECT_DOUBLE_EQ(plain.reduce_scatter, 1);
  EXPECT_TRUE(plain.gradient_hops.empty());
  // hpZ: one gather over dp (the first micro-batch's forward), the rest inside alpha.
  const ZeroPPStepComm z = zeropp_step_comm(6, DataParallelConfig{}.prefetch, 3, 32, {true, 8, true, {2, 8}});
  EXPECT_TRUE(z.quantized);
  EXPECT_DOUBLE_EQ(z.primary_gathers, 1);
  EXPECT_DOUBLE_EQ(z.secondary_gathers, 3 * per_mb - 1);
  EXPECT_EQ(z.hpz, 8);
  ASSERT_EQ(z.gradient_hops.size(), 3u);
  // hop 1: all of Psi over 2 peers; hop 2: Psi/2 over 4 peers 2 apart; hop 3: Psi/8 over 4 peers 8 apart.
  EXPECT_EQ(z.gradient_hops[0].peers, 2);
  EXPECT_EQ(z.gradient_hops[0].stride, 1);
  EXPECT_DOUBLE_EQ(z.gradient_hops[0].elements, 1.0);
  EXPECT_EQ(z.gradient_hops[1].peers, 4);
  EXPECT_EQ(z.gradient_hops[1].stride, 2);
  EXPECT_DOUBLE_EQ(z.gradient_hops[1].elements, 0.5);
  EXPECT_EQ(z.gradient_hops[2].peers, 4);
  EXPECT_EQ(z.gradient_hops[2].stride, 8);
  EXPECT_DOUBLE_EQ(z.gradient_hops[2].elements, 0.125);
  EXPECT_THROW(zeropp_step_comm(6, 1, 1, 32, {false, 3, false, {}}), InputError);
  EXPECT_THROW(zeropp_step_comm(6, 1, 1, 32, {false, 1, true, {3}}), InputError);
}

TEST(PlanZeroPP, AllToAllCost) {
  const System s = three_level();
  const double X = 1e9;
  // 8 ranks in a node: the pair level carries 7/8 of each rank's buffer, the node level 6/8.
  const std::vector<double> b = collective_level_bytes(s, Collective::kAllToAll, 8, 1, X);
  EXPECT_DOUBLE_EQ(b[0], 7.0 / 8 * X);
  EXPECT_DOUBLE_EQ(b[1], 6.0 / 8 * X);
  EXPECT_DOUBLE_EQ(b[2], 0);
  EXPECT_NEAR(collective_time(s, Collective::kAllToAll, 8, 1, X), 7 * 1e-6 + 6.0 / 8 * X / 50e9, 1e-12);
  // 4 nodes, one rank each (stride 8): all of (n-1)/n crosses the network on the rank's link.
  EXPECT_NEAR(collective_time(s, Collective::kAllToAll, 4, 8, X), 3 * 1e-5 + 3.0 / 4 * X / 10e9, 1e-12);
  // A ring over the same 32 ranks: the network crossing shared by the node's 8.
  const std::vector<double> r = collective_level_bytes(s, Collective::kAllGather, 32, 1, X);
  EXPECT_DOUBLE_EQ(r[2], 31.0 / 32 * X / 8);
}

// Cross-node bytes per node (per device x 8 devices) of one step with one micro-batch on
// 4 nodes of 8 (dp 32, tp 1), M = 2 Psi (16-bit model bytes):
//   ZeRO-3   (1 + g) (31/32) M           (g = weft's gathers per micro-batch, slightly under 2: the paper's 3M)
//   zero++   (31/32) M (1/2 + 2/G) + (3/4) M (1/4 + 2/G)   (qwZ forward + qgZ's last hop: the paper's 0.75M)
//   3-level  the same across nodes; the pair and node levels differ.
TEST(PlanZeroPP, CrossNodeBytesTwoLevel) {
  const System s = two_level();
  const ModelShape m = small_model();
  const Options o = opts(32);
  const double psi = stage_params_per_rank(m, zero3(32, ZeroPP::kNone), 0);
  const double M = 2 * psi;
  const double g = zero3_gathers_per_micro_batch(4, DataParallelConfig{}.prefetch);
  const Prediction z3 = predict(m, s, zero3(32, ZeroPP::kNone), o);
  const Prediction zpp = predict(m, s, zero3(32, ZeroPP::kZeroPP), o);
  EXPECT_EQ(zpp.layout.hpz, 8);
  EXPECT_EQ(zpp.layout.hierarchy, std::vector<int>{8});
  EXPECT_NEAR(8 * level(z3, "network"), (1 + g) * 31.0 / 32 * M, 1e-6 * M);
  const double zpp_net = 31.0 / 32 * M * (0.5 + 2 / kG) + 3.0 / 4 * M * (0.25 + 2 / kG);
  EXPECT_NEAR(8 * level(zpp, "network"), zpp_net, 1e-6 * M);
  // The paper's figures are the many-node limit of a deep model (weft's gathers per micro-batch
  // approach 2 with the layers: its buffers keep the last few): 44 layers on 32 nodes (dp 256).
  {
    const ModelShape deep = ModelShape::from_config(make_model_config("d", 44, 4, 256, 256, 1024));
    const double Md = 2 * stage_params_per_rank(deep, zero3(256, ZeroPP::kNone), 0);
    const double gd = zero3_gathers_per_micro_batch(44, DataParallelConfig{}.prefetch);
    const Options ob = opts(256);
    const Prediction a = predict(deep, s, zero3(256, ZeroPP::kNone), ob);
    const Prediction b = predict(deep, s, zero3(256, ZeroPP::kZeroPP), ob);
    const double M = Md, g = gd;
    std::printf("[ zero++ ] cross-node bytes per node on 32 nodes: ZeRO-3 %.3f M, zero++ %.3f M (paper: 3M, 0.75M)\n",
                8 * level(a, "network") / M, 8 * level(b, "network") / M);
    EXPECT_NEAR(8 * level(a, "network") / M, (1 + g) * 255.0 / 256, 1e-9);
    EXPECT_NEAR(8 * level(a, "network") / M, 3.0, 0.15);
    EXPECT_NEAR(8 * level(b, "network") / M, 0.75, 0.02);
  }
  // Inside the node (per device): ZeRO-3's rings (31/32 of each buffer); zero++: the forward
  // gather, the hpZ gathers over 8 ((g - 1) x 7/8 M) and qgZ's hop 1 (7/8 of Psi in int4).
  EXPECT_NEAR(level(z3, "node"), (1 + g) * 31.0 / 32 * M, 1e-6 * M);
  EXPECT_NEAR(level(zpp, "node"), 31.0 / 32 * M * (0.5 + 2 / kG) + (g - 1) * 7.0 / 8 * M + 7.0 / 8 * psi * (0.5 + 4 / kG),
              1e-6 * M);
  // Every term is in --explain with its level.
  const ExplainTerm* fwd = find_term(zpp, "forward all-gathers, int8");
  ASSERT_NE(fwd, nullptr);
  EXPECT_EQ(fwd->where, "network");
  const ExplainTerm* sec = find_term(zpp, "hpZ all-gathers inside 8");
  ASSERT_NE(sec, nullptr);
  EXPECT_EQ(sec->where, "node");
  const ExplainTerm* hop1 = find_term(zpp, "qgZ hop 1 all-to-all over 8");
  const ExplainTerm* hop2 = find_term(zpp, "qgZ hop 2 all-to-all over 4");
  ASSERT_TRUE(hop1 && hop2);
  EXPECT_EQ(hop1->where, "node");
  EXPECT_EQ(hop2->where, "network");
  EXPECT_NE(find_term(zpp, "qwZ quantize"), nullptr);
  EXPECT_NE(find_term(zpp, "qgZ quantize"), nullptr);
  // On two levels "3-level" has no pair level: it resolves to zero++'s knobs.
  const Prediction three = predict(m, s, zero3(32, ZeroPP::kThreeLevel), o);
  EXPECT_EQ(three.layout.hpz, 8);
  EXPECT_EQ(three.layout.hierarchy, std::vector<int>{8});
  EXPECT_DOUBLE_EQ(three.step_time_s, zpp.step_time_s);
  // Less on the wire, less exposed time (no overlap here).
  EXPECT_LT(zpp.time.dp_exposed, z3.time.dp_exposed);
}

TEST(PlanZeroPP, BytesPerLevelThreeLevel) {
  const System s = three_level();
  const ModelShape m = small_model();
  const Options o = opts(32);
  const double psi = stage_params_per_rank(m, zero3(32, ZeroPP::kNone), 0);
  const double M = 2 * psi, Y = psi * (0.5 + 4 / kG), W = psi * (1 + 4 / kG);
  const double g = zero3_gathers_per_micro_batch(4, DataParallelConfig{}.prefetch);
  const Prediction z3 = predict(m, s, zero3(32, ZeroPP::kNone), o);
  const Prediction zpp = predict(m, s, zero3(32, ZeroPP::kZeroPP), o);
  const Prediction three = predict(m, s, zero3(32, ZeroPP::kThreeLevel), o);
  EXPECT_EQ(three.layout.hpz, 2);
  EXPECT_EQ(three.layout.hierarchy, (std::vector<int>{2, 8}));
  EXPECT_EQ(zpp.layout.hpz, 8);
  // A ring over 32 ranks at stride 1: per device 31/32 of the buffer on the pair level, /2 on
  // the node level, /8 across nodes.
  const double ring = 31.0 / 32;
  EXPECT_NEAR(level(z3, "network"), (1 + g) * ring * M / 8, 1e-6 * M);
  EXPECT_NEAR(level(z3, "node"), (1 + g) * ring * M / 2, 1e-6 * M);
  EXPECT_NEAR(level(z3, "pair"), (1 + g) * ring * M, 1e-6 * M);
  // zero++: forward int8 gather; hpZ rings over 8 (pair 7/8 M, node 7/8 M / 2); qgZ hop 1
  // all-to-all over 8 (pair 7/8 Y, node 6/8 Y), hop 2 over the 4 nodes (3/4 Y/8 across).
  EXPECT_NEAR(level(zpp, "pair"), ring * W + (g - 1) * 7.0 / 8 * M + 7.0 / 8 * Y, 1e-6 * M);
  EXPECT_NEAR(level(zpp, "node"), ring * W / 2 + (g - 1) * 7.0 / 16 * M + 6.0 / 8 * Y, 1e-6 * M);
  EXPECT_NEAR(level(zpp, "network"), ring * W / 8 + 3.0 / 4 * Y / 8, 1e-6 * M);
  // 3-level: hpZ rings inside the pair (1/2 M each, pair only); qgZ hop 1 over the pair (1/2 Y),
  // hop 2 over the 4 pairs of a node (3/4 of Y/2 on the node level), hop 3 across nodes (3/4 Y/8).
  EXPECT_NEAR(level(three, "pair"), ring * W + (g - 1) * 0.5 * M + 0.5 * Y, 1e-6 * M);
  EXPECT_NEAR(level(three, "node"), ring * W / 2 + 3.0 / 4 * Y / 2, 1e-6 * M);
  EXPECT_NEAR(level(three, "network"), ring * W / 8 + 3.0 / 4 * Y / 8, 1e-6 * M);
  EXPECT_DOUBLE_EQ(level(three, "network"), level(zpp, "network"));
  const ExplainTerm* sec = find_term(three, "hpZ all-gathers inside 2");
  ASSERT_NE(sec, nullptr);
  EXPECT_EQ(sec->where, "pair");
  const ExplainTerm* hop2 = find_term(three, "qgZ hop 2 all-to-all over 4");
  const ExplainTerm* hop3 = find_term(three, "qgZ hop 3 all-to-all over 4");
  ASSERT_TRUE(hop2 && hop3);
  EXPECT_EQ(hop2->where, "node");
  EXPECT_EQ(hop3->where, "network");
}

TEST(PlanZeroPP, HpzMemoryAndWires) {
  const ModelShape m = small_model();
  MemoryOptions mo;
  mo.precision = Precision::kBf16;
  mo.global_batch = 32;
  Layout plain = zero3(32, ZeroPP::kNone);
  const double psi = stage_params_per_rank(m, plain, 0);
  const MemoryBreakdown a = stage_memory(m, plain, mo, 0);
  for (int alpha : {2, 8}) {
    Layout h = plain;
    h.zeropp = ZeroPP::kCustom;
    h.hpz = alpha;
    const MemoryBreakdown b = stage_memory(m, h, mo, 0);
    EXPECT_DOUBLE_EQ(b.hpz_secondary, 2 * psi / alpha) << alpha;  // 2 Psi / alpha in 16 bits
    EXPECT_DOUBLE_EQ(b.params - a.params, 2 * psi / alpha) << alpha;
    EXPECT_DOUBLE_EQ(b.comm, a.comm);
  }
  // qwZ: the two gathered layers' int8 wires; qgZ: a layer's int4 send + receive and the first
  // hop's fp32 partial sum.
  const GptDescription d = GptDescription(part_spec(m.config(), m.seq, plain, StageSpec{0, 4, true, true}));
  const double layer = static_cast<double>(d.rank_params().layer);
  Layout q = plain;
  q.zeropp = ZeroPP::kCustom;
  q.qwz = true;
  EXPECT_NEAR(stage_memory(m, q, mo, 0).comm - a.comm, 2 * layer * (1 + 4 / kG), 1e-6);
  q.qwz = false;
  q.qgz = true;
  q.hierarchy = {8};
  EXPECT_NEAR(stage_memory(m, q, mo, 0).comm - a.comm, layer * (2 * (0.5 + 4 / kG) + 4.0 / 8), 1e-6);
}

TEST(PlanZeroPP, HierarchyFromTheSystem) {
  const System f = load_system(std::string(WEFT_SOURCE_DIR) + "/systems/frontier.toml");
  Layout l = zero3(384, ZeroPP::kNone);
  EXPECT_EQ(dp_hierarchy(f, l), (std::vector<int>{2, 8}));
  l.zeropp = ZeroPP::kZeroPP;
  Layout r = resolve_zeropp(l, f);
  EXPECT_TRUE(r.qwz && r.qgz);
  EXPECT_EQ(r.hpz, 8);
  EXPECT_EQ(r.hierarchy, std::vector<int>{8});
  l.zeropp = ZeroPP::kThreeLevel;
  r = resolve_zeropp(l, f);
  EXPECT_EQ(r.hpz, 2);
  EXPECT_EQ(r.hierarchy, (std::vector<int>{2, 8}));
  EXPECT_NE(r.describe().find("3-level(qwz hpz 2 qgz 2,8)"), std::string::npos) << r.describe();
  // tp 2 innermost: the card holds one dp rank (dropped), the node 4.
  Layout t = zero3(192, ZeroPP::kThreeLevel);
  t.tp = 2;
  const std::vector<DpLevel> lv = dp_levels(f, t);
  ASSERT_GE(lv.size(), 2u);
  EXPECT_EQ(lv[0].dp_ranks, 1);
  EXPECT_EQ(lv[0].dropped, "1 dp peer");
  EXPECT_EQ(lv[1].dp_ranks, 4);
  r = resolve_zeropp(t, f);
  EXPECT_EQ(r.hpz, 4);
  EXPECT_EQ(r.hierarchy, std::vector<int>{4});
  // dp inside one node: the node is the whole group; zero++'s qgZ is one flat hop.
  Layout n = zero3(8, ZeroPP::kZeroPP);
  r = resolve_zeropp(n, f);
  EXPECT_EQ(r.hpz, 8);
  EXPECT_TRUE(r.hierarchy.empty());
}

TEST(PlanZeroPP, Refusals) {
  Layout l = zero3(8, ZeroPP::kCustom);
  l.hpz = 3;
  EXPECT_NE(zeropp_error(l).find("hpz 3 does not divide dp 8"), std::string::npos);
  l.hpz = 1;
  l.qwz = true;
  l.zero = 1;
  EXPECT_NE(zeropp_error(l).find("needs zero 3"), std::string::npos);
  EXPECT_NE(zeropp_error(l).find("got zero 1"), std::string::npos);
  l.zero = 3;
  l.qgz = true;
  l.hierarchy = {3};
  EXPECT_NE(zeropp_error(l).find("hierarchy [3]"), std::string::npos);
  l.hierarchy = {4, 2};
  EXPECT_FALSE(zeropp_error(l).empty());
  l.hierarchy = {2, 4};
  EXPECT_EQ(zeropp_error(l), "");
  const System s = two_level();
  Layout bad = zero3(8, ZeroPP::kCustom);
  bad.hpz = 3;
  EXPECT_THROW(predict(small_model(), s, bad, opts(8)), InputError);
}

TEST(PlanZeroPP, SearchTriesThePresets) {
  const System f = load_system(std::string(WEFT_SOURCE_DIR) + "/systems/frontier.toml");
  const ModelShape m = ModelShape::from_config(model_preset("gpt-20b"));
  EXPECT_NEAR(m.total_params(), 20.3e9, 0.1e9);
  Options o = Options::from_system(f, Precision::kFp16, 96);
  Pins pins;
  pins.tp = 1, pins.pp = 1, pins.zero = 3, pins.micro_batch = 1;
  const SearchResult r = search_layouts(m, f, 96, o, pins, 10);
  ASSERT_FALSE(r.top.empty());
  std::set<std::string> seen;
  for (const Prediction& p : r.top) seen.insert(zeropp_name(p.layout.zeropp));
  EXPECT_TRUE(seen.count("none") && seen.count("zero++") && seen.count("3-level")) << r.top.front().layout.describe();
  pins.zeropp = ZeroPP::kThreeLevel;
  pins.recompute = Recompute::kFull;
  pins.dp_replicate = 1;  // plain dp (the search would try HSDP splits of dp 96 too)
  const SearchResult one = search_layouts(m, f, 96, o, pins, 10);
  ASSERT_EQ(one.top.size(), 1u);
  EXPECT_EQ(one.top[0].layout.hpz, 2);
}

class PlanZeroPPCli : public ::testing::Test {
 protected:
  void SetUp() override { tmp = std::make_unique<test::TempDir>("planzpp"); }
  test::RunResult weft(const std::string& args) { return test::run_weft(args, *tmp / fmt::format("cmd{}", n++)); }
  std::unique_ptr<test::TempDir> tmp;
  int n = 0;
};

void expect_refused(const test::RunResult& r, const std::vector<std::string>& fragments) {
  EXPECT_EQ(r.code, 2) << "stderr: " << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  for (const auto& f : fragments) EXPECT_NE(r.err.find(f), std::string::npos) << "missing '" << f << "' in: " << r.err;
}

TEST_F(PlanZeroPPCli, RefusalsExitTwo) {
  const std::string base = "plan --model gpt-20b --system systems/frontier.toml --global-batch 48 --precision fp16 ";
  expect_refused(weft(base + "--gpus 48 --tp 1 --pp 1 --zero 3 --hpz 5"), {"--hpz 5", "hpz 5 does not divide dp 48"});
  expect_refused(weft(base + "--gpus 48 --tp 1 --pp 1 --zero 1 --qwz"), {"--qwz", "needs zero 3", "got zero 1"});
  expect_refused(weft(base + "--gpus 48 --tp 1 --pp 1 --zero 2 --zeropp zero++"), {"--zeropp zero++", "needs zero 3"});
  expect_refused(weft(base + "--gpus 48 --zeropp best"), {"unknown ZeRO++ preset 'best'"});
  expect_refused(weft(base + "--gpus 48 --tp 1 --pp 1 --zero 3 --qgz --hierarchy 5"), {"--hierarchy 5", "hierarchy [5]"});
}

TEST_F(PlanZeroPPCli, ExplainListsEachTermWithItsLevel) {
  const test::RunResult r =
      weft("plan --model gpt-20b --system systems/frontier.toml --gpus 96 --global-batch 96 --precision fp16 --tp 1 "
           "--pp 1 --micro-batch 1 --zero 3 --zeropp 3-level --explain --format json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j[0]["zeropp"]["preset"], "3-level");
  EXPECT_EQ(j[0]["zeropp"]["hpz"], 2);
  EXPECT_TRUE(j[0]["zeropp"]["qwz"].get<bool>());
  EXPECT_EQ(j[0]["zeropp"]["hierarchy"], (std::vector<int>{2, 8}));
  EXPECT_GT(j[0]["memory_bytes"]["hpz_secondary"].get<double>(), 10e9);
  std::map<std::string, std::string> where;
  for (const auto& t : j[0]["explain"]["terms"]) where[t["name"].get<std::string>()] = t["where"].get<std::string>();
  EXPECT_EQ(where["forward all-gathers, int8 + scales (qwZ)"], "group");
  EXPECT_EQ(where["hpZ all-gathers inside 2 dp ranks"], "card");
  EXPECT_EQ(where["qgZ hop 1 all-to-all over 2 dp ranks"], "card");
  EXPECT_EQ(where["qgZ hop 2 all-to-all over 4 dp ranks"], "node");
  EXPECT_EQ(where["qgZ hop 3 all-to-all over 12 dp ranks"], "group");
  for (const char* k : {"card", "node", "group"}) EXPECT_TRUE(j[0]["explain"]["dp_bytes_per_device"].contains(k)) << k;
  const test::RunResult t =
      weft("plan --model gpt-20b --system systems/frontier.toml --gpus 96 --global-batch 96 --precision fp16 --tp 1 "
           "--pp 1 --micro-batch 1 --zero 3 --zeropp zero++ --explain");
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_NE(t.out.find("zero++(qwz hpz 8 qgz 8)"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("dp hierarchy"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("dp bytes per device per step by link level"), std::string::npos) << t.out;
}

}  // namespace
}  // namespace weft::plan
