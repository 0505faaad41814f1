// HSDP in the planner (docs/planner.md, "HSDP"): the ZeRO shares divide by dp_shard in both
// memory models, the replicas' all-reduce is priced on the outer link level while ZeRO's
// collectives stay on the inner one, the search tries dp_replicate and takes it as a pin, and
// what the trainer refuses the planner refuses.
#include <gtest/gtest.h>

#include <cstdio>

#include "core/error.h"
#include "model/config.h"
#include "plan/compression.h"
#include "plan/memory.h"
#include "plan/predict.h"
#include "plan/search.h"
#include "plan/weft_memory.h"
#include "plan/zeropp.h"

namespace weft::plan {
namespace {

ModelShape shape_of(const std::string& preset) { return ModelShape::from_config(model_preset(preset)); }

Layout hsdp(int tp, int dp, int replicate, int zero) {
  Layout l;
  l.tp = tp;
  l.dp = dp;
  l.dp_replicate = replicate;
  l.zero = zero;
  return l;
}

TEST(PlanHsdp, DescribeAndCandidateCarryTheSplit) {
  const Layout l = hsdp(2, 4, 2, 3);
  EXPECT_EQ(l.dp_shard(), 2);
  EXPECT_EQ(l.world(), 8);
  EXPECT_EQ(l.describe(), "tp 2 pp 1 dp 4 (dp_shard 2 x dp_replicate 2) mb 1 zero 3 none 1f1b");
  EXPECT_EQ(hsdp(2, 4, 1, 3).describe(), "tp 2 pp 1 dp 4 mb 1 zero 3 none 1f1b");
  const LayoutCandidate c = layout_candidate(shape_of("tiny"), l, 8, Precision::kFp32);
  EXPECT_EQ(c.dp_replicate, 2);
  EXPECT_EQ(layout_error(c), "");
  Layout bad = hsdp(2, 4, 3, 3);
  EXPECT_EQ(layout_error(layout_candidate(shape_of("tiny"), bad, 8, Precision::kFp32)),
            "dp_replicate 3 does not divide dp 4 (dp = dp_shard x dp_replicate)");
}

// Megatron's formulas: each replica is a ZeRO-sharded copy over dp_shard ranks, so dp 8 as
// 4 x 2 holds what dp 4 holds; the activations do not change.
TEST(PlanHsdp, MemoryDividesTheZeroSharesByDpShard) {
  const ModelShape m = shape_of("gpt2-350m");
  MemoryOptions o;
  o.precision = Precision::kBf16;
  o.global_batch = 8;
  for (int zero = 1; zero <= 3; ++zero) {
    const MemoryBreakdown split = stage_memory(m, hsdp(1, 8, 2, zero), o, 0);
    Layout four = hsdp(1, 4, 1, zero);
    o.global_batch = 4;  // the same micro-batches per rank
    const MemoryBreakdown plain4 = stage_memory(m, four, o, 0);
    o.global_batch = 8;
    const MemoryBreakdown plain8 = stage_memory(m, hsdp(1, 8, 1, zero), o, 0);
    EXPECT_DOUBLE_EQ(split.optimizer, plain4.optimizer) << zero;
    EXPECT_DOUBLE_EQ(split.grads, plain4.grads) << zero;
    EXPECT_DOUBLE_EQ(split.params, plain4.params) << zero;
    EXPECT_DOUBLE_EQ(split.optimizer, 2 * plain8.optimizer) << zero;
    EXPECT_DOUBLE_EQ(split.activations, plain8.activations) << zero;
  }
}

// weft's own buffers: an HSDP rank holds the shard of its index in the dp_shard group, so
// dp rank r of dp 4 = 2 x 2 holds what rank r % 2 of plain dp 2 holds (the states; the
// embedding's row exchange still gathers every dp rank's rows).
TEST(PlanHsdp, WeftMemoryTakesTheShardByIndexInTheShardGroup) {
  WeftRunShape r;
  r.model = model_preset("tiny");
  r.seq = 32;
  r.micro_batches = 2;
  for (int zero = 0; zero <= 3; ++zero) {
    r.layout = hsdp(1, 4, 2, zero);
    WeftRunShape two = r;
    two.layout = hsdp(1, 2, 1, zero);
    for (int d = 0; d < 4; ++d) {
      const MemoryBreakdown a = weft_rank_memory(r, 0, d), b = weft_rank_memory(two, 0, d % 2);
      EXPECT_EQ(a.params, b.params) << "zero " << zero << ", dp rank " << d;
      EXPECT_EQ(a.grads, b.grads) << "zero " << zero << ", dp rank " << d;
      EXPECT_EQ(a.optimizer, b.optimizer) << "zero " << zero << ", dp rank " << d;
    }
  }
}

// On DGX H100 nodes of 8 with tp 1, dp 16 = dp_shard 8 x dp_replicate 2: every ZeRO-3
// collective stays in the node, and the replicas' all-reduce of 1/8 of the gradient is the only
// dp traffic on the network; plain ZeRO-3 over 16 ranks puts its gathers and reduce-scatters
// there.
TEST(PlanHsdp, ReplicaAllReduceIsTheOnlyNetworkTraffic) {
  const System sys = load_system(std::string(WEFT_SOURCE_DIR) + "/systems/dgx-h100.toml");
  const ModelShape m = shape_of("gpt2-774m");
  Options o = Options::from_system(sys, Precision::kBf16, 32);
  o.explain = true;
  const Prediction split = predict(m, sys, hsdp(1, 16, 2, 3), o);
  const Prediction plain = predict(m, sys, hsdp(1, 16, 1, 3), o);
  auto bytes_on = [](const Prediction& p, const std::string& level) {
    for (const auto& [name, b] : p.dp_level_bytes) {
      if (name == level) return b;
    }
    return -1.0;
  };
  const double psi = stage_params_per_rank(m, hsdp(1, 16, 2, 3), 0);
  // fp32 gradient accumulation (the system's default): 4 bytes per element; 1/8 of them, a ring
  // all-reduce over 2 ranks sends (2 - 1) / 2 x 2 of the buffer per device.
  const std::vector<double> rep = collective_level_bytes(sys, Collective::kAllReduce, 2, 8, psi * 4 / 8);
  EXPECT_DOUBLE_EQ(bytes_on(split, "network"), rep[1]);
  EXPECT_GT(bytes_on(split, "network"), 0);
  EXPECT_GT(bytes_on(plain, "network"), 2 * bytes_on(split, "network"));
  std::printf("[ plan ] gpt2-774m on 16 H100, ZeRO-3: network bytes per device and step: dp 16 %.4g GB, dp_shard 8 x "
              "dp_replicate 2 %.4g GB\n",
              bytes_on(plain, "network") / 1e9, bytes_on(split, "network") / 1e9);
  int found = 0;
  for (const ExplainTerm& t : split.explain) {
    if (t.group != "dp") continue;
    if (t.name.find("dp_replicate 2") != std::string::npos) {
      EXPECT_EQ(t.name, "HSDP all-reduce, dp_replicate 2, 1/8 of the gradient");
      EXPECT_EQ(t.where, "network");
      ++found;
    } else if (!t.where.empty()) {
      EXPECT_EQ(t.where, "node") << t.name;
    }
  }
  EXPECT_EQ(found, 1);
  // Each rank updates 1/8 of the model, not 1/16.
  EXPECT_NEAR(split.time.optimizer, 2 * plain.time.optimizer, 1e-12);
}

TEST(PlanHsdp, SearchTriesTheSplitAndTakesItAsAPin) {
  const ModelShape m = shape_of("small");
  Options o;
  o.precision = Precision::kFp32;
  o.global_batch = 16;
  int split = 0, zero0_split = 0, shard1 = 0;
  for (const Layout& l : valid_layouts(m, 8, o, {})) {
    if (l.dp_replicate > 1) {
      ++split;
      zero0_split += l.zero == 0;
      shard1 += l.dp_shard() < 2;
      EXPECT_EQ(l.dp % l.dp_replicate, 0) << l.describe();
    }
  }
  EXPECT_GT(split, 0);
  EXPECT_EQ(zero0_split, 0);
  EXPECT_EQ(shard1, 0);
  Pins pins;
  pins.dp_replicate = 2;
  pins.zero = 3;
  for (const Layout& l : valid_layouts(m, 8, o, pins)) {
    EXPECT_EQ(l.dp_replicate, 2) << l.describe();
    EXPECT_EQ(l.zero, 3);
  }
  Pins shard;
  shard.dp = 8;
  shard.dp_shard = 4;
  for (const Layout& l : valid_layouts(m, 8, o, shard)) EXPECT_EQ(l.dp_replicate, 2) << l.describe();
  shard.dp_shard = 3;
  try {
    valid_layouts(m, 8, o, shard);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("dp 8 does not equal dp_shard 3 x dp_replicate 1 = 3"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("--dp-shard 3"), std::string::npos) << e.what();
  }
}

TEST(PlanHsdp, RefusesWhatTheTrainerRefuses) {
  Layout l = hsdp(1, 4, 2, 1);
  CompressionPolicy p;
  p.dp = parse_codec("int8", "dp", 2048);
  EXPECT_NE(compression_layout_error(p, l).find("with dp_replicate 2 (HSDP)"), std::string::npos);
  l.dp_replicate = 1;
  EXPECT_EQ(compression_layout_error(p, l), "");
  // ZeRO++ lives inside dp_shard: hpz must divide it.
  Layout z = hsdp(1, 8, 2, 3);
  z.hpz = 8;
  z.zeropp = ZeroPP::kCustom;
  EXPECT_EQ(zeropp_error(z), "hpz 8 does not divide dp_shard 4");
  z.hpz = 4;
  EXPECT_EQ(zeropp_error(z), "");
}

}  // namespace
}  // namespace weft::plan
