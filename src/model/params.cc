#include "model/params.h"

#include <fmt/format.h>

#include <cmath>
#include <span>

#include "core/error.h"
#include "model/family.h"

namespace weft {

void check_tp_split(const ModelConfig& cfg, int tp_size) {
  if (tp_size < 1) throw_input("tensor-parallel size {} must be at least 1", tp_size);
  if (cfg.n_head % tp_size != 0) throw_input("{} attention heads are not divisible by tp {}", cfg.n_head, tp_size);
  if (cfg.ffn % tp_size != 0) throw_input("MLP size {} is not divisible by tp {}", cfg.ffn, tp_size);
  if (cfg.padded_vocab % tp_size != 0) throw_input("padded vocabulary {} is not divisible by tp {}", cfg.padded_vocab, tp_size);
}

std::vector<ParamSpec> block_param_specs(const ModelConfig& cfg, const std::string& prefix,
                                         const char* const names[kParamsPerLayer], bool residual_scaled) {
  using S = TpSplit;
  using I = ParamInit;
  const int64_t C = cfg.n_embd, F = cfg.ffn;
  const I proj = residual_scaled ? I::kNormalResidual : I::kNormal;
  auto n = [&](int i) { return prefix + names[i]; };
  return {{n(0), 0, {C}, S::kReplicated, false, I::kOnes},
          {n(1), 0, {C}, S::kReplicated, false, I::kZeros},
          {n(2), 0, {C, 3 * C}, S::kQkvCols, true, I::kNormal},
          {n(3), 0, {3 * C}, S::kQkvCols, false, I::kZeros},
          {n(4), 0, {C, C}, S::kRows, true, proj},
          {n(5), 0, {C}, S::kReplicated, false, I::kZeros},
          {n(6), 0, {C}, S::kReplicated, false, I::kOnes},
          {n(7), 0, {C}, S::kReplicated, false, I::kZeros},
          {n(8), 0, {C, F}, S::kCols, true, I::kNormal},
          {n(9), 0, {F}, S::kCols, false, I::kZeros},
          {n(10), 0, {F, C}, S::kRows, true, proj},
          {n(11), 0, {C}, S::kReplicated, false, I::kZeros}};
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
  WEFT_CHECK(t.size() == kParamsPerLayer, "layer {} has {} tensors, a block has {}", l, t.size(), kParamsPerLayer);
  auto at = [&](int i) { return offset(base, t[static_cast<size_t>(i)].offset - t[0].offset); };
  return LayerSet<P>{at(0), at(1), at(2), at(3), at(4), at(5), at(6), at(7), at(8), at(9), at(10), at(11)};
}
}  // namespace

LayerPtrs layer_ptrs(const ParamLayout& layout, int l, float* base) {
  return layer_set(layout, l, base, [](float* b, int64_t i) { return b + i; });
}

LayerWeights layer_weights(const ParamLayout& layout, int l, CView base) {
  return layer_set(layout, l, base, [](CView b, int64_t i) { return b.at(i); });
}

void final_ptrs(const ParamLayout& layout, CView base, CView* lnfw, CView* lnfb) {
  const int g = layout.model_layers() + 1;
  WEFT_CHECK(layout.has_group(g), "the final LayerNorm is not in this part of the model");
  const std::span<const ParamTensor> t = layout.group_tensors(g);
  *lnfw = base;
  *lnfb = base.at(t[1].offset - t[0].offset);
}

void final_ptrs(const ParamLayout& layout, float* base, float** lnfw, float** lnfb) {
  const int g = layout.model_layers() + 1;
  WEFT_CHECK(layout.has_group(g), "the final LayerNorm is not in this part of the model");
  const std::span<const ParamTensor> t = layout.group_tensors(g);
  *lnfw = base;
  *lnfb = base + (t[1].offset - t[0].offset);
}

}  // namespace weft
