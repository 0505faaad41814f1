// The planner's per-shape compute and scale terms on closed-form cases: one product's wave
// quantisation and small-k loss, the expected maximum of N normal draws, a ring's and a
// tree's latency terms, stragglers, per-step overheads and the bubble factor in a step.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "core/error.h"
#include "plan/kernel_model.h"
#include "plan/plan_test_util.h"
#include "plan/predict.h"
#include "plan/scale_model.h"
#include "test_util.h"

namespace weft::plan {
namespace {

// A GPU-like device: 100 compute units, one 128 x 128 tile at full rate, 1 PFLOP/s.
Device tiled_device() {
  Device d;
  d.peak_flops_16 = d.peak_flops_32 = 1e15;
  d.memory_bytes = 1e11;
  d.memory_bandwidth = 1e14;
  d.matmul_efficiency = 0.8;
  d.compute_units = 100;
  d.gemm_tiles = {GemmTile{128, 128, 1.0}};
  return d;
}

TEST(PlanTerms, WaveFraction) {
  EXPECT_DOUBLE_EQ(wave_fraction(100, 100), 1.0);
  EXPECT_DOUBLE_EQ(wave_fraction(101, 100), 101.0 / 200.0);  // a second wave of one tile
  EXPECT_DOUBLE_EQ(wave_fraction(50, 100), 0.5);
  EXPECT_DOUBLE_EQ(wave_fraction(300, 100), 1.0);
  EXPECT_DOUBLE_EQ(wave_fraction(301, 100), 301.0 / 400.0);
}

// (1280 x 1280) output = 10 x 10 = 100 tiles: exactly one wave; one more row of tiles (m =
// 1408: 11 x 10 = 110 tiles) needs a second wave that is 10% full.
TEST(PlanTerms, OneGemmWaveQuantisation) {
  const Device d = tiled_device();
  const GemmShape full{1280, 1280, 4096};
  EXPECT_DOUBLE_EQ(gemm_fraction(d, full), 0.8);
  const GemmShape spill{1408, 1280, 4096};
  EXPECT_DOUBLE_EQ(gemm_fraction(d, spill), 0.8 * 110.0 / 200.0);
  // Time = FLOPs / (peak x fraction) + latency (compute-bound: 2 m n k >> bytes).
  EXPECT_DOUBLE_EQ(gemm_time(d, Precision::kBf16, full, 2), full.flops() / (1e15 * 0.8));
  // A partial edge tile does work for its padding: m = 1200 still needs 10 x 10 tiles, and the
  // useful share of the tiled output is 1200 / 1280.
  EXPECT_DOUBLE_EQ(gemm_fraction(d, GemmShape{1200, 1280, 4096}), 0.8 * 1200.0 / 1280.0);
}

TEST(PlanTerms, SmallKAndAlignment) {
  Device d = tiled_device();
  d.gemm_k_overhead = 128;
  EXPECT_DOUBLE_EQ(gemm_fraction(d, GemmShape{1280, 1280, 128}), 0.8 * 0.5);
  EXPECT_DOUBLE_EQ(gemm_fraction(d, GemmShape{1280, 1280, 1152}), 0.8 * 0.9);
  d.gemm_k_overhead = 0;
  d.gemm_align = 8;
  d.gemm_misaligned_fraction = 0.5;
  EXPECT_DOUBLE_EQ(gemm_fraction(d, GemmShape{1280, 1280, 4100}), 0.8 * 0.5);  // k % 8 != 0
  // A smaller tile wins on a small output: 640 x 640 is 25 tiles of 128 (a quarter wave) or
  // 100 tiles of 64 at 0.7 each.
  d = tiled_device();
  d.gemm_tiles = {GemmTile{128, 128, 1.0}, GemmTile{64, 64, 0.7}};
  EXPECT_DOUBLE_EQ(gemm_fraction(d, GemmShape{640, 640, 4096}), 0.8 * 0.7);
  // Thin products (a matrix-vector product) are memory-bound on a device with an HBM-like
  // bandwidth: the roofline's other roof.
  d.memory_bandwidth = 1e12;
  const GemmShape thin{1, 8192, 8192};
  EXPECT_DOUBLE_EQ(gemm_time(d, Precision::kBf16, thin, 2), thin.bytes(2) / 1e12);
}

// A device without compute units (a CPU from `weft calibrate`) keeps the measured curve by
// FLOPs per call: the backward's two products (their own shapes, the same FLOPs and bytes)
// cost exactly twice the forward, as before the per-shape model, so weft's CPU predictions
// (bench/plan_accuracy.sh) do not move.
TEST(PlanTerms, CpuDevicesKeepTheCurve) {
  Device d;
  d.peak_flops_16 = d.peak_flops_32 = 2e11;
  d.memory_bandwidth = 4e10;
  d.memory_bytes = 1e10;
  d.matmul_curve = {{1e6, 0.3}, {1e9, 0.9}};
  for (const GemmShape g : {GemmShape{256, 768, 2304}, GemmShape{2048, 50304, 768}, GemmShape{64, 64, 256, 12}}) {
    const double fwd = gemm_time(d, Precision::kFp32, g, 4);
    EXPECT_DOUBLE_EQ(fwd, matmul_time(d, Precision::kFp32, g.flops(), g.bytes(4)));
    const double bwd = gemm_time(d, Precision::kFp32, GemmShape{g.m, g.k, g.n, g.batch}, 4) +
                       gemm_time(d, Precision::kFp32, GemmShape{g.k, g.n, g.m, g.batch}, 4);
    EXPECT_DOUBLE_EQ(bwd, 2 * fwd);
  }
}

// E[max of n standard normals]: 1/sqrt(pi) for 2, 3/(2 sqrt(pi)) for 3; tabulated values
// for 5 (1.16296) and 1000 (3.24144) (Harter 1961; Teichroew 1956).
TEST(PlanTerms, ExpectedMaxOfNormals) {
  EXPECT_EQ(expected_max_normal(1), 0.0);
  EXPECT_NEAR(expected_max_normal(2), 1 / std::sqrt(M_PI), 1e-7);
  EXPECT_NEAR(expected_max_normal(3), 1.5 / std::sqrt(M_PI), 1e-7);
  EXPECT_NEAR(expected_max_normal(5), 1.16296, 1e-5);
  EXPECT_NEAR(expected_max_normal(1000), 3.24144, 1e-4);
  double prev = 0;
  for (int64_t n : {2, 8, 64, 512, 4096, 75776}) {
    const double v = expected_max_normal(n);
    EXPECT_GT(v, prev) << n;
    EXPECT_LT(v, std::sqrt(2 * std::log(static_cast<double>(n))) + 1e-9) << n;  // the classic bound
    prev = v;
  }
  EXPECT_NEAR(straggler_time(100, 0.02, 2), 100 * 0.02 / std::sqrt(M_PI), 1e-9);
  EXPECT_EQ(straggler_time(100, 0.02, 1), 0.0);
}

using plan_test::one_level;
using plan_test::grid;

// A ring all-reduce pays 2(n-1) latencies; a double binary tree 2 ceil(log2 n): the tree wins
// on small messages over many ranks, the ring on large ones (its bandwidth term is 2(n-1)/n of
// the bytes against the tree's 2).
TEST(PlanTerms, RingAndTreeLatency) {
  const System s = one_level(10e9, 5e-6);
  const CollectiveCost small = collective_cost(s, Collective::kAllReduce, 1024, 1, 8);
  EXPECT_TRUE(small.tree);
  EXPECT_NEAR(small.latency_s, 2 * 10 * 5e-6, 1e-15);
  EXPECT_NEAR(small.seconds, 2 * 10 * 5e-6 + 2 * 8 / 10e9, 1e-15);
  const CollectiveCost big = collective_cost(s, Collective::kAllReduce, 8, 1, 1e9);
  EXPECT_FALSE(big.tree);
  EXPECT_NEAR(big.seconds, 2 * 7 * 5e-6 + 2.0 * 7 / 8 * 1e9 / 10e9, 1e-12);
  // Over 1024 ranks the ring's 2046 latencies cost more than the tree's extra 1/1024 of bytes.
  const CollectiveCost wide = collective_cost(s, Collective::kAllReduce, 1024, 1, 1e9);
  EXPECT_TRUE(wide.tree);
  EXPECT_NEAR(wide.seconds, 2 * 10 * 5e-6 + 2 * 1e9 / 10e9, 1e-12);
  // Reduce-scatter and all-gather stay rings: n - 1 latencies.
  EXPECT_NEAR(collective_time(s, Collective::kReduceScatter, 1024, 1, 8), 1023 * 5e-6 + 1023.0 / 1024 * 8 / 10e9, 1e-15);
}

// A two-level machine whose top level has less bandwidth per device than the level under it
// (a dragonfly's global links): a group that spans units of the lower level runs at the taper.
TEST(PlanTerms, GlobalTaper) {
  System s = one_level(10e9, 5e-6);
  s.levels = {LinkLevel{"group", 64, 10e9, 5e-6, {}}, LinkLevel{"global", 0, 2.5e9, 5e-6, {}}};
  s.validate();
  // 8 ranks 8 apart inside one group of 64: the group's 10 GB/s.
  EXPECT_EQ(collective_cost(s, Collective::kAllGather, 8, 8, 1e9).level_name(), "group");
  // 8 ranks 64 apart: one per group, every hop on a global link.
  const CollectiveCost g = collective_cost(s, Collective::kAllGather, 8, 64, 1e9);
  EXPECT_EQ(g.level_name(), "global");
  EXPECT_NEAR(g.bandwidth_s, 7.0 / 8 * 1e9 / 2.5e9, 1e-12);
}

// The step adds the stragglers, the fixed overhead and the world all-reduces, and the bubble
// factor scales only the fill and drain.
TEST(PlanTerms, ScaleTermsInAStep) {
  System s = load_system(std::string(WEFT_SOURCE_DIR) + "/systems/dgx-a100-80gb.toml");
  const ModelShape m = ModelShape::from_config(model_preset("gpt2-350m"));
  const Layout l = grid(2, 2, 4);
  Options o = Options::from_system(s, Precision::kBf16, 64);
  s.defaults.jitter = 0;
  s.defaults.step_overhead = 0;
  s.defaults.world_allreduces = 0;
  s.defaults.bubble_factor = 1;
  const Prediction base = predict(m, s, l, o);
  EXPECT_EQ(base.time.stragglers, 0.0);
  EXPECT_EQ(base.time.overhead, 0.0);
  s.defaults.jitter = 0.02;
  s.defaults.step_overhead = 0.25;
  s.defaults.world_allreduces = 3;
  const Prediction p = predict(m, s, l, o);
  EXPECT_DOUBLE_EQ(p.time.stragglers, (p.time.compute + p.time.tp_comm) * 0.02 * expected_max_normal(16));
  EXPECT_DOUBLE_EQ(p.time.overhead, 0.25 + 3 * collective_time(s, Collective::kAllReduce, 16, 1, 8));
  EXPECT_NEAR(p.step_time_s - base.step_time_s, p.time.stragglers + p.time.overhead, 1e-12);
  s.defaults.jitter = 0;
  s.defaults.step_overhead = 0;
  s.defaults.world_allreduces = 0;
  s.defaults.bubble_factor = 3;
  o.explain = true;
  const Prediction b = predict(m, s, l, o);
  // 1F1B, p = 2: the fill + drain is the other stage's time (sum - max), tripled; the
  // transfers on the critical path stay.
  double fill = -1;
  for (const ExplainTerm& t : b.explain) {
    if (t.name == "fill + drain (bubble)") fill = t.seconds;
  }
  ASSERT_GT(fill, 0);
  EXPECT_NEAR(b.time.pp_bubble - base.time.pp_bubble, 2 * fill / 3, 1e-9 * fill);
}

// A measured sync_jitter curve: one synchronisation of N ranks after a segment s waits
// cv(s) s E[max of N] (cv interpolated in log s, clamped at the curve's ends).
TEST(PlanTerms, SyncWaitFromTheMeasuredCurve) {
  const std::vector<std::pair<double, double>> curve = {{1e-3, 0.10}, {1e-1, 0.02}};
  EXPECT_NEAR(sync_wait(curve, 1e-2, 2), 0.06 * 1e-2 / std::sqrt(M_PI), 1e-15);  // the midpoint in log s
  EXPECT_NEAR(sync_wait(curve, 1e-5, 3), 0.10 * 1e-5 * 1.5 / std::sqrt(M_PI), 1e-18);  // clamped: short end
  EXPECT_NEAR(sync_wait(curve, 10.0, 5), 0.02 * 10.0 * expected_max_normal(5), 1e-12);  // clamped: long end
  EXPECT_EQ(sync_wait(curve, 1e-2, 1), 0.0);
  EXPECT_EQ(sync_wait(curve, 0.0, 4), 0.0);
  EXPECT_EQ(sync_wait({}, 1e-2, 4), 0.0);
}

// The kept curve is the closest non-increasing one in weighted least squares: a point above its
// shorter neighbour is pooled with it in proportion to their samples; a non-increasing curve
// is kept as measured.
TEST(PlanTerms, SyncJitterCurveIsKeptNonIncreasing) {
  const std::vector<std::pair<double, double>> down = {{1e-3, 0.2}, {1e-2, 0.1}, {1e-1, 0.05}};
  EXPECT_EQ(non_increasing_fit(down, {100, 20, 8}), down);
  const auto up = non_increasing_fit({{1e-3, 0.10}, {1e-2, 0.14}, {1e-1, 0.05}, {5e-1, 0.25}}, {300, 100, 15, 5});
  ASSERT_EQ(up.size(), 4u);
  EXPECT_NEAR(up[0].second, (0.10 * 300 + 0.14 * 100) / 400, 1e-12);
  EXPECT_NEAR(up[1].second, up[0].second, 1e-12);
  EXPECT_NEAR(up[2].second, (0.05 * 15 + 0.25 * 5) / 20, 1e-12);
  EXPECT_NEAR(up[3].second, up[2].second, 1e-12);
  EXPECT_EQ(up[3].first, 5e-1);
  for (size_t i = 1; i < up.size(); ++i) EXPECT_LE(up[i].second, up[i - 1].second);
  // A violation that reaches back: the pooled pair rises above the first point, so all three pool.
  const auto all = non_increasing_fit({{1e-3, 0.10}, {1e-2, 0.08}, {1e-1, 0.20}}, {1, 1, 1});
  for (const auto& p : all) EXPECT_NEAR(p.second, (0.10 + 0.08 + 0.20) / 3, 1e-12);
}

// With a measured curve the planner prices each synchronisation of the step: a constant cv
// gives the one-sync formula whatever the layout synchronises (the segments add up to the
// step); a cv that is larger for short segments makes a tensor-parallel layout, which
// synchronises tens of times a micro-batch, wait more than a data-parallel one of the same
// busy time; the pipeline's receives count as pairs.
TEST(PlanTerms, StragglersFromMeasuredSynchronisations) {
  System s = load_system(std::string(WEFT_SOURCE_DIR) + "/systems/dgx-a100-80gb.toml");
  const ModelShape m = ModelShape::from_config(model_preset("gpt2-350m"));
  Options o = Options::from_system(s, Precision::kBf16, 16);
  s.defaults.jitter = 0;
  s.defaults.sync_jitter = {{1e-4, 0.05}, {10.0, 0.05}};
  for (const Layout& l : {grid(8, 1, 1), grid(1, 1, 8), grid(1, 8, 1)}) {
    const Prediction p = predict(m, s, l, o);
    const double busy = p.time.compute + p.time.tp_comm;
    if (l.pp == 1) {
      EXPECT_NEAR(p.time.stragglers, 0.05 * busy * expected_max_normal(8), 1e-9 * busy) << l.tp << " " << l.dp;
    } else {
      // A middle stage receives twice a micro-batch (activations, gradients): 16 x 2 pairs, then the close.
      const double seg = busy / 33;
      EXPECT_NEAR(p.time.stragglers, 32 * 0.05 * seg * expected_max_normal(2) + 0.05 * seg * expected_max_normal(8),
                  1e-9 * busy);
    }
  }
  s.defaults.sync_jitter = {{1e-4, 0.20}, {1e-1, 0.02}};
  const Prediction tp = predict(m, s, grid(8, 1, 1), o), dp = predict(m, s, grid(1, 1, 8), o);
  const double tp_busy = tp.time.compute + tp.time.tp_comm, dp_busy = dp.time.compute + dp.time.tp_comm;
  EXPECT_GT(tp.time.stragglers / tp_busy, 2 * dp.time.stragglers / dp_busy);
  EXPECT_NEAR(dp.time.stragglers, sync_wait(s.defaults.sync_jitter, dp_busy, 8), 1e-12);
  o.explain = true;
  bool named = false;
  for (const ExplainTerm& t : predict(m, s, grid(8, 1, 1), o).explain) {
    if (t.group == "stragglers") named = t.detail.find("measured sync_jitter") != std::string::npos;
  }
  EXPECT_TRUE(named);
  // A curve that does not increase, or a cv out of [0, 1), is refused with the point named.
  s.defaults.sync_jitter = {{1e-2, 0.05}, {1e-3, 0.05}};
  EXPECT_THROW(s.validate(), InputError);
  s.defaults.sync_jitter = {{1e-2, 1.5}};
  try {
    s.validate();
    FAIL() << "a cv of 1.5 was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("sync_jitter point 0 is [0.01, 1.5]"), std::string::npos) << e.what();
  }
}

// Interleaved transfers: hidden behind other chunks' work (weft, Megatron with
// --overlap-p2p-communication), or, without overlap, a round trip per chunk and micro-batch in
// the steady state: 2 v (m - 1) more transfers on the critical path.
TEST(PlanTerms, InterleavedTransfersWithoutOverlap) {
  System s = load_system(std::string(WEFT_SOURCE_DIR) + "/systems/dgx-a100-80gb.toml");
  const ModelShape m = ModelShape::from_config(model_preset("gpt2-350m"));
  Layout l = grid(2, 4, 1);
  l.schedule = PipeSchedule::kInterleaved;
  l.virtual_stages = 2;
  s.defaults.pp_p2p_overlap = true;
  const Options hidden_o = Options::from_system(s, Precision::kBf16, 32);
  const Prediction hidden = predict(m, s, l, hidden_o);
  s.defaults.pp_p2p_overlap = false;
  const Prediction exposed = predict(m, s, l, Options::from_system(s, Precision::kBf16, 32));
  ASSERT_GT(hidden.t_p2p, 0);
  EXPECT_NEAR(exposed.time.pp_bubble - hidden.time.pp_bubble, 2.0 * 2 * (32 - 1) * hidden.t_p2p, 1e-12);
  EXPECT_DOUBLE_EQ(exposed.time.compute, hidden.time.compute);
}

TEST(PlanTerms, ExplainAddsUpToTheStep) {
  const System s = load_system(std::string(WEFT_SOURCE_DIR) + "/systems/frontier.toml");
  const ModelShape m = ModelShape::from_config(model_preset("gpt-175b"));
  Layout l;
  l.tp = 4;
  l.pp = 16;
  l.dp = 2;
  l.zero = 1;
  l.recompute = Recompute::kFull;
  Options o = Options::from_system(s, Precision::kFp16, 640);
  o.explain = true;
  const Prediction p = predict(m, s, l, o);
  double sum = 0;
  for (const ExplainTerm& t : p.explain) sum += t.seconds;
  EXPECT_NEAR(sum, p.step_time_s, 1e-9 * p.step_time_s);
  o.explain = false;
  EXPECT_TRUE(predict(m, s, l, o).explain.empty());
}

TEST(PlanTerms, SystemKeysRoundTripAndRefuseBadValues) {
  test::TempDir tmp("plan-terms");
  System s = load_system(std::string(WEFT_SOURCE_DIR) + "/systems/dgx-h100.toml");
  s.device.compute_units = 132;
  s.device.gemm_tiles = {GemmTile{256, 128, 1.0}, GemmTile{128, 64, 0.8}};
  s.device.gemm_k_overhead = 96;
  s.device.native_bf16 = true;
  s.defaults.jitter = 0.01;
  s.defaults.bubble_factor = 1.5;
  const std::string path = tmp / "s.toml";
  std::ofstream(path) << system_to_toml(s);
  const System r = load_system(path);
  EXPECT_EQ(r.device.compute_units, 132);
  ASSERT_EQ(r.device.gemm_tiles.size(), 2u);
  EXPECT_EQ(r.device.gemm_tiles[1].n, 64);
  EXPECT_DOUBLE_EQ(r.device.gemm_k_overhead, 96);
  EXPECT_TRUE(r.device.native_bf16);
  EXPECT_DOUBLE_EQ(r.defaults.jitter, 0.01);
  EXPECT_DOUBLE_EQ(r.defaults.bubble_factor, 1.5);
  auto refused = [&](const std::string& from, const std::string& to, const std::string& fragment) {
    std::string text = system_to_toml(s);
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    const std::string bad = tmp / "bad.toml";
    std::ofstream(bad) << text;
    try {
      load_system(bad);
      ADD_FAILURE() << "accepted " << to;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  refused("jitter = 0.01", "jitter = 1.5", "jitter");
  refused("bubble_factor = 1.5", "bubble_factor = 0.5", "bubble_factor");
  refused("compute_units = 132", "compute_units = 13.5", "compute_units");
  refused("gemm_tiles = [[256, 128, 1]", "gemm_tiles = [[256, 128, 1.5]", "gemm_tiles");
  refused("world_allreduces = 0", "world_allreduces = -1", "world_allreduces");
  refused("tp_comm = \"megatron\"", "tp_comm = \"nccl\"", "tp_comm");
  refused("native_bf16 = true", "native_bf16 = 1", "native_bf16");
  // A file without tp_comm under memory_model `model`, loaded.
  const auto without_tp_comm = [&](const std::string& model) {
    std::string text = system_to_toml(s);
    text.erase(text.find("tp_comm = \"megatron\"\n"), std::string("tp_comm = \"megatron\"\n").size());
    text.replace(text.find("memory_model = \"megatron\""), std::string("memory_model = \"megatron\"").size(),
                 "memory_model = \"" + model + "\"");
    const std::string path = tmp / (model + ".toml");
    std::ofstream(path) << text;
    return load_system(path);
  };
  // A file `weft calibrate` wrote before tp_comm existed (memory_model "weft", no tp_comm)
  // keeps weft's own tensor-parallel calls.
  EXPECT_EQ(without_tp_comm("weft").defaults.tp_comm, "weft");
  // memory_model "fsdp" (the FSDP stack files) round-trips and keeps Megatron's tensor-parallel
  // calls; an unknown model is refused with the three names.
  const System f = without_tp_comm("fsdp");
  EXPECT_EQ(f.defaults.memory_model, "fsdp");
  EXPECT_EQ(f.defaults.tp_comm, "megatron");
  EXPECT_NE(system_to_toml(f).find("memory_model = \"fsdp\""), std::string::npos);
  refused("memory_model = \"megatron\"", "memory_model = \"deepspeed\"", "expected 'megatron', 'fsdp' or 'weft'");
}

}  // namespace
}  // namespace weft::plan
