// The layout rules (parallel/layout_rules.h): each rule's message with its numbers, and the
// agreement they exist for: on 1 to 8 ranks, every layout of the tiny and small presets that
// the planner's search lists is one the trainer's validation (validate_run_layout, the entry
// point train() calls) accepts, and the reverse.
#include <gtest/gtest.h>

#include <cstdio>
#include <limits>
#include <set>

#include "core/error.h"
#include "model/climax/climax_config.h"
#include "model/config.h"
#include "model/gpt/gpt_config.h"
#include "parallel/layout_rules.h"
#include "plan/search.h"
#include "train/run_layout.h"

namespace weft {
namespace {

// A valid candidate to break one field at a time: tiny (4 layers, 4 heads, C 256, F 1024,
// Vp 50304, T 256) on tp 2 x pp 2 x dp 2, micro-batch 2 of 8.
LayoutCandidate base() {
  LayoutCandidate c;
  c.world = 8;
  c.tp = 2, c.pp = 2, c.dp = 2;
  c.micro_batch = 2;
  c.global_batch = 8;
  c.model = {4, 4, 256, 1024, 50304, 256};
  return c;
}

template <typename F>
std::string error_of(F change) {
  LayoutCandidate c = base();
  change(c);
  return layout_error(c);
}

TEST(LayoutRules, TheBaseIsValidAndCheckThrowsTheMessage) {
  EXPECT_EQ(layout_error(base()), "");
  EXPECT_NO_THROW(check_layout(base()));
  LayoutCandidate c = base();
  c.tp = 3;
  try {
    check_layout(c);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), layout_error(c));
  }
}

TEST(LayoutRules, AxesMessagesNameTheNumbers) {
  EXPECT_EQ(error_of([](auto& c) { c.tp = 0; }), "tp size 0 must be at least 1");
  EXPECT_EQ(error_of([](auto& c) { c.dp = -1; }), "dp size -1 must be at least 1");
  EXPECT_EQ(error_of([](auto& c) { c.tp = 3, c.world = 12; }), "4 attention heads are not divisible by tp 3");
  EXPECT_EQ(error_of([](auto& c) { c.model.ffn = 1021; }), "MLP size 1021 is not divisible by tp 2");
  EXPECT_EQ(error_of([](auto& c) { c.model.vocab = 50257; }), "padded vocabulary 50257 is not divisible by tp 2");
  EXPECT_EQ(error_of([](auto& c) { c.pp = 5, c.world = 20; }),
            "pp 5 x virtual_stages 1 = 5 model chunks need at least that many layers; the model has 4");
  EXPECT_EQ(error_of([](auto& c) { c.dp = 0, c.world = 6; }),
            "world size 6 is not divisible by tp 2 x pp 2 = 4 (dp is derived as world / (tp x pp))");
  EXPECT_EQ(error_of([](auto& c) { c.world = 6; }), "world size 6 does not equal tp 2 x pp 2 x dp 2 = 8");
  // dp 0 is derived: world 12 = 2 x 2 x 3.
  LayoutCandidate c = base();
  c.dp = 0, c.world = 12, c.global_batch = 12;
  EXPECT_EQ(layout_error(c), "");
  EXPECT_EQ(c.resolved_dp(), 3);
}

// HSDP: dp = dp_shard x dp_replicate, checked with the axes.
TEST(LayoutRules, HybridShardedDpMessagesNameTheNumbers) {
  auto hsdp = [](int dp, int shard, int rep) {
    return error_of([&](auto& c) { c.tp = 2, c.pp = 1, c.dp = dp, c.world = 2 * (dp == 0 ? 4 : dp), c.dp_shard_request = shard, c.dp_replicate = rep; });
  };
  EXPECT_EQ(hsdp(4, 0, 2), "");
  EXPECT_EQ(hsdp(4, 2, 2), "");
  EXPECT_EQ(hsdp(0, 2, 2), "");
  EXPECT_EQ(hsdp(4, 0, 3), "dp_replicate 3 does not divide dp 4 (dp = dp_shard x dp_replicate)");
  EXPECT_EQ(hsdp(4, 4, 2), "dp 4 does not equal dp_shard 4 x dp_replicate 2 = 8");
  EXPECT_EQ(hsdp(0, 3, 2), "dp 4 (world 8 / (tp 2 x pp 1)) does not equal dp_shard 3 x dp_replicate 2 = 6");
  EXPECT_EQ(hsdp(0, 0, 3), "dp_replicate 3 does not divide dp 4 (world 8 / (tp 2 x pp 1)) (dp = dp_shard x dp_replicate)");
  EXPECT_EQ(hsdp(4, 0, 0), "dp_replicate 0 must be at least 1");
  EXPECT_EQ(hsdp(4, -1, 1), "dp_shard -1 must be at least 1 (0: dp / dp_replicate)");
  LayoutCandidate c = base();
  c.pp = 1, c.dp = 4, c.dp_replicate = 2;
  EXPECT_EQ(c.resolved_dp_shard(), 2);
  c.dp_replicate = 1;
  EXPECT_EQ(c.resolved_dp_shard(), 4);  // --dp N alone: dp_shard N
}

TEST(LayoutRules, BatchMessagesNameTheNumbers) {
  EXPECT_EQ(error_of([](auto& c) { c.micro_batch = 0; }), "global_batch 8 and micro_batch 0 must be positive");
  EXPECT_EQ(error_of([](auto& c) { c.global_batch = 10; }),
            "global batch 10 is not divisible by micro batch 2 x dp 2 = 4");
}

TEST(LayoutRules, TensorMessagesNameTheNumbers) {
  EXPECT_EQ(error_of([](auto& c) { c.sequence_parallel = true, c.tp = 1, c.dp = 4; }),
            "sequence parallelism needs tp > 1 (tp is 1)");
  EXPECT_EQ(error_of([](auto& c) { c.sequence_parallel = true, c.model.seq = 3, c.micro_batch = 1, c.global_batch = 2; }),
            "sequence parallelism: micro-batch 1 x sequence 3 = 3 tokens are not divisible by tp 2");
  EXPECT_EQ(error_of([](auto& c) { c.sequence_parallel = true; }), "");
}

TEST(LayoutRules, PipelineMessagesNameTheNumbers) {
  EXPECT_EQ(error_of([](auto& c) { c.pp = 1, c.dp = 4, c.schedule = PipeSchedule::kGpipe; }),
            "schedule 'gpipe' needs pp > 1 (pp is 1: one stage runs each micro-batch's forward and backward in turn; "
            "leave the default 1f1b)");
  EXPECT_EQ(error_of([](auto& c) { c.virtual_stages = 0; }), "virtual_stages must be >= 1, got 0");
  EXPECT_EQ(error_of([](auto& c) { c.virtual_stages = 2; }),
            "virtual_stages 2 needs the interleaved schedule and pp > 1 (got schedule '1f1b', pp 2)");
  EXPECT_EQ(error_of([](auto& c) { c.schedule = PipeSchedule::kInterleaved; }),
            "the interleaved schedule needs virtual_stages >= 2, got 1");
  EXPECT_EQ(error_of([](auto& c) { c.schedule = PipeSchedule::kInterleaved, c.virtual_stages = 3; }),
            "pp 2 x virtual_stages 3 = 6 model chunks need at least that many layers; the model has 4");
  EXPECT_EQ(error_of([](auto& c) { c.schedule = PipeSchedule::kInterleaved, c.virtual_stages = 2, c.micro_batch = 4; }),
            "the interleaved schedule needs micro-batches 1 (global batch 8 / (dp 2 x micro-batch 4)) divisible by pp 2");
  EXPECT_EQ(error_of([](auto& c) { c.schedule = PipeSchedule::kInterleaved, c.virtual_stages = 2; }), "");
  // Layers need not divide by pp x v: 4 layers on pp 3 (the partition gives 2, 1, 1).
  EXPECT_EQ(error_of([](auto& c) { c.pp = 3, c.dp = 1, c.world = 6, c.global_batch = 4; }), "");
}

TEST(LayoutRules, ZeroAndRecomputeMessagesNameTheNumbers) {
  EXPECT_EQ(error_of([](auto& c) { c.zero = 4; }), "zero must be 0, 1, 2 or 3, got 4");
  EXPECT_EQ(error_of([](auto& c) { c.zero = 3; }),
            "zero 3 with pp 2: ZeRO-2/3 reduce gradients every micro-batch and gather parameters per use, which "
            "pipelining would multiply; use zero 0 or 1 with pipeline parallelism");
  EXPECT_EQ(error_of([](auto& c) { c.zero = 3, c.pp = 1, c.dp = 4; }), "");
  EXPECT_EQ(error_of([](auto& c) { c.zero = 1, c.dp = 1, c.world = 4; }), "");  // one rank's shard: valid
  EXPECT_EQ(error_of([](auto& c) { c.recompute_layers = 0; }),
            "recompute_layers must be >= 1 (or -1: every layer of a stage), got 0");
  EXPECT_EQ(error_of([](auto& c) { c.recompute_layers = 2, c.recompute = Recompute::kSelective; }),
            "recompute_layers 2 applies to recompute 'full', not 'selective'");
  EXPECT_EQ(error_of([](auto& c) { c.recompute_layers = 2, c.recompute = Recompute::kFull; }), "");
}

// The family rule reads what the model's family supports, not which family it is: a family
// that lacks one capability is refused exactly that, under its own name; ClimaX lacks all three.
TEST(LayoutRules, FamilyCapabilitiesDecideAndMessagesNameTheFamily) {
  const ModelCapabilities no_sp{.family = "Toy", .sequence_parallel = false};
  EXPECT_EQ(error_of([&](auto& c) { c.model.caps = no_sp; }), "");  // pp 2 is fine for it
  EXPECT_EQ(error_of([&](auto& c) { c.model.caps = no_sp, c.sequence_parallel = true; }),
            "sequence parallelism is not available for Toy models");
  const ModelCapabilities no_stages{.family = "Toy", .pipeline_stages = false};
  EXPECT_EQ(error_of([&](auto& c) { c.model.caps = no_stages; }),
            "Toy models run without pipeline stages: pp must be 1, got 2");
  EXPECT_EQ(error_of([&](auto& c) { c.model.caps = no_stages, c.pp = 1, c.dp = 4, c.sequence_parallel = true; }), "");
  const ModelCapabilities& climax = climax_family().capabilities();
  EXPECT_EQ(error_of([&](auto& c) { c.model.caps = climax; }),
            "ClimaX models run without pipeline stages: pp must be 1, got 2");
  EXPECT_EQ(error_of([&](auto& c) { c.model.caps = climax, c.pp = 1, c.dp = 4, c.recompute = Recompute::kSelective; }),
            "selective recompute is not available for ClimaX models (use 'full' or 'none')");
  EXPECT_EQ(error_of([&](auto& c) { c.model.caps = gpt_family().capabilities(), c.sequence_parallel = true; }),
            "");
}

// The first broken rule is reported: axes before batch before the rest.
TEST(LayoutRules, RulesApplyInOrder) {
  EXPECT_EQ(error_of([](auto& c) { c.tp = 3, c.world = 12, c.zero = 3; }), "4 attention heads are not divisible by tp 3");
  EXPECT_EQ(error_of([](auto& c) { c.global_batch = 10, c.zero = 3; }),
            "global batch 10 is not divisible by micro batch 2 x dp 2 = 4");
}

TEST(RunLayout, TheTrainersEntryPointAppliesTheRules) {
  RunConfig cfg;
  cfg.tp = 2, cfg.pp = 2, cfg.dp = 0, cfg.zero = 3, cfg.micro_batch = 2, cfg.global_batch = 8;
  try {
    validate_run_layout(cfg, 8);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("zero 3 with pp 2"), std::string::npos) << e.what();
  }
  cfg.zero = 1;
  const LayoutCandidate r = validate_run_layout(cfg, 8);
  EXPECT_EQ(r.dp, 2);  // derived
  cfg.order = "tp-xp-pp";  // the grid's own check comes after the rules
  EXPECT_THROW(validate_run_layout(cfg, 8), InputError);
}

// The config keys of HSDP: --dp N alone is dp_shard N x dp_replicate 1; dp_shard and
// dp_replicate resolve against dp (given or derived); a conflict is one message.
TEST(RunLayout, HybridShardedDpKeysResolveToTheGrid) {
  RunConfig cfg;
  cfg.tp = 2, cfg.zero = 3, cfg.micro_batch = 1, cfg.global_batch = 8;
  cfg.dp = 4;
  LayoutCandidate r = validate_run_layout(cfg, 8);
  EXPECT_EQ(r.dp, 4);
  EXPECT_EQ(r.dp_replicate, 1);
  EXPECT_EQ(r.dp_shard(), 4);
  cfg.dp = 0, cfg.dp_shard = 2, cfg.dp_replicate = 2;  // --tp 2 --dp-shard 2 --dp-replicate 2 on 8 ranks
  r = validate_run_layout(cfg, 8);
  EXPECT_EQ(r.dp, 4);
  EXPECT_EQ(r.dp_replicate, 2);
  EXPECT_EQ(r.dp_shard_request, 2);
  EXPECT_EQ(r.order, "tp-dp-pp");
  cfg.dp_shard = 0;  // derived: dp / dp_replicate
  EXPECT_EQ(validate_run_layout(cfg, 8).dp_shard_request, 2);
  cfg.dp = 4, cfg.dp_shard = 4, cfg.dp_replicate = 2;  // --dp 4 --dp-shard 4 --dp-replicate 2: conflict
  try {
    validate_run_layout(cfg, 8);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "dp 4 does not equal dp_shard 4 x dp_replicate 2 = 8");
  }
  cfg.dp = 0, cfg.dp_shard = 0, cfg.dp_replicate = 3;
  try {
    validate_run_layout(cfg, 8);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(),
                 "dp_replicate 3 does not divide dp 4 (world 8 / (tp 2 x pp 1)) (dp = dp_shard x dp_replicate)");
  }
}

// ------------------------------------------------------------ planner == trainer

constexpr int64_t kGlobalBatch = 12;

std::string key(int tp, int pp, int dp, int rep, int64_t mb, int zero, Recompute rc, int rcl, bool sp, PipeSchedule s,
                int v) {
  return fmt::format("tp {} pp {} dp {} rep {} mb {} zero {} {}({}) sp {} {} v{}", tp, pp, dp, rep, mb, zero,
                     recompute_name(rc), rcl, sp, schedule_name(s), v);
}
std::string key(const plan::Layout& l) {
  return key(l.tp, l.pp, l.dp, l.dp_replicate, l.micro_batch, l.zero, l.recompute, l.recompute_layers,
             l.sequence_parallel, l.schedule, l.virtual_stages);
}

// Every (tp, pp, dp) with tp x pp x dp = world, micro-batch dividing the global batch, ZeRO
// 0-3, sp off/on, each schedule, v in 1..layers and each recompute mode, and HSDP's
// dp_replicate over the search's domain (1, and with ZeRO 1-3 every divisor of dp leaving
// dp_shard >= 2; plan/search.h): the layouts that validate_run_layout accepts.
std::set<std::string> trainer_accepts(const std::string& preset, int world, int recompute_layers) {
  RunConfig cfg;
  cfg.model = preset;
  cfg.global_batch = kGlobalBatch;
  cfg.recompute_layers = recompute_layers;
  const int layers = cfg.model_config().n_layer;
  std::set<std::string> out;
  for (int tp = 1; tp <= world; ++tp) {
    for (int pp = 1; tp * pp <= world; ++pp) {
      if (world % (tp * pp) != 0) continue;
      cfg.tp = tp, cfg.pp = pp, cfg.dp = world / (tp * pp);
      for (int64_t mb = 1; mb <= kGlobalBatch; ++mb) {
        if (kGlobalBatch % mb != 0) continue;
        cfg.micro_batch = mb;
        for (int zero = 0; zero <= 3; ++zero) {
          for (int rep = 1; rep <= cfg.dp; ++rep) {
            if (cfg.dp % rep != 0 || (rep > 1 && (zero == 0 || cfg.dp / rep < 2))) continue;
            cfg.dp_replicate = rep;
            for (Recompute rc : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
              for (bool sp : {false, true}) {
                for (PipeSchedule s : {PipeSchedule::kGpipe, PipeSchedule::k1F1B, PipeSchedule::kInterleaved}) {
                  for (int v = 1; v <= layers; ++v) {
                    cfg.zero = zero, cfg.recompute = recompute_name(rc), cfg.sequence_parallel = sp;
                    cfg.schedule = schedule_name(s), cfg.virtual_stages = v;
                    try {
                      cfg.validate();  // as train() does before the layout
                      validate_run_layout(cfg, world);
                    } catch (const InputError&) {
                      continue;
                    }
                    out.insert(key(tp, pp, static_cast<int>(cfg.dp), rep, mb, zero, rc, recompute_layers, sp, s, v));
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  return out;
}

plan::Options options() {
  plan::Options o;
  o.precision = Precision::kFp32;  // RunConfig's default
  o.global_batch = kGlobalBatch;
  o.flash_attention = false;
  return o;
}

std::set<std::string> planner_lists(const plan::ModelShape& m, int world, const plan::Pins& pins) {
  std::set<std::string> out;
  try {
    for (const plan::Layout& l : plan::valid_layouts(m, world, options(), pins)) out.insert(key(l));
  } catch (const InputError&) {
    // no valid layout: the empty set
  }
  return out;
}

void expect_same(const std::set<std::string>& planner, const std::set<std::string>& trainer, const std::string& what) {
  for (const auto& k : planner) EXPECT_TRUE(trainer.count(k)) << what << ": the planner lists " << k << ", the trainer refuses it";
  for (const auto& k : trainer) EXPECT_TRUE(planner.count(k)) << what << ": the trainer accepts " << k << ", the planner does not list it";
}

TEST(LayoutAgreement, PlannerListsExactlyWhatTheTrainerAccepts) {
  for (const char* preset : {"tiny", "small"}) {
    const plan::ModelShape m = plan::ModelShape::from_config(model_preset(preset));
    for (int world = 1; world <= 8; ++world) {
      const std::set<std::string> planner = planner_lists(m, world, {});
      const std::set<std::string> trainer = trainer_accepts(preset, world, -1);
      std::printf("[ layouts ] %s on %d ranks, global batch %lld: the planner lists %zu, the trainer accepts %zu\n", preset,
                  world, static_cast<long long>(kGlobalBatch), planner.size(), trainer.size());
      expect_same(planner, trainer, fmt::format("{} on {} ranks", preset, world));
      // 5 and 7 ranks: dp 5 or 7 does not divide the batch of 12, pp 5 or 7 exceeds tiny's 4
      // layers (small takes pp 5: 6 layers split unevenly).
      EXPECT_EQ(planner.empty(), world == 7 || (world == 5 && std::string(preset) == "tiny")) << preset << " on " << world;
      // recompute_layers pinned: full recompute only, on both sides.
      plan::Pins pins;
      pins.recompute_layers = 1;
      expect_same(planner_lists(m, world, pins), trainer_accepts(preset, world, 1),
                  fmt::format("{} on {} ranks, recompute_layers 1", preset, world));
    }
  }
}

// The ranked search prices the valid layouts but the ones equivalent to a simpler layout
// (ZeRO > 0 with dp 1); with unbounded memory every one it prices is listed, and each is one
// the trainer accepts.
TEST(LayoutAgreement, RankedSearchListsOnlyValidLayouts) {
  plan::System sys = plan::load_system(std::string(WEFT_SOURCE_DIR) + "/systems/dgx-h100.toml");
  sys.device.memory_bytes = std::numeric_limits<double>::infinity();
  for (const char* preset : {"tiny", "small"}) {
    const plan::ModelShape m = plan::ModelShape::from_config(model_preset(preset));
    for (int world : {1, 4, 6, 8}) {
      const plan::SearchResult r =
          plan::search_layouts(m, sys, world, options(), {}, std::numeric_limits<size_t>::max());
      EXPECT_EQ(r.fitting, r.evaluated);
      EXPECT_EQ(static_cast<int64_t>(r.top.size()), r.evaluated);
      std::set<std::string> ranked, expected;
      for (const auto& p : r.top) ranked.insert(key(p.layout));
      for (const plan::Layout& l : plan::valid_layouts(m, world, options(), {})) {
        if (!(l.dp == 1 && l.zero > 0)) expected.insert(key(l));
      }
      EXPECT_EQ(ranked, expected) << preset << " on " << world;
      const std::set<std::string> trainer = trainer_accepts(preset, world, -1);
      for (const auto& k : ranked) EXPECT_TRUE(trainer.count(k)) << preset << ": ranked " << k << ", refused by the trainer";
    }
  }
}

}  // namespace
}  // namespace weft
