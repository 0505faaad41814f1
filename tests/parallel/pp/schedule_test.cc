// Pipeline partition and schedules: layer splits against hand-computed splits, schedule
// lists against Megatron's warm-up formulas and a hand-derived interleaved order, stash
// peaks against closed forms, simulated bubbles against (p-1)/m and (p-1)/(v*m)
// (Narayanan et al. 2021 sec. 2.2), and every error message.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "parallel/pp/partition.h"
#include "parallel/pp/schedule.h"

namespace weft {
namespace {

using K = PipeAction::Kind;

template <typename F>
std::string input_error(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "<no InputError>";
}

std::vector<int> counts(const std::vector<StageRange>& r) {
  std::vector<int> out;
  for (const auto& s : r) out.push_back(s.num_layers);
  return out;
}

// ---------------------------------------------------------------- partition

TEST(StagePartition, EvenSplit) {
  const auto r = partition_layers(8, 4);
  ASSERT_EQ(r.size(), 4u);
  for (int c = 0; c < 4; ++c) {
    EXPECT_EQ(r[c].first_layer, 2 * c);
    EXPECT_EQ(r[c].num_layers, 2);
    EXPECT_EQ(r[c].has_embedding, c == 0);
    EXPECT_EQ(r[c].has_head, c == 3);
  }
  const auto one = partition_layers(5, 1);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].first_layer, 0);
  EXPECT_EQ(one[0].num_layers, 5);
  EXPECT_TRUE(one[0].has_embedding);
  EXPECT_TRUE(one[0].has_head);
}

TEST(StagePartition, RemainderGoesToFirstChunks) {
  EXPECT_EQ(counts(partition_layers(10, 4)), (std::vector<int>{3, 3, 2, 2}));
  EXPECT_EQ(counts(partition_layers(11, 4)), (std::vector<int>{3, 3, 3, 2}));
  EXPECT_EQ(counts(partition_layers(4, 4)), (std::vector<int>{1, 1, 1, 1}));
  const auto r = partition_layers(10, 4);
  EXPECT_EQ(r[1].first_layer, 3);
  EXPECT_EQ(r[2].first_layer, 6);
  EXPECT_EQ(r[3].first_layer, 8);
}

TEST(StagePartition, HeadCostMovesLayersOffTheLastChunk) {
  // h = 0.5 does not pay: 2,2,2,2 costs 2.5 peak; 3,2,2,1 would cost 3.
  EXPECT_EQ(counts(partition_layers(8, 4, 1, {}, 0.5)), (std::vector<int>{2, 2, 2, 2}));
  // h = 1.5: 2,2,2,2 peaks at 3.5; 3,2,2,1 costs 3,2,2,2.5.
  EXPECT_EQ(counts(partition_layers(8, 4, 1, {}, 1.5)), (std::vector<int>{3, 2, 2, 1}));
  // h = 4 with 12 layers over 4: 3,3,3,3 peaks at 7 -> 4,4,3,1 peaks at 5 (1 + 4).
  EXPECT_EQ(counts(partition_layers(12, 4, 1, {}, 4.0)), (std::vector<int>{4, 4, 3, 1}));
  // The last chunk keeps one layer however heavy the head.
  EXPECT_EQ(counts(partition_layers(4, 2, 1, {}, 100.0)), (std::vector<int>{3, 1}));
  EXPECT_EQ(counts(partition_layers(7, 1, 1, {}, 100.0)), (std::vector<int>{7}));
}

TEST(StagePartition, VirtualChunksInterleaveOverStages) {
  // p = 2, v = 2, L = 8: chunk c holds layers [2c, 2c+2) on stage c % 2.
  const auto r = partition_layers(8, 2, 2);
  ASSERT_EQ(r.size(), 4u);
  for (int c = 0; c < 4; ++c) {
    EXPECT_EQ(r[c].first_layer, 2 * c);
    EXPECT_EQ(r[c].num_layers, 2);
    EXPECT_EQ(chunk_stage(c, 2), c % 2);
  }
  EXPECT_TRUE(r[0].has_embedding);
  EXPECT_TRUE(r[3].has_head);
  // p = 3, v = 2: stage 1 owns global chunks 1 and 4.
  EXPECT_EQ(global_chunk(1, 0, 3), 1);
  EXPECT_EQ(global_chunk(1, 1, 3), 4);
  for (int c = 0; c < 6; ++c) EXPECT_EQ(global_chunk(chunk_stage(c, 3), c / 3, 3), c);
}

TEST(StagePartition, OverridePinsTheSplit) {
  const auto r = partition_layers(10, 2, 2, {1, 4, 3, 2});
  EXPECT_EQ(counts(r), (std::vector<int>{1, 4, 3, 2}));
  EXPECT_EQ(r[0].first_layer, 0);
  EXPECT_EQ(r[1].first_layer, 1);
  EXPECT_EQ(r[2].first_layer, 5);
  EXPECT_EQ(r[3].first_layer, 8);
}

TEST(StagePartition, Errors) {
  EXPECT_EQ(input_error([] { partition_layers(8, 0); }),
            "pipeline needs at least 1 stage, got 0");
  EXPECT_EQ(input_error([] { partition_layers(8, 2, 0); }),
            "pipeline needs at least 1 virtual stage per stage, got 0");
  EXPECT_EQ(input_error([] { partition_layers(6, 4, 2); }),
            "pipeline of 4 stages x 2 virtual stages needs at least 8 layers, the model has 6");
  EXPECT_EQ(input_error([] { partition_layers(8, 2, 1, {}, -1.0); }),
            "head cost must be >= 0 layers, got -1");
  EXPECT_EQ(input_error([] { partition_layers(8, 2, 2, {4, 4}); }),
            "pipeline layer override has 2 entries, the pipeline has 2 stages x 2 virtual "
            "stages = 4 chunks");
  EXPECT_EQ(input_error([] { partition_layers(8, 2, 1, {8, 0}); }),
            "pipeline layer override gives chunk 1 0 layers, every chunk needs >= 1");
  EXPECT_EQ(input_error([] { partition_layers(8, 2, 1, {3, 4}); }),
            "pipeline layer override [3, 4] sums to 7 layers, the model has 8");
  EXPECT_EQ(input_error([] { chunk_stage(1, 0); }), "pipeline needs at least 1 stage, got 0");
  EXPECT_EQ(input_error([] { global_chunk(2, 0, 2); }),
            "pipeline stage 2 is out of range for 2 stages");
}

// ---------------------------------------------------------------- schedules

struct Case {
  PipeSchedule s;
  int p, m, v;
};

std::vector<Case> valid_cases() {
  std::vector<Case> out;
  for (int p = 1; p <= 5; ++p)
    for (int m = 1; m <= 10; ++m) {
      out.push_back({PipeSchedule::kGpipe, p, m, 1});
      out.push_back({PipeSchedule::k1F1B, p, m, 1});
      if (m % p == 0)
        for (int v = 1; v <= 3; ++v) out.push_back({PipeSchedule::kInterleaved, p, m, v});
    }
  return out;
}

std::string name(const Case& c) {
  return schedule_name(c.s) + " p=" + std::to_string(c.p) + " m=" + std::to_string(c.m) +
         " v=" + std::to_string(c.v);
}

TEST(PipelineSchedule, ParseNames) {
  EXPECT_EQ(parse_schedule("gpipe"), PipeSchedule::kGpipe);
  EXPECT_EQ(parse_schedule("1f1b"), PipeSchedule::k1F1B);
  EXPECT_EQ(parse_schedule("interleaved"), PipeSchedule::kInterleaved);
  EXPECT_EQ(input_error([] { parse_schedule("zb"); }),
            "unknown pipeline schedule 'zb', expected one of: gpipe, 1f1b, interleaved");
}

TEST(PipelineSchedule, EveryActionOnceBackwardAfterForward) {
  for (const Case& c : valid_cases()) {
    for (int st = 0; st < c.p; ++st) {
      const auto a = stage_schedule(c.s, c.p, st, c.m, c.v);
      ASSERT_EQ(a.size(), static_cast<size_t>(2 * c.m * c.v)) << name(c);
      std::map<std::pair<int, int>, int> fwd_at, bwd_at;
      for (int i = 0; i < static_cast<int>(a.size()); ++i) {
        ASSERT_GE(a[i].micro_batch, 0) << name(c);
        ASSERT_LT(a[i].micro_batch, c.m) << name(c);
        ASSERT_GE(a[i].chunk, 0) << name(c);
        ASSERT_LT(a[i].chunk, c.v) << name(c);
        auto& at = a[i].kind == K::kForward ? fwd_at : bwd_at;
        EXPECT_TRUE(at.emplace(std::make_pair(a[i].micro_batch, a[i].chunk), i).second)
            << name(c) << " stage " << st << " repeats an action at " << i;
      }
      EXPECT_EQ(fwd_at.size(), static_cast<size_t>(c.m * c.v)) << name(c);
      EXPECT_EQ(bwd_at.size(), static_cast<size_t>(c.m * c.v)) << name(c);
      for (const auto& [key, i] : bwd_at) EXPECT_GT(i, fwd_at.at(key)) << name(c);
    }
  }
}

TEST(PipelineSchedule, GpipeAllForwardsThenAllBackwardsInOrder) {
  const auto a = stage_schedule(PipeSchedule::kGpipe, 4, 2, 3);
  const std::vector<PipeAction> want = {{K::kForward, 0, 0},  {K::kForward, 1, 0},
                                        {K::kForward, 2, 0},  {K::kBackward, 0, 0},
                                        {K::kBackward, 1, 0}, {K::kBackward, 2, 0}};
  EXPECT_EQ(a, want);
}

// Forwards before the first backward: the warm-up plus the first steady-state forward.
int leading_forwards(const std::vector<PipeAction>& a) {
  int n = 0;
  while (n < static_cast<int>(a.size()) && a[n].kind == K::kForward) ++n;
  return n;
}

TEST(PipelineSchedule, OneFOneBWarmup) {
  // p = 4, m = 8: warm-up min(p - s - 1, m) = 3, 2, 1, 0 forwards, then 1F1B.
  const int warmup[4] = {3, 2, 1, 0};
  for (int st = 0; st < 4; ++st) {
    const auto a = stage_schedule(PipeSchedule::k1F1B, 4, st, 8);
    EXPECT_EQ(leading_forwards(a), warmup[st] + 1) << "stage " << st;
    // Steady state strictly alternates F, B for m - warm-up rounds, then B only.
    for (int i = 0; i < 8 - warmup[st]; ++i) {
      EXPECT_EQ(a[warmup[st] + 2 * i].kind, K::kForward);
      EXPECT_EQ(a[warmup[st] + 2 * i].micro_batch, warmup[st] + i);
      EXPECT_EQ(a[warmup[st] + 2 * i + 1].kind, K::kBackward);
      EXPECT_EQ(a[warmup[st] + 2 * i + 1].micro_batch, i);
    }
    for (int i = 2 * 8 - warmup[st]; i < 16; ++i) EXPECT_EQ(a[i].kind, K::kBackward);
  }
  // Stage 1 in full: F0 F1 F2 B0 F3 B1 ... F7 B5 B6 B7.
  const auto a = stage_schedule(PipeSchedule::k1F1B, 4, 1, 8);
  std::vector<PipeAction> want = {{K::kForward, 0, 0}, {K::kForward, 1, 0}};
  for (int i = 0; i < 6; ++i) {
    want.push_back({K::kForward, i + 2, 0});
    want.push_back({K::kBackward, i, 0});
  }
  want.push_back({K::kBackward, 6, 0});
  want.push_back({K::kBackward, 7, 0});
  EXPECT_EQ(a, want);
  // Fewer micro-batches than the warm-up: all forwards, then all backwards.
  EXPECT_EQ(leading_forwards(stage_schedule(PipeSchedule::k1F1B, 4, 0, 2)), 2);
}

TEST(PipelineSchedule, InterleavedMatchesMegatronOrder) {
  // p = 2, v = 2, m = 4, stage 0. Megatron: forward k -> chunk (k % 4) / 2, micro-batch
  // (k / 4) * 2 + k % 2; backward k -> chunk 1 - (k % 4) / 2; warm-up (2-0-1)*2 + 1*2 = 4.
  const auto a = stage_schedule(PipeSchedule::kInterleaved, 2, 0, 4, 2);
  const std::vector<PipeAction> want = {
      {K::kForward, 0, 0},  {K::kForward, 1, 0},  {K::kForward, 0, 1},  {K::kForward, 1, 1},
      {K::kForward, 2, 0},  {K::kBackward, 0, 1}, {K::kForward, 3, 0},  {K::kBackward, 1, 1},
      {K::kForward, 2, 1},  {K::kBackward, 0, 0}, {K::kForward, 3, 1},  {K::kBackward, 1, 0},
      {K::kBackward, 2, 1}, {K::kBackward, 3, 1}, {K::kBackward, 2, 0}, {K::kBackward, 3, 0}};
  EXPECT_EQ(a, want);
  // Stage 1: warm-up (2-1-1)*2 + 1*2 = 2.
  EXPECT_EQ(leading_forwards(stage_schedule(PipeSchedule::kInterleaved, 2, 1, 4, 2)), 3);
  // m == p: Megatron runs all m*v forwards first.
  EXPECT_EQ(leading_forwards(stage_schedule(PipeSchedule::kInterleaved, 4, 3, 4, 2)), 8);
}

TEST(PipelineSchedule, MaxInFlight) {
  for (int p = 1; p <= 5; ++p)
    for (int m = 1; m <= 10; ++m)
      for (int st = 0; st < p; ++st) {
        EXPECT_EQ(max_in_flight(stage_schedule(PipeSchedule::kGpipe, p, st, m)), m);
        EXPECT_EQ(max_in_flight(stage_schedule(PipeSchedule::k1F1B, p, st, m)),
                  std::min(p - st, m))
            << "p=" << p << " m=" << m << " stage " << st;
      }
  // p = 4, m = 8: exactly p - stage.
  for (int st = 0; st < 4; ++st)
    EXPECT_EQ(max_in_flight(stage_schedule(PipeSchedule::k1F1B, 4, st, 8)), 4 - st);
  // Interleaved, v = 2: Megatron's warm-up W = min((p-s-1)*2 + (v-1)*p, m*v) (m*v when
  // m == p) stashes W, and the first steady forward makes W + 1.
  const int v = 2;
  for (int p = 1; p <= 5; ++p)
    for (int m = p; m <= 4 * p; m += p)
      for (int st = 0; st < p; ++st) {
        int w = m == p ? m * v : std::min((p - st - 1) * 2 + (v - 1) * p, m * v);
        EXPECT_EQ(max_in_flight(stage_schedule(PipeSchedule::kInterleaved, p, st, m, v)),
                  std::min(w + 1, m * v))
            << "p=" << p << " m=" << m << " stage " << st;
      }
  // p = 4, m = 8, v = 2, stage 0: (3*2 + 4) + 1 = 11 stashed chunk activations, each of
  // half a stage: 5.5 stages' worth vs 4 for 1F1B.
  EXPECT_EQ(max_in_flight(stage_schedule(PipeSchedule::kInterleaved, 4, 0, 8, 2)), 11);
}

TEST(PipelineSchedule, SimulatedBubbleMatchesClosedForms) {
  const double tf = 1.0, tb = 2.0;
  for (int p : {1, 2, 3, 4, 8})
    for (int mult : {1, 2, 3, 4}) {
      const int m = p * mult;
      for (PipeSchedule s : {PipeSchedule::kGpipe, PipeSchedule::k1F1B}) {
        const auto r = simulate_pipeline(s, p, m, 1, tf, tb);
        EXPECT_NEAR(r.bubble_fraction, double(p - 1) / m, 1e-9)
            << schedule_name(s) << " p=" << p << " m=" << m;
        EXPECT_NEAR(r.step_time, (m + p - 1) * (tf + tb), 1e-9);
      }
      for (int v : {1, 2, 3, 4}) {
        const auto r = simulate_pipeline(PipeSchedule::kInterleaved, p, m, v, tf, tb);
        EXPECT_NEAR(r.bubble_fraction, double(p - 1) / (v * m), 1e-9)
            << "interleaved p=" << p << " m=" << m << " v=" << v;
      }
    }
  // 1F1B also for m not a multiple of p, and m < p ((m + p - 1) steps of t_f + t_b).
  for (int m : {1, 3, 5, 7}) {
    const auto r = simulate_pipeline(PipeSchedule::k1F1B, 4, m, 1, tf, tb);
    EXPECT_NEAR(r.bubble_fraction, 3.0 / m, 1e-9) << "m=" << m;
  }
}

TEST(PipelineSchedule, SimulatorBusyIdleAndP2p) {
  const auto r = simulate_pipeline(PipeSchedule::k1F1B, 4, 8, 1, 1.0, 2.0);
  ASSERT_EQ(r.busy.size(), 4u);
  ASSERT_EQ(r.idle.size(), 4u);
  for (int s = 0; s < 4; ++s) {
    EXPECT_NEAR(r.busy[s], 8 * 3.0, 1e-12);
    EXPECT_NEAR(r.idle[s], r.step_time - 24.0, 1e-12);
  }
  EXPECT_NEAR(r.step_time, 11 * 3.0, 1e-12);
  // GPipe with p2p cost d: the forward and backward fill each cross p - 1 links:
  // (m + p - 1)(t_f + t_b) + 2 (p - 1) d.
  const auto g = simulate_pipeline(PipeSchedule::kGpipe, 4, 8, 1, 1.0, 2.0, 0.25);
  EXPECT_NEAR(g.step_time, 11 * 3.0 + 2 * 3 * 0.25, 1e-12);
  // One stage: no links, no bubble.
  const auto one = simulate_pipeline(PipeSchedule::kInterleaved, 1, 3, 2, 1.0, 2.0, 5.0);
  EXPECT_NEAR(one.step_time, 9.0, 1e-12);
  EXPECT_NEAR(one.bubble_fraction, 0.0, 1e-12);
}

TEST(PipelineSchedule, SimulatorNeverDeadlocksOnValidInput) {
  for (const Case& c : valid_cases())
    for (double p2p : {0.0, 0.5}) {
      PipeSimResult r;
      EXPECT_NO_THROW(r = simulate_pipeline(c.s, c.p, c.m, c.v, 1.0, 2.0, p2p)) << name(c);
      // Never faster than the ideal, never slower than running the stages one after another.
      EXPECT_GE(r.step_time, c.m * 3.0 - 1e-9) << name(c);
      EXPECT_LE(r.step_time, c.p * c.m * 3.0 + 2 * c.m * c.v * c.p * p2p + 1e-9) << name(c);
    }
}

TEST(PipelineSchedule, SimulatorReportsDeadlock) {
  // Stage 0 waits for B(0) from stage 1 before sending F(1); stage 1 wants F(1) first.
  const std::vector<std::vector<PipeAction>> bad = {
      {{K::kForward, 0, 0}, {K::kBackward, 0, 0}, {K::kForward, 1, 0}, {K::kBackward, 1, 0}},
      {{K::kForward, 1, 0}, {K::kForward, 0, 0}, {K::kBackward, 0, 0}, {K::kBackward, 1, 0}}};
  try {
    simulate_actions(bad, 2, 1, 1.0, 2.0);
    FAIL() << "no error";
  } catch (const RuntimeError& e) {
    EXPECT_EQ(std::string(e.what()),
              "pipeline schedule deadlocks: stage 0 at backward of micro-batch 0 chunk 0; "
              "stage 1 at forward of micro-batch 1 chunk 0");
  }
  const std::vector<std::vector<PipeAction>> twice = {
      {{K::kForward, 0, 0}, {K::kForward, 0, 0}, {K::kBackward, 0, 0}}};
  EXPECT_EQ(input_error([&] { simulate_actions(twice, 1, 1, 1.0, 2.0); }),
            "stage 0 runs the forward of micro-batch 0 chunk 0 2 times, expected once");
}

TEST(PipelineSchedule, Errors) {
  EXPECT_EQ(input_error([] { stage_schedule(PipeSchedule::kInterleaved, 4, 0, 6, 2); }),
            "interleaved pipeline schedule needs the micro-batches to divide by the stages: 6 "
            "micro-batches, 4 stages");
  EXPECT_EQ(input_error([] { stage_schedule(PipeSchedule::k1F1B, 4, 0, 8, 2); }),
            "pipeline schedule '1f1b' runs 1 chunk per stage, got 2 virtual stages (use "
            "'interleaved')");
  EXPECT_EQ(input_error([] { stage_schedule(PipeSchedule::kGpipe, 4, 4, 8); }),
            "pipeline stage 4 is out of range for 4 stages");
  EXPECT_EQ(input_error([] { stage_schedule(PipeSchedule::kGpipe, 0, 0, 8); }),
            "pipeline needs at least 1 stage, got 0");
  EXPECT_EQ(input_error([] { stage_schedule(PipeSchedule::kGpipe, 2, 0, 0); }),
            "pipeline needs at least 1 micro-batch, got 0");
  EXPECT_EQ(input_error([] { simulate_pipeline(PipeSchedule::kInterleaved, 2, 3, 2, 1, 2); }),
            "interleaved pipeline schedule needs the micro-batches to divide by the stages: 3 "
            "micro-batches, 2 stages");
  EXPECT_EQ(input_error([] { simulate_pipeline(PipeSchedule::kGpipe, 2, 4, 1, -1, 2); }),
            "pipeline times must be >= 0: t_forward -1, t_backward 2, t_p2p 0");
}

}  // namespace
}  // namespace weft
