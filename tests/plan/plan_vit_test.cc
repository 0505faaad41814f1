// The planner on ClimaX Vision Transformers (what ClimaxDescription says of them): the shape's
// counts are the model's own (ClimaxDescription, ParamLayout); the search never proposes what the
// layout rules refuse for ClimaX (pp > 1, sequence parallelism, selective recompute); the
// communication model's tensor-parallel calls per micro-batch (the blocks' 4 all-reduces of N C,
// the aggregation's N C forward and V N C + C backward) and its ZeRO-3 replay; the compute model's
// FLOPs; `weft plan --model climax-...` prints ranked layouts like the GPT presets.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "model/climax/climax_config.h"
#include "model/climax/climax_description.h"
#include "model/params.h"
#include "plan/comm_model.h"
#include "plan/predict.h"
#include "plan/search.h"
#include "plan_test_util.h"
#include "test_util.h"
#include "train/config.h"
#include "train/engine_config.h"

namespace weft::plan {
namespace {

using test::RunResult;

ModelShape vit(const char* preset) { return ModelShape::from_config(model_preset(preset)); }

TEST(PlanVit, ShapeCountsAreTheModelsOwn) {
  for (const char* name : {"climax-tiny", "climax", "orbit-115m", "orbit-1b", "orbit-10b", "orbit-113b"}) {
    const ModelConfig mc = model_preset(name);
    const ModelShape m = ModelShape::from_config(mc, 12345);  // a ClimaX sequence is its patches
    m.validate();
    EXPECT_EQ(m.family, &climax_family()) << name;
    EXPECT_EQ(m.seq, num_patches(mc)) << name;
    ClimaxRunSpec s;
    s.model = mc;
    const ClimaxDescription d(s);
    EXPECT_EQ(m.total_params(), static_cast<double>(d.total_params())) << name;
    EXPECT_EQ(m.layer_params(), static_cast<double>(d.layer_params(1))) << name;
    EXPECT_EQ(m.model_flops_per_token(), ClimaxDescription::train_flops_per_token(mc)) << name;
    EXPECT_EQ(climax_fields(m.config()).decoder_depth, climax_fields(mc).decoder_depth) << name;
    std::printf("%-12s %8.4g B parameters, %lld patches, %.4g GFLOP per patch token\n", name, m.total_params() / 1e9,
                static_cast<long long>(m.seq), m.model_flops_per_token() / 1e9);
  }
  // What the data-parallel store lays out: the description's rank parameters and groups, tp 1 and 2.
  const ModelConfig mc = model_preset("climax-tiny");
  for (int tp : {1, 2}) {
    Layout l;
    l.tp = tp;
    const ClimaxDescription d(ClimaxRunSpec{.model = mc, .tp = tp});
    const ParamLayout layout = param_layout(mc, tp, 0);
    EXPECT_EQ(layout.total(), d.rank_params()) << tp;
    EXPECT_EQ(layout.group_range(0).second - layout.group_range(0).first, d.front_params(tp)) << tp;
    EXPECT_EQ(layout.group_range(1).second - layout.group_range(1).first, d.layer_params(tp)) << tp;
    const int G = mc.n_layer + 1;
    EXPECT_EQ(layout.group_range(G).second - layout.group_range(G).first, d.back_params()) << tp;
    EXPECT_EQ(stage_params_per_rank(vit("climax-tiny"), l, 0), static_cast<double>(d.rank_params()));
  }
}

TEST(PlanVit, SearchNeverProposesPipelinesSequenceParallelismOrSelectiveRecompute) {
  const ModelShape m = vit("climax-tiny");
  const System sys = plan_test::one_level(1e10, 1e-6);
  const Options o = Options::from_system(sys, Precision::kFp32, 16);
  const std::vector<Layout> all = valid_layouts(m, 8, o, {});
  ASSERT_FALSE(all.empty());
  bool tp2 = false;
  for (const Layout& l : all) {
    EXPECT_EQ(l.pp, 1) << l.describe();
    EXPECT_FALSE(l.sequence_parallel) << l.describe();
    EXPECT_NE(l.recompute, Recompute::kSelective) << l.describe();
    tp2 |= l.tp == 2;
  }
  EXPECT_TRUE(tp2);
  const SearchResult r = search_layouts(m, sys, 8, o, {}, 1000);
  ASSERT_FALSE(r.top.empty());
  for (const Prediction& p : r.top) EXPECT_EQ(p.layout.pp, 1);
  // Pinned, they are refused with the family rule the trainer applies.
  Pins pp;
  pp.pp = 2;
  try {
    valid_layouts(m, 8, o, pp);
    ADD_FAILURE() << "pp 2 accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("ClimaX models run without pipeline stages"), std::string::npos) << e.what();
  }
  Pins sp;
  sp.sequence_parallel = true;
  EXPECT_THROW(valid_layouts(m, 8, o, sp), InputError);
  Layout bad;
  bad.tp = 2;
  bad.sequence_parallel = true;
  EXPECT_THROW(predict(m, sys, bad, o), InputError);
}

// One tp group's calls of one step, in bytes of one kind of collective (the scalars aside).
int64_t tp_bytes(const std::vector<CommCall>& calls, int64_t min_bytes = 9) {
  int64_t b = 0;
  for (const CommCall& c : calls) {
    if (c.axis == "tp" && c.bytes >= min_bytes && c.ranks.front() == 0) b += c.bytes * c.count;
  }
  return b;
}

TEST(PlanVit, TensorParallelCallsIncludeTheAggregationsVTimesAllReduce) {
  const ModelConfig mc = model_preset("climax-tiny");
  RunConfig cfg;
  cfg.model = "climax-tiny";
  cfg.tp = 2;
  cfg.dp = 2;
  cfg.global_batch = 8;
  cfg.micro_batch = 2;
  cfg.zero = 3;
  const EngineConfig ec = engine_config(cfg, mc, 4);
  const int64_t m = 2, N = 2 * num_patches(mc), C = mc.n_embd, V = mc.vars, Ld = mc.n_layer;
  // Per micro-batch: 4 all-reduces of N C per block, the aggregation's N C + V N C + C.
  EXPECT_EQ(tp_bytes(model_step_comm(ec)), 4 * m * (4 * Ld * N * C + N * C + V * N * C + C));
  // The planner prices the same bytes (fp32 wires).
  const System sys = plan_test::one_level(1e10, 1e-6);
  Layout l;
  l.tp = 2, l.dp = 2, l.micro_batch = 2, l.zero = 3;
  const Prediction p = predict(ModelShape::from_config(mc), sys, l, Options::from_system(sys, Precision::kFp32, 8));
  EXPECT_EQ(p.traffic.tp.raw, static_cast<double>(tp_bytes(model_step_comm(ec))));
  // The variable aggregation's backward moves V times a block's all-reduce.
  const ClimaxDescription d(ClimaxRunSpec{.model = mc, .B = l.micro_batch, .tp = l.tp});
  EXPECT_EQ(d.aggregation_grad_elems(), V * d.tokens() * C);
  const EndsWork w = d.ends_work();
  ASSERT_EQ(w.front_backward.tp.size(), 2u);
  EXPECT_EQ(w.front_backward.tp[0].elems, static_cast<double>(V * N * C));
  EXPECT_EQ(w.front_forward.tp.at(0).elems, static_cast<double>(N * C));
  // ZeRO-3's gathers per micro-batch (steady state) from the replay of ClimaX's accesses: its
  // backward takes the back group before the first gradient and the front last, so it prefetches
  // no layer there as the GPT's does; climax-tiny's 2 blocks stay in the buffers (none), 62
  // blocks (orbit-113b) are gathered about twice. The run's comm report checks the replay call
  // for call (tests/train/climax_prediction_test.cc).
  EXPECT_EQ(zero3_gathers_per_micro_batch(mc.n_layer, 1, mc.capabilities().tied_head), 0.0);
  const double climax = zero3_gathers_per_micro_batch(62, 1, false), gpt = zero3_gathers_per_micro_batch(62, 1, true);
  EXPECT_GT(climax, 1.5);
  EXPECT_LE(climax, gpt);
  std::printf("ZeRO-3 layer gathers per micro-batch, 62 layers: ClimaX %.4f, GPT %.4f\n", climax, gpt);
  for (const CommCall& c : model_step_comm(ec)) EXPECT_NE(c.op, "send") << c.axis;  // no pipeline
}

// The ends' products carry the operand layouts the cpu backend runs (a CPU's table prices them
// apart): forward A B, backward the input gradient A B^T and the weight gradient A^T B, one weight
// gradient per forward product (the patch embeddings' per variable).
TEST(PlanVit, BackwardProductsAreTheInputAndWeightGradientLayouts) {
  const ModelConfig mc = model_preset("climax-tiny");
  const plan_test::EndLayouts e = plan_test::end_layouts(ClimaxDescription(ClimaxRunSpec{.model = mc, .B = 2, .tp = 1}).ends_work());
  EXPECT_GT(e.forward, 0);
  EXPECT_EQ(e.forward_not_ab, 0);
  EXPECT_EQ(e.weight_gradients, e.forward);
  EXPECT_TRUE(e.backward_ab.empty()) << e.backward_ab.front();
}

TEST(PlanVit, ComputeCountsTheModelsFlops) {
  // One device, no recompute, no FlashAttention: the hardware FLOPs of a step are the model's
  // (3x the forward) but for the patch embeddings' backward, which computes no input gradient.
  const ModelShape m = vit("orbit-1b");
  System sys = plan_test::one_level(1e10, 1e-6);
  sys.device.memory_bytes = 1e15;
  Options o = Options::from_system(sys, Precision::kBf16, 4);
  Layout l;
  l.micro_batch = 1;
  const Prediction p = predict(m, sys, l, o);
  EXPECT_NEAR(p.hardware_flops / p.model_flops, 1.0, 1e-3);
  EXPECT_LT(p.hardware_flops, p.model_flops);
  // Full recompute adds one block forward per layer.
  l.recompute = Recompute::kFull;
  const Prediction r = predict(m, sys, l, o);
  ClimaxRunSpec s;
  s.model = m.config();
  s.recompute = Recompute::kFull;
  const double extra = ClimaxDescription(s).recompute_flops_per_token() * 4 * static_cast<double>(m.seq);
  EXPECT_NEAR(r.hardware_flops - p.hardware_flops, extra, 1e-6 * extra);
  // tp 2: the aggregation's collectives appear in the tp time; the memory is the 16-bit model's.
  l.recompute = Recompute::kNone;
  l.tp = 2;
  const Prediction t = predict(m, sys, l, o);
  EXPECT_GT(t.time.tp_comm, 0.0);
  EXPECT_LT(t.memory.params, p.memory.params);
  // Bidirectional attention under FlashAttention: twice the causal kernel's time.
  System flash = sys;
  flash.device.attention_efficiency = 0.5;
  flash.device.attention_bwd_efficiency = 0.4;
  o.flash_attention = true;
  const Prediction f = predict(m, flash, Layout{}, o);
  EXPECT_GT(f.time.compute, 0.0);
}

TEST(PlanVit, OrbitOnFrontierFitsFromAFewHundredGcds) {
  const System sys = load_system(std::string(WEFT_SOURCE_DIR) + "/systems/frontier.toml");
  const Options o = Options::from_system(sys, Precision::kBf16, 3072);
  const SearchResult r = search_layouts(vit("orbit-113b"), sys, 24576, o, {}, 3);
  ASSERT_FALSE(r.top.empty());
  const Prediction& best = r.top.front();
  EXPECT_EQ(best.layout.pp, 1);
  EXPECT_TRUE(best.fits);
  EXPECT_GT(best.mfu, 0.05);
  EXPECT_LT(best.mfu, 0.8);
  EXPECT_LT(r.seconds, 30.0);
  std::printf("orbit-113b on 24576 GCDs, batch 3072: %s, %.4g s/step, MFU %.1f%%, %.1f GB (%lld layouts in %.2f s)\n",
              best.layout.describe().c_str(), best.step_time_s, 100 * best.mfu, best.memory.total / 1e9,
              static_cast<long long>(r.evaluated), r.seconds);
}

class PlanVitCli : public ::testing::Test {
 protected:
  void SetUp() override { tmp = std::make_unique<test::TempDir>("plan-vit"); }
  RunResult weft(const std::string& args) { return test::run_weft(args, *tmp / fmt::format("cmd{}", n++)); }
  std::unique_ptr<test::TempDir> tmp;
  int n = 0;
};

TEST_F(PlanVitCli, ClimaxPresetsPrintRankedLayouts) {
  RunResult r = weft("plan --model climax-tiny --system systems/dgx-h100.toml --gpus 8 --global-batch 64 --top 3");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("climax-tiny"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("searched"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" beats "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tokens are patches"), std::string::npos) << r.out;
  r = weft("plan --model orbit-113b --system systems/frontier.toml --gpus 24576 --global-batch 3072 --top 3 --format json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 3u);
  for (const auto& e : j) {
    EXPECT_EQ(e["layout"]["pp"], 1);
    EXPECT_FALSE(e["layout"]["sequence_parallel"].get<bool>());
    EXPECT_TRUE(e["fits"].get<bool>());
  }
  r = weft("plan --model orbit-10b --system systems/frontier.toml --gpus 512 --global-batch 1024 --explain");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("front (patch embeddings, variable aggregation)"), std::string::npos) << r.out;
  // Pins the layout rules refuse for ClimaX, and options that do not apply.
  r = weft("plan --model climax-tiny --system systems/dgx-h100.toml --gpus 4 --global-batch 8 --pp 2");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("ClimaX models run without pipeline stages: pp must be 1, got 2"), std::string::npos) << r.err;
  r = weft("plan --model climax-tiny --system systems/dgx-h100.toml --gpus 4 --global-batch 8 --tp 2 --sequence-parallel");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("sequence parallelism is not available for ClimaX models"), std::string::npos) << r.err;
  r = weft("plan --model climax-tiny --system systems/dgx-h100.toml --gpus 4 --global-batch 8 --vocab 1000");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("do not apply to the ClimaX model 'climax-tiny'"), std::string::npos) << r.err;
  // Strong scaling.
  r = weft("plan --model orbit-10b --system systems/frontier.toml --gpus 4096 --global-batch 4096 --scaling strong "
           "--scaling-gpus 512,1024,2048,4096");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("strong scaling of orbit-10b"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace weft::plan
