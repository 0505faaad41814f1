// The planner's time model: alpha-beta collectives, the pipeline closed forms against the
// schedule simulator, and the seeds' Frontier cases (Dash et al. 2023) with the errors the
// model makes (printed; the tolerances are the and docs/planner.md's).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <utility>

#include "core/error.h"
#include "model/gpt/gpt_description.h"
#include "parallel/pp/schedule.h"
#include "plan/search.h"
#include "plan/plan_test_util.h"

namespace weft::plan {
namespace {

System frontier() { return load_system(std::string(WEFT_SOURCE_DIR) + "/systems/frontier.toml"); }

using plan_test::one_level;

// Ring collectives (Thakur et al. 2005): all-reduce 2(n-1) alpha + 2(n-1)/n S/beta.
TEST(PlanPredict, RingCollectives) {
  const System s = one_level(10e9, 5e-6);
  const double S = 1e8;
  for (int n : {2, 4, 8}) {
    EXPECT_NEAR(collective_time(s, Collective::kAllReduce, n, 1, S), 2 * (n - 1) * 5e-6 + 2.0 * (n - 1) / n * S / 10e9, 1e-12);
    EXPECT_NEAR(collective_time(s, Collective::kAllGather, n, 1, S), (n - 1) * 5e-6 + 1.0 * (n - 1) / n * S / 10e9, 1e-12);
  }
  EXPECT_NEAR(collective_time(s, Collective::kSendRecv, 2, 1, S), 5e-6 + S / 10e9, 1e-12);
  EXPECT_EQ(collective_time(s, Collective::kAllReduce, 1, 1, S), 0.0);
}

// Group placement on Frontier's levels: 2 GCDs per card (200 GB/s), 8 per node (50 GB/s),
// Slingshot 12.5 GB/s per GCD.
TEST(PlanPredict, HierarchyPlacement) {
  const System s = frontier();
  const double S = 1e9;
  const double ring2 = 2.0 * 1 / 2 * S, ring8 = 2.0 * 7 / 8 * S, ring4 = 2.0 * 3 / 4 * S;
  // Two GCDs of one card.
  EXPECT_NEAR(collective_time(s, Collective::kAllReduce, 2, 1, S), 2 * 5e-6 + ring2 / 200e9, 1e-9);
  // Four GCDs on two cards: the card-card crossing is shared by 2 members: 2 x 50 GB/s.
  EXPECT_NEAR(collective_time(s, Collective::kAllReduce, 4, 1, S), 6 * 5e-6 + ring4 / 100e9, 1e-9);
  // Eight GCDs of a node: 2 x 50 GB/s (card-card) is the bottleneck.
  EXPECT_NEAR(collective_time(s, Collective::kAllReduce, 8, 1, S), 14 * 5e-6 + ring8 / 100e9, 1e-9);
  // Eight ranks 8 apart: one per node, the network at 12.5 GB/s.
  EXPECT_NEAR(collective_time(s, Collective::kAllReduce, 8, 8, S), 14 * 10e-6 + ring8 / 12.5e9, 1e-9);
  // Sixteen ranks, 8 per node: the node's 8 members share the crossing: 8 x 12.5 GB/s.
  EXPECT_NEAR(collective_time(s, Collective::kAllReduce, 16, 1, S), 30 * 10e-6 + 2.0 * 15 / 16 * S / 100e9, 1e-9);
  Layout l;
  l.tp = 4;
  l.dp = 3;
  l.pp = 5;
  EXPECT_EQ(axis_stride(l, "tp"), 1);
  EXPECT_EQ(axis_stride(l, "dp"), 4);
  EXPECT_EQ(axis_stride(l, "pp"), 12);
  l.order = "pp-tp-dp";
  EXPECT_EQ(axis_stride(l, "dp"), 20);
  l.order = "tp-pp";
  EXPECT_THROW(axis_stride(l, "tp"), InputError);
}

// The closed forms against parallel/pp/schedule.h's dependency-driven simulator.
TEST(PlanPredict, PipelineClosedFormsMatchTheSimulator) {
  for (PipeSchedule s : {PipeSchedule::kGpipe, PipeSchedule::k1F1B, PipeSchedule::kInterleaved}) {
    for (int p : {2, 4, 8}) {
      for (int m : {8, 16, 32}) {
        for (int v : {1, 2, 4}) {
          if ((s == PipeSchedule::kInterleaved) != (v > 1)) continue;
          for (double p2p : {0.0, 0.05}) {
            const double tf = 1.0, tb = 2.0;
            const PipeSimResult sim = simulate_pipeline(s, p, m, v, tf, tb, p2p);
            const double model = pipeline_time(s, p, m, v, tf + tb, p * (tf + tb), p2p);
            // Exact without transfers (the bubble fractions of Narayanan et al. 2021); with
            // transfers the closed form is an upper bound within 2%.
            if (p2p == 0) {
              EXPECT_NEAR(model, sim.step_time, 1e-9 * sim.step_time)
                  << schedule_name(s) << " p " << p << " m " << m << " v " << v;
            } else {
              EXPECT_NEAR(model / sim.step_time, 1.0, 0.02)
                  << schedule_name(s) << " p " << p << " m " << m << " v " << v << " sim " << sim.step_time;
            }
          }
        }
      }
    }
  }
}

// Matrix products: roofline with the measured curve (log-interpolated, clamped).
TEST(PlanPredict, MatmulRoofline) {
  Device d;
  d.peak_flops_32 = d.peak_flops_16 = 100e9;
  d.memory_bandwidth = 10e9;
  d.matmul_efficiency = 0.5;
  EXPECT_DOUBLE_EQ(matmul_time(d, Precision::kFp32, 1e9, 1e3), 1e9 / 50e9);  // compute-bound
  EXPECT_DOUBLE_EQ(matmul_time(d, Precision::kFp32, 1e6, 1e9), 1e9 / 10e9);  // memory-bound
  d.matmul_curve = {{1e6, 0.2}, {1e8, 0.8}};
  EXPECT_DOUBLE_EQ(matmul_time(d, Precision::kFp32, 1e7, 0), 1e7 / (100e9 * 0.5));
  EXPECT_DOUBLE_EQ(matmul_time(d, Precision::kFp32, 1e9, 0), 1e9 / (100e9 * 0.8));
  EXPECT_DOUBLE_EQ(matmul_time(d, Precision::kFp32, 1e5, 0), 1e5 / (100e9 * 0.2));
}

// Megatron-DeepSpeed as Dash et al. ran it: fp16, full recompute (checkpoint-activations),
// non-interleaved 1F1B (DeepSpeed's pipeline engine), no sequence parallelism, ZeRO 0 or 1.
Prediction best_in_dash_space(const ModelShape& m, const System& sys, int64_t gpus, const Options& o, Pins pins = {}) {
  pins.recompute = Recompute::kFull;
  pins.schedule = PipeSchedule::k1F1B;
  pins.sequence_parallel = false;
  std::optional<Prediction> best;
  for (int z : {0, 1}) {
    pins.zero = z;
    const SearchResult r = search_layouts(m, sys, gpus, o, pins, 1);
    if (!r.top.empty() && (!best || r.top.front().step_time_s < best->step_time_s)) best = r.top.front();
  }
  EXPECT_TRUE(best.has_value());
  return *best;
}

Layout dash_layout(int tp, int pp, int dp) {
  Layout l;
  l.tp = tp;
  l.pp = pp;
  l.dp = dp;
  l.micro_batch = 1;
  l.zero = 1;
  l.recompute = Recompute::kFull;
  return l;
}

// Seeds 000/003/004 (Dash et al. 2023, Table VI): 175B on 128 GCDs, global batch 640: TP 4,
// PP 16, micro-batch 1 is the best found; 1T on 512 GCDs, batch 1600: TP 8, PP 64. Their
// throughput (hardware FLOPs, recompute included): 36.14% and 31.96% of peak.
TEST(PlanPredict, FrontierPublishedLayouts) {
  const System sys = frontier();
  struct Case {
    const char* model;
    int64_t gpus, batch;
    int tp, pp;
    double published_hfu;
  };
  for (const Case& c : {Case{"gpt-175b", 128, 640, 4, 16, 0.3614}, Case{"gpt-1t", 512, 1600, 8, 64, 0.3196}}) {
    const ModelShape m = ModelShape::from_config(model_preset(c.model));
    const Options o = Options::from_system(sys, Precision::kFp16, c.batch);
    const Prediction best = best_in_dash_space(m, sys, c.gpus, o);
    const Prediction pub = predict(m, sys, dash_layout(c.tp, c.pp, static_cast<int>(c.gpus / (c.tp * c.pp))), o);
    EXPECT_TRUE(pub.fits) << c.model << ": " << pub.memory.total / 1e9 << " GB";
    const double gap = pub.step_time_s / best.step_time_s - 1;
    const double err = pub.hfu / c.published_hfu - 1;
    std::printf("[ frontier ] %s on %lld GCDs: published layout %s %.4g s/step, best found %s %.4g s/step (+%.2f%%); "
                "HFU %.2f%% vs published %.2f%% (%+.1f%%), MFU %.2f%%\n",
                c.model, static_cast<long long>(c.gpus), pub.layout.describe().c_str(), pub.step_time_s,
                best.layout.describe().c_str(), best.step_time_s, 100 * gap, 100 * pub.hfu, 100 * c.published_hfu,
                100 * err, 100 * pub.mfu);
    EXPECT_LE(gap, 0.10) << c.model;  // the issue: within 10% of the best layout found
    // Issue 16: HFU within 2 points of the published (these are `fit` rows of
    // bench/planner_validation: the check guards the fitted constants).
    EXPECT_LE(std::abs(pub.hfu - c.published_hfu), 0.02) << c.model;
  }
  // 22B (38.38% published; the seeds do not give its layout): the best layout of the same
  // space on 64 GCDs at global batch 128 (the seeds' 22B pipeline sweep fixes batch 128).
  const ModelShape m = ModelShape::from_config(model_preset("gpt-22b"));
  const Options o = Options::from_system(sys, Precision::kFp16, 128);
  const Prediction best = best_in_dash_space(m, sys, 64, o);
  std::printf("[ frontier ] gpt-22b on 64 GCDs: best %s HFU %.2f%% vs published 38.38%% (%+.1f%%)\n",
              best.layout.describe().c_str(), 100 * best.hfu, 100 * (best.hfu / 0.3838 - 1));
  EXPECT_LE(std::abs(best.hfu / 0.3838 - 1), 0.20);
}

// Strong scaling (Dash et al. 2023 Fig. 13): 175B at global batch 8000 from 128 to 1024 GCDs
// (89.93% published), 1T at 8016 from 512 to 3072 (87.05%), the published layouts, dp grows.
// Weak scaling (Fig. 12): 100% for both.
TEST(PlanPredict, FrontierScaling) {
  const System sys = frontier();
  struct Case {
    const char* model;
    std::vector<int64_t> gpus;
    int64_t strong_batch, weak_batch;
    int tp, pp;
    double published;
  };
  for (const Case& c : {Case{"gpt-175b", {128, 256, 512, 1024}, 8000, 640, 4, 16, 0.8993},
                        Case{"gpt-1t", {512, 1024, 1536, 3072}, 8016, 1600, 8, 64, 0.8705}}) {
    const ModelShape m = ModelShape::from_config(model_preset(c.model));
    Pins pins;
    pins.tp = c.tp;
    pins.pp = c.pp;
    pins.micro_batch = 1;
    pins.zero = 1;
    pins.recompute = Recompute::kFull;
    pins.schedule = PipeSchedule::k1F1B;
    pins.sequence_parallel = false;
    const auto strong = scaling(m, sys, c.gpus, Options::from_system(sys, Precision::kFp16, c.strong_batch), pins, false);
    const auto weak = scaling(m, sys, c.gpus, Options::from_system(sys, Precision::kFp16, c.weak_batch), pins, true);
    ASSERT_TRUE(strong.back().found && weak.back().found);
    std::printf("[ frontier ] %s strong scaling to %lld GCDs: %.2f%% vs published %.2f%% (%+.2f points); weak %.2f%%\n",
                c.model, static_cast<long long>(c.gpus.back()), 100 * strong.back().efficiency, 100 * c.published,
                100 * (strong.back().efficiency - c.published), 100 * weak.back().efficiency);
    // Issue 16: within 2 points (fit rows: frontier.toml's bubble_factor and efficiency).
    EXPECT_LE(std::abs(strong.back().efficiency - c.published), 0.02) << c.model;
    EXPECT_NEAR(weak.back().efficiency, 1.0, 0.01) << c.model;
  }
}

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// A full search of 1T on `gpus` GCDs at `batch`: its result and the processor time its thread took (the
// search runs on one thread; its wall time, printed too, is that on an idle machine, and more
// while `ctest -j2` runs another test on the same 2 cores: a wall-time bound failed there once
// at stop 60 while the search alone took 0.49-0.86 s).
std::pair<SearchResult, double> timed_1t_search(int64_t gpus, int64_t batch) {
  const System sys = frontier();
  const ModelShape m = ModelShape::from_config(model_preset("gpt-1t"));
  const auto t0 = std::chrono::steady_clock::now();
  const double c0 = thread_cpu_seconds();
  SearchResult r = search_layouts(m, sys, gpus, Options::from_system(sys, Precision::kFp16, batch), Pins{}, 10);
  const double cpu = thread_cpu_seconds() - c0;
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ search ] gpt-1t on %lld GCDs, batch %lld: %lld layouts (%lld fit) in %.3f s of processor time, "
              "%.3f s wall\n",
              static_cast<long long>(gpus), static_cast<long long>(batch), static_cast<long long>(r.evaluated),
              static_cast<long long>(r.fitting), cpu, dt);
  return {std::move(r), cpu};
}

// The issue: a full search for 1T on 3072 GCDs in under 2 seconds.
TEST(PlanPredict, SearchSpeed1TOn3072) {
  const auto [r, dt] = timed_1t_search(3072, 9600);
  EXPECT_GT(r.evaluated, 10000);
  EXPECT_FALSE(r.top.empty());
  EXPECT_LT(dt, 2.0);
  for (size_t i = 1; i < r.top.size(); ++i) EXPECT_LE(r.top[i - 1].step_time_s, r.top[i].step_time_s);
}

// Issue 16: a full search of 1T on all of Frontier (37,888 MI250X = 75,776 GCDs) in under 1 s.
TEST(PlanPredict, SearchSpeed1TOnAllOfFrontier) {
  const auto [r, dt] = timed_1t_search(75776, 75776);
  EXPECT_GT(r.evaluated, 10000);
  EXPECT_FALSE(r.top.empty());
  EXPECT_LT(dt, 1.0);
}

TEST(PlanPredict, BreakdownAddsUpAndFlopsAreConsistent) {
  const System sys = frontier();
  const ModelShape m = ModelShape::from_config(model_preset("gpt-175b"));
  const Options o = Options::from_system(sys, Precision::kFp16, 640);
  const Prediction p = predict(m, sys, dash_layout(4, 16, 2), o);
  EXPECT_NEAR(p.time.compute + p.time.tp_comm + p.time.pp_bubble + p.time.dp_exposed + p.time.optimizer +
                  p.time.stragglers + p.time.overhead,
              p.step_time_s, 1e-9 * p.step_time_s);
  // Model FLOPs: Megatron's 72 B s L h^2 (1 + s/6h + V/12hL) per step (Narayanan et al. 2021
  // eq. 3, without recompute) equals 6N + 12LHS up to the biases and LayerNorms.
  const double B = 640, s = 2048, L = 96, h = 12288, V = m.vocab;
  const double megatron = 72 * B * s * L * h * h * (1 + s / (6 * h) + V / (12 * h * L));
  EXPECT_NEAR(p.model_flops / megatron, 1.0, 1e-3);
  // Full recompute: hardware FLOPs = model FLOPs + one more forward of the layers: ~4/3.
  EXPECT_NEAR(p.hardware_flops / p.model_flops, 4.0 / 3.0, 0.01);
  EXPECT_THROW(predict(m, sys, dash_layout(5, 16, 2), o), InputError);  // 96 heads % 5
}

// The compute model's FLOPs are the model's own (model/gpt_description.h): hardware FLOPs per
// token = the model FLOPs + what each stage's recompute adds (with the scores materialised:
// FlashAttention's backward recomputes them, which the description does not count).
TEST(PlanPredict, HardwareFlopsAreTheModelDescriptions) {
  const System sys = load_system(std::string(WEFT_SOURCE_DIR) + "/systems/dgx-h100.toml");
  const ModelShape m = ModelShape::from_config(model_preset("gpt2-350m"), 512);
  Options o = Options::from_system(sys, Precision::kBf16, 32);
  o.flash_attention = false;
  struct Case {
    int tp, pp;
    Recompute rc;
    int layers;
    bool sp;
  };
  for (const Case& c : {Case{1, 1, Recompute::kNone, -1, false}, Case{2, 1, Recompute::kSelective, -1, true},
                        Case{1, 4, Recompute::kFull, 2, false}, Case{2, 2, Recompute::kFull, -1, false}}) {
    Layout l;
    l.tp = c.tp, l.pp = c.pp, l.micro_batch = 2, l.recompute = c.rc, l.recompute_layers = c.layers;
    l.sequence_parallel = c.sp;
    const Prediction p = predict(m, sys, l, o);
    const double tokens = 32.0 * 512;
    const ModelConfig mc = m.config();
    EXPECT_DOUBLE_EQ(p.model_flops / tokens, GptDescription::train_flops_per_token(mc, 512)) << l.describe();
    double hw = GptDescription::train_flops_per_token(mc, 512);
    const std::vector<int64_t> layers = stage_layer_counts(m, l);
    for (int s = 0; s < l.pp; ++s) {
      const StageSpec part{0, static_cast<int>(layers[static_cast<size_t>(s)]), s == 0, s == l.pp - 1};
      hw += GptDescription(part_spec(mc, m.seq, l, part)).recompute_flops_per_token();
    }
    EXPECT_NEAR(p.hardware_flops / tokens / hw, 1.0, 1e-12) << l.describe();
    if (c.rc != Recompute::kNone) {
      EXPECT_GT(hw, p.model_flops / tokens) << l.describe();
    }
  }
}

}  // namespace
}  // namespace weft::plan
