#include "model/params.h"

#include <fmt/format.h>

#include <cmath>
#include <span>

#include "core/error.h"
#include "model/family.h"
#include "parallel/tp/mappings.h"

namespace weft {

void check_tp_split(const ModelConfig& cfg, int tp_size) {
  if (tp_size < 1) throw_input("tensor-parallel size {} must be at least 1", tp_size);
  if (cfg.n_head % tp_size != 0) throw_input("{} attention heads are not divisible by tp {}", cfg.n_head, tp_size);
  if (cfg.ffn % tp_size != 0) throw_input("MLP size {} is not divisible by tp {}", cfg.ffn, tp_size);
  if (cfg.kv_heads() % tp_size != 0 && tp_size % cfg.kv_heads() != 0) {
    throw_input("{} key/value heads (n_kv_head) neither divide among tp {} ranks nor divide tp: each rank holds whole "
                "key/value heads, split or (fewer heads than ranks) replicated on tp / n_kv_head ranks each "
                "(Megatron-LM's rule for grouped-query attention)", cfg.kv_heads(), tp_size);
  }
  if (cfg.padded_vocab % tp_size != 0) throw_input("padded vocabulary {} is not divisible by tp {}", cfg.padded_vocab, tp_size);
}

int64_t kv_replica_sum_elems(const ModelConfig& cfg, int tp_size) {
  return TensorParallel::replica_sum_elems(tp_size, cfg.kv_replicas(tp_size), cfg.n_embd, cfg.block.bias,
                                           2 * int64_t{cfg.kv_heads_local(tp_size)} * cfg.head_dim());
}

std::vector<ParamSpec> block_param_specs(const ModelConfig& cfg, const std::string& prefix,
                                         const char* const names[kParamsPerLayer], bool residual_scaled) {
  using S = TpSplit;
  using I = ParamInit;
  const BlockOptions& o = cfg.block;
  const int64_t C = cfg.n_embd, F = cfg.ffn, KV = int64_t{cfg.kv_heads()} * cfg.head_dim();
  const int64_t QKV = cfg.qkv_width(), FC = cfg.fc_width();
  const I proj = residual_scaled ? I::kNormalResidual : I::kNormal;
  // Every tensor carries its place in LayerSet (tag = index + 1): a block without biases (or
  // RMSNorm's, which has none) leaves those places empty.
  auto n = [&](int i) { return prefix + names[i]; };
  std::vector<ParamSpec> p = {{n(0), 1, {C}, S::kReplicated, false, I::kOnes},
                              {n(1), 2, {C}, S::kReplicated, false, I::kZeros},
                              {n(2), 3, {C, QKV}, S::kQkvCols, true, I::kNormal},
                              {n(3), 4, {QKV}, S::kQkvCols, false, I::kZeros},
                              {n(4), 5, {C, C}, S::kRows, true, proj},
                              {n(5), 6, {C}, S::kReplicated, false, I::kZeros},
                              {n(6), 7, {C}, S::kReplicated, false, I::kOnes},
                              {n(7), 8, {C}, S::kReplicated, false, I::kZeros},
                              {n(8), 9, {C, FC}, FC == F ? S::kCols : S::kQkvCols, true, I::kNormal},
                              {n(9), 10, {FC}, FC == F ? S::kCols : S::kQkvCols, false, I::kZeros},
                              {n(10), 11, {F, C}, S::kRows, true, proj},
                              {n(11), 12, {C}, S::kReplicated, false, I::kZeros}};
  if (QKV != 3 * C) {  // grouped-query attention: whole heads, k and v replicated with fewer kv heads than ranks
    const int64_t hd = cfg.head_dim();
    p[2].col_blocks = p[3].col_blocks = {C, KV, KV};
    p[2].col_units = p[3].col_units = {hd, hd, hd};
  }
  if (FC != F) p[8].col_blocks = p[9].col_blocks = {F, F};            // SwiGLU: gate, up
  std::vector<ParamSpec> out;
  for (size_t i = 0; i < p.size(); ++i) {
    const bool norm_bias = i == 1 || i == 7;
    const bool linear_bias = i == 3 || i == 5 || i == 9 || i == 11;
    if (norm_bias && (o.norm == NormKind::kRmsNorm || !o.bias)) continue;
    if (linear_bias && !o.bias) continue;
    out.push_back(std::move(p[i]));
  }
  return out;
}

ParamTable model_param_table(const ModelConfig& cfg) {
  ParamTable table = cfg.family->param_table(cfg);
  WEFT_CHECK(static_cast<int>(table.layers.size()) == cfg.n_layer, "{}: {} layers of parameters for {} layers",
             cfg.name, table.layers.size(), cfg.n_layer);
  // GPT-2 scales the residual projections by 1/sqrt(2L); ClimaX (timm) does not.
  const float proj_std = cfg.init_std / std::sqrt(2.0f * static_cast<float>(cfg.n_layer));
  // A normal tensor whose family set its std (a graph network's fan-in scaling) keeps it.
  auto resolve = [&](std::vector<ParamSpec>& specs) {
    for (ParamSpec& p : specs) {
      if (p.init == ParamInit::kNormal && p.std == 0.0f) p.std = cfg.init_std;
      if (p.init == ParamInit::kNormalResidual) p.std = proj_std;
    }
  };
  resolve(table.front);
  for (size_t l = 0; l < table.layers.size(); ++l) {  // a layer of the shared block: layer_set checks its tensors
    WEFT_CHECK(!table.layers[l].empty(), "{}: layer {} has no tensors", cfg.name, l);
    resolve(table.layers[l]);
  }
  resolve(table.back);
  table.init_value = [cfg](const ParamTensor& t, int64_t i) { return cfg.family->init_value(cfg, t, i); };
  return table;
}

ParamLayout param_layout(const ModelConfig& cfg, int tp_size, int tp_rank, const StageSpec& stage) {
  resolve_stage(cfg, stage);  // the stage's error first
  cfg.validate();
  check_tp_split(cfg, tp_size);  // the rank is ParamLayout's check
  return ParamLayout(model_param_table(cfg), tp_size, tp_rank, stage);
}

namespace {
// Layer l's tensors at `base` (a float* or a view: offset(base, i) moves i elements on).
template <class P, class Offset>
LayerSet<P> layer_set(const ParamLayout& layout, int l, P base, Offset offset) {
  WEFT_CHECK(l >= 0 && l < layout.model_layers() && layout.has_group(l + 1), "layer {} is not in this part of the model", l);
  // Per layer and micro-batch (forward, backward, recompute): offsets only, nothing allocated.
  const std::span<const ParamTensor> t = layout.group_tensors(l + 1);
  WEFT_CHECK(!t.empty() && t.size() <= kParamsPerLayer, "layer {} has {} tensors, a block has at most {}", l, t.size(),
             kParamsPerLayer);
  // A tensor's place is its tag (block_param_specs); tag 0: the places in order. Absent places
  // (a block without biases) stay null.
  P at[kParamsPerLayer] = {};
  for (size_t k = 0; k < t.size(); ++k) {
    const int place = t[k].tag > 0 ? t[k].tag - 1 : static_cast<int>(k);
    WEFT_CHECK(place < kParamsPerLayer && (t[k].tag > 0 || t.size() == kParamsPerLayer), "layer {}: tensor {} has tag {}", l,
               t[k].name, t[k].tag);
    at[place] = offset(base, t[k].offset - t[0].offset);
  }
  return LayerSet<P>{at[0], at[1], at[2], at[3], at[4], at[5], at[6], at[7], at[8], at[9], at[10], at[11]};
}
}  // namespace

LayerPtrs layer_ptrs(const ParamLayout& layout, int l, float* base) {
  return layer_set(layout, l, base, [](float* b, int64_t i) { return b + i; });
}

LayerWeights layer_weights(const ParamLayout& layout, int l, CView base) {
  return layer_set(layout, l, base, [](CView b, int64_t i) { return b.at(i); });
}

namespace {
// The back group's tensors by place (tag: 1 the final norm's weight, 2 its bias, 3 an untied head;
// tag 0: the places in order); absent ones null.
template <class P, class Offset>
void back_set(const ParamLayout& layout, P base, Offset offset, P* lnfw, P* lnfb, P* head) {
  const int g = layout.model_layers() + 1;
  WEFT_CHECK(layout.has_group(g), "the final norm is not in this part of the model");
  const std::span<const ParamTensor> t = layout.group_tensors(g);
  P at[3] = {};
  for (size_t k = 0; k < t.size() && k < 3; ++k) {
    const int place = t[k].tag > 0 ? t[k].tag - 1 : static_cast<int>(k);
    WEFT_CHECK(place >= 0 && place < 3, "back tensor {} has tag {}", t[k].name, t[k].tag);
    at[place] = offset(base, t[k].offset - t[0].offset);
  }
  *lnfw = at[0];
  *lnfb = at[1];
  if (head != nullptr) *head = at[2];
}
}  // namespace

void final_ptrs(const ParamLayout& layout, CView base, CView* lnfw, CView* lnfb, CView* head) {
  back_set(layout, base, [](CView b, int64_t i) { return b.at(i); }, lnfw, lnfb, head);
}

void final_ptrs(const ParamLayout& layout, float* base, float** lnfw, float** lnfb, float** head) {
  back_set(layout, base, [](float* b, int64_t i) { return b + i; }, lnfw, lnfb, head);
}

}  // namespace weft
