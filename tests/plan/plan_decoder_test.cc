// The planner on the decoder variants (model/config.h's BlockOptions): the Llama 3.1 presets have
// their published parameter counts; a stage's parameters per rank are ParamLayout's (tied and
// untied heads); grouped-query attention and SwiGLU change the products, FLOPs and activations
// the planner prices by exactly what the description says.
#include <gtest/gtest.h>

#include "model/family.h"
#include "model/params.h"
#include "parallel/pp/partition.h"
#include "plan/memory.h"
#include "plan/search.h"

namespace weft::plan {
namespace {

// Dubey et al. 2024 ("The Llama 3 Herd of Models") and the released checkpoints: 8.03B, 70.55B,
// 405.85B parameters, embeddings and an untied head included; GPT-NeoX-20B (Black et al. 2022):
// 20,554,567,680; MPT-1B (mpt-1b-redpajama-200b without its QK LayerNorm: 1.3B) and MPT-7B (6.7B,
// mosaicml/mpt-7b's 6,649,286,656), no biases, tied heads.
TEST(PlanDecoders, LlamaPresetsHaveTheirPublishedParameterCounts) {
  const std::pair<const char*, int64_t> cases[] = {
      {"llama3-8b", 8'030'261'248}, {"llama3-70b", 70'553'706'496}, {"llama3-405b", 405'853'388'800},
      {"neox-20b", 20'554'567'680}, {"mpt-1b", 1'311'344'640}, {"mpt-7b", 6'649'286'656}};
  for (const auto& [name, count] : cases) {
    const ModelConfig c = model_preset(name);
    EXPECT_EQ(param_layout(c).total_full(), count) << name;
    EXPECT_DOUBLE_EQ(ModelShape::from_config(c).total_params(), static_cast<double>(count)) << name;
  }
}

TEST(PlanDecoders, StageParamsPerRankAreTheLayouts) {
  ModelConfig untied = model_preset("llama-tiny");
  untied = untied.family->with_settings(untied, {{"tie_embeddings", "false"}});
  for (const ModelConfig& cfg : {model_preset("llama-tiny"), untied}) {
    const ModelShape m = ModelShape::from_config(cfg);
    EXPECT_DOUBLE_EQ(m.total_params(), static_cast<double>(param_layout(cfg).total_full()));
    for (int tp : {1, 2}) {
      Layout l;
      l.tp = tp;
      l.pp = 2;
      const auto parts = partition_layers(cfg.n_layer, 2, 1, {}, pipeline_head_cost(cfg));
      const StageSpec first{0, parts[0].num_layers, true, false}, last{parts[1].first_layer, parts[1].num_layers, false, true};
      const std::string who = fmt::format("{} tied {} tp {}", cfg.name, cfg.block.tie_embeddings, tp);
      EXPECT_DOUBLE_EQ(stage_params_per_rank(m, l, 0), static_cast<double>(param_layout(cfg, tp, 0, first).total())) << who;
      EXPECT_DOUBLE_EQ(stage_params_per_rank(m, l, 1), static_cast<double>(param_layout(cfg, tp, 0, last).total())) << who;
    }
  }
}

TEST(PlanDecoders, GroupedQueryAttentionPricesSmallerProducts) {
  const System sys = load_system(std::string(WEFT_SOURCE_DIR) + "/systems/dgx-h100.toml");
  const ModelConfig gqa = model_preset("llama3-8b");
  const ModelConfig mha = gqa.family->with_settings(gqa, {{"n_kv_head", "32"}});
  const ModelShape mg = ModelShape::from_config(gqa, 4096), mm = ModelShape::from_config(mha, 4096);
  // FLOPs per token: the k and v products of 2 C (C - KV) parameters a layer, 6 FLOPs each.
  const double L = 32, C = 4096, KV = 1024;
  EXPECT_DOUBLE_EQ(mm.model_flops_per_token() - mg.model_flops_per_token(), 6 * L * 2 * C * (C - KV));
  Options o = Options::from_system(sys, Precision::kBf16, 64);
  Layout l;
  l.tp = 8, l.pp = 1, l.dp = 1, l.micro_batch = 1, l.recompute = Recompute::kSelective, l.sequence_parallel = true;
  const Prediction pg = predict(mg, sys, l, o), pm = predict(mm, sys, l, o);
  EXPECT_LT(pg.time.compute, pm.time.compute);
  EXPECT_LT(pg.memory.activations, pm.memory.activations);  // k and v stashed at the kv width
  EXPECT_LT(pg.memory.params, pm.memory.params);
  // 8 kv heads over tp 16 (Megatron-LM's replication): each on 2 ranks, a rank's parameters
  // ParamLayout's (one kv head each); a system of 8 GPUs a node prices it across nodes.
  l.tp = 16;
  EXPECT_DOUBLE_EQ(stage_params_per_rank(mg, l, 0), static_cast<double>(param_layout(gqa, 16, 0).total()));
  const Prediction p16 = predict(mg, sys, l, o);
  EXPECT_GT(p16.step_time_s, 0.0);
  EXPECT_GT(p16.time.tp_comm, 0.0);
  // Every layer's backward sums the replicated kv columns' gradients: c_attn's 4096 rows of
  // 2 x 128 columns, a slot for each of the 8 heads.
  EXPECT_EQ(kv_replica_sum_elems(gqa, 16), 8 * 4096 * 256);
  EXPECT_EQ(kv_replica_sum_elems(gqa, 8), 0);
}

}  // namespace
}  // namespace weft
