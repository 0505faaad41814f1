#include "model/params.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/family.h"
#include "core/rng.h"

namespace weft {

StageSpec resolve_stage(const ModelConfig& cfg, StageSpec stage) {
  if (stage.num_layers < 0) stage.num_layers = cfg.n_layer - stage.first_layer;
  if (stage.first_layer < 0 || stage.first_layer + stage.num_layers > cfg.n_layer) {
    throw_input("pipeline stage layers [{}, {}) outside the model's {} layers", stage.first_layer,
                stage.first_layer + stage.num_layers, cfg.n_layer);
  }
  return stage;
}

void check_tp_split(const ModelConfig& cfg, int tp_size) {
  if (tp_size < 1) throw_input("tensor-parallel size {} must be at least 1", tp_size);
  if (cfg.n_head % tp_size != 0) throw_input("{} attention heads are not divisible by tp {}", cfg.n_head, tp_size);
  if (cfg.ffn % tp_size != 0) throw_input("MLP size {} is not divisible by tp {}", cfg.ffn, tp_size);
  if (cfg.padded_vocab % tp_size != 0) throw_input("padded vocabulary {} is not divisible by tp {}", cfg.padded_vocab, tp_size);
}

ParamLayout::ParamLayout(const ModelConfig& cfg, int tp_size, int tp_rank, const StageSpec& stage)
    : cfg_(cfg), tp_size_(tp_size), tp_rank_(tp_rank), stage_(resolve_stage(cfg, stage)) {
  layer_first_.assign(cfg.n_layer, -1);
  cfg_.validate();
  if (tp_size < 1 || tp_rank < 0 || tp_rank >= tp_size) throw_input("tensor-parallel rank {} of {}", tp_rank, tp_size);
  check_tp_split(cfg, tp_size);
  // The family's tensors in its order: the ids (the initialisation's RNG streams) follow it.
  const ParamTable table = cfg.family->param_table(cfg);
  WEFT_CHECK(static_cast<int>(table.layers.size()) == cfg.n_layer, "{}: {} layers of parameters for {} layers",
             cfg.name, table.layers.size(), cfg.n_layer);
  include_ = stage_.embedding || (table.front_with_head && stage_.head);
  if (include_ && !table.front.empty()) emb_ = static_cast<int>(tensors_.size());
  for (const ParamSpec& p : table.front) add(p, -1);
  if (emb_ >= 0) emb_end_ = static_cast<int>(tensors_.size());
  for (int l = 0; l < cfg.n_layer; ++l) {
    const auto& specs = table.layers[static_cast<size_t>(l)];
    WEFT_CHECK(specs.size() == kParamsPerLayer, "{}: layer {} has {} tensors, a block has {}", cfg.name, l,
               specs.size(), kParamsPerLayer);
    include_ = l >= stage_.first_layer && l < stage_.first_layer + stage_.num_layers;
    if (include_) layer_first_[l] = static_cast<int>(tensors_.size());
    for (const ParamSpec& p : specs) add(p, l);
  }
  include_ = stage_.head;
  if (include_ && !table.back.empty()) final_ = static_cast<int>(tensors_.size());
  for (const ParamSpec& p : table.back) add(p, -1);
  if (final_ >= 0) final_end_ = static_cast<int>(tensors_.size());
}

void ParamLayout::add(const ParamSpec& spec, int layer) {
  const uint64_t id = next_id_++;
  if (!include_) return;
  const int64_t P = tp_size_;
  ParamTensor t;
  t.name = spec.name;
  t.kind = spec.kind;
  t.layer = layer;
  t.full_shape = spec.full;
  t.hf_shape = spec.hf_shape.empty() ? spec.full : spec.hf_shape;
  t.split = P == 1 ? TpSplit::kReplicated : spec.split;
  t.shape = spec.full;
  if (t.split == TpSplit::kRows) t.shape[0] /= P;
  if (t.split == TpSplit::kCols || t.split == TpSplit::kQkvCols || t.split == TpSplit::kKvCols) t.shape.back() /= P;
  t.offset = total_;
  t.numel = 1;
  for (int64_t d : t.shape) t.numel *= d;
  t.id = id;
  t.weight_decay = spec.decay;
  t.init = spec.init;
  t.live = spec.live;
  total_ += t.numel;
  tensors_.push_back(std::move(t));
}

std::vector<ParamSpec> block_param_specs(const ModelConfig& cfg, const std::string& prefix,
                                         const char* const names[kParamsPerLayer], bool residual_scaled) {
  using S = TpSplit;
  using K = ParamKind;
  using I = ParamInit;
  const int64_t C = cfg.n_embd, F = cfg.ffn;
  const I proj = residual_scaled ? I::kNormalResidual : I::kNormal;
  auto n = [&](int i) { return prefix + names[i]; };
  return {{n(0), K::kLn1W, {C}, S::kReplicated, false, I::kOnes},
          {n(1), K::kLn1B, {C}, S::kReplicated, false, I::kZeros},
          {n(2), K::kQkvW, {C, 3 * C}, S::kQkvCols, true, I::kNormal},
          {n(3), K::kQkvB, {3 * C}, S::kQkvCols, false, I::kZeros},
          {n(4), K::kAttnProjW, {C, C}, S::kRows, true, proj},
          {n(5), K::kAttnProjB, {C}, S::kReplicated, false, I::kZeros},
          {n(6), K::kLn2W, {C}, S::kReplicated, false, I::kOnes},
          {n(7), K::kLn2B, {C}, S::kReplicated, false, I::kZeros},
          {n(8), K::kFcW, {C, F}, S::kCols, true, I::kNormal},
          {n(9), K::kFcB, {F}, S::kCols, false, I::kZeros},
          {n(10), K::kFcProjW, {F, C}, S::kRows, true, proj},
          {n(11), K::kFcProjB, {C}, S::kReplicated, false, I::kZeros}};
}

int64_t ParamLayout::global_index(const ParamTensor& t, int64_t local) const {
  const int64_t P = tp_size_, r = tp_rank_;
  switch (t.split) {
    case TpSplit::kReplicated:
      return local;
    case TpSplit::kRows: {
      const int64_t rows = t.shape[0], cols = t.numel / rows;
      return (r * rows) * cols + local;  // a contiguous block of whole rows
    }
    case TpSplit::kCols: {
      const int64_t lc = t.shape.back(), fc = lc * P;
      const int64_t i = local / lc, j = local % lc;
      return i * fc + r * lc + j;
    }
    case TpSplit::kQkvCols:
    case TpSplit::kKvCols: {
      // Columns [q | k | v] (or [k | v]), each of C; rank r holds heads [r*NH/P, (r+1)*NH/P) of each.
      const int64_t blocks = t.split == TpSplit::kQkvCols ? 3 : 2;
      const int64_t lc = t.shape.back(), fc = lc * P, part = lc / blocks;  // part = C/P
      const int64_t i = local / lc, j = local % lc;
      const int64_t s = j / part, jj = j % part;
      return i * fc + s * (part * P) + r * part + jj;
    }
  }
  return local;
}

int64_t ParamLayout::total_full() const {
  int64_t n = 0;
  for (const auto& t : tensors_) {
    int64_t f = 1;
    for (int64_t d : t.full_shape) f *= d;
    n += f;
  }
  return n;
}

void extract_tp_part(const ParamLayout& local, const ParamLayout& full, const float* full_buf, float* local_buf) {
  WEFT_CHECK(full.tp_size() == 1, "the whole-model layout must have tp 1");
  for (size_t k = 0; k < local.tensors().size(); ++k) {
    const ParamTensor& lt = local.tensors()[k];
    const ParamTensor* ft = full.find(lt.name);
    WEFT_CHECK(ft != nullptr, "{} is not in the whole-model layout", lt.name);
    const float* src = full_buf + ft->offset;
    float* dst = local_buf + lt.offset;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < lt.numel; ++i) dst[i] = src[local.global_index(lt, i)];
  }
}

void insert_tp_part(const ParamLayout& local, const ParamLayout& full, const float* local_buf, float* full_buf) {
  WEFT_CHECK(full.tp_size() == 1, "the whole-model layout must have tp 1");
  for (size_t k = 0; k < local.tensors().size(); ++k) {
    const ParamTensor& lt = local.tensors()[k];
    const ParamTensor* ft = full.find(lt.name);
    WEFT_CHECK(ft != nullptr, "{} is not in the whole-model layout", lt.name);
    float* dst = full_buf + ft->offset;
    const float* src = local_buf + lt.offset;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < lt.numel; ++i) dst[local.global_index(lt, i)] = src[i];
  }
}

int64_t ParamLayout::count_unpadded() const {
  return total_full() - static_cast<int64_t>(cfg_.padded_vocab - cfg_.vocab_size) * cfg_.n_embd;
}

std::pair<int64_t, int64_t> ParamLayout::layer_range(int l) const {
  WEFT_CHECK(l >= 0 && l < cfg_.n_layer && layer_first_[l] >= 0, "layer {} is not in this part of the model", l);
  const ParamTensor& first = tensors_[layer_first_[l]];
  const ParamTensor& last = tensors_[layer_first_[l] + kParamsPerLayer - 1];
  return {first.offset, last.offset + last.numel};
}

bool ParamLayout::has_group(int g) const {
  if (g == 0) return emb_ >= 0;
  if (g >= 1 && g <= cfg_.n_layer) return layer_first_[g - 1] >= 0;
  return g == cfg_.n_layer + 1 && final_ >= 0;
}

std::pair<int64_t, int64_t> ParamLayout::group_range(int g) const {
  WEFT_CHECK(g >= 0 && g < num_groups() && has_group(g), "group {} is not in this part of the model", g);
  if (g == 0) return {tensors_[emb_].offset, tensors_[emb_end_ - 1].offset + tensors_[emb_end_ - 1].numel};
  if (g <= cfg_.n_layer) return layer_range(g - 1);
  return {tensors_[final_].offset, tensors_[final_end_ - 1].offset + tensors_[final_end_ - 1].numel};
}

int64_t ParamLayout::max_group_size() const {
  int64_t m = 0;
  for (int g = 0; g < num_groups(); ++g) {
    if (!has_group(g)) continue;
    auto [b, e] = group_range(g);
    m = std::max(m, e - b);
  }
  return m;
}

void ParamLayout::embedding_ptrs(float* base, float** wte, float** wpe) const {
  WEFT_CHECK(emb_ >= 0, "the embedding is not in this part of the model");
  *wte = base;
  *wpe = base + (tensors_[emb_ + 1].offset - tensors_[emb_].offset);
}

LayerPtrs ParamLayout::layer_ptrs(int l, float* base) const {
  WEFT_CHECK(layer_first_[l] >= 0, "layer {} is not in this part of the model", l);
  const ParamTensor* t = &tensors_[layer_first_[l]];
  const int64_t b = t[0].offset;
  LayerPtrs p;
  float** slots[kParamsPerLayer] = {&p.ln1w, &p.ln1b, &p.qkvw, &p.qkvb, &p.attprojw, &p.attprojb,
                                    &p.ln2w, &p.ln2b, &p.fcw,  &p.fcb,  &p.fcprojw,  &p.fcprojb};
  for (int i = 0; i < kParamsPerLayer; ++i) *slots[i] = base + (t[i].offset - b);
  return p;
}

void ParamLayout::final_ptrs(float* base, float** lnfw, float** lnfb) const {
  WEFT_CHECK(final_ >= 0, "the final LayerNorm is not in this part of the model");
  *lnfw = base;
  *lnfb = base + (tensors_[final_ + 1].offset - tensors_[final_].offset);
}

std::vector<float*> ParamLayout::group_ptrs(int g, float* base) const {
  WEFT_CHECK(g >= 0 && g < num_groups() && has_group(g), "group {} is not in this part of the model", g);
  int first = 0, end = 0;
  if (g == 0) {
    first = emb_;
    end = emb_end_;
  } else if (g <= cfg_.n_layer) {
    first = layer_first_[g - 1];
    end = first + kParamsPerLayer;
  } else {
    first = final_;
    end = final_end_;
  }
  std::vector<float*> out;
  const int64_t b = tensors_[first].offset;
  for (int i = first; i < end; ++i) out.push_back(base + (tensors_[i].offset - b));
  return out;
}

const ParamTensor* ParamLayout::find(const std::string& name) const {
  for (const auto& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

void init_params(const ParamLayout& layout, uint64_t seed, float* params) {
  init_params_range(layout, seed, 0, layout.total(), params);
}

void init_params_range(const ParamLayout& layout, uint64_t seed, int64_t begin, int64_t end, float* out) {
  const ModelConfig& cfg = layout.config();
  const float proj_std = cfg.init_std / std::sqrt(2.0f * static_cast<float>(cfg.n_layer));
  for (const ParamTensor& t : layout.tensors()) {
    const int64_t b = std::max(begin, t.offset), e = std::min(end, t.offset + t.numel);
    if (b >= e) continue;
    float* p = out + (b - begin);
    const int64_t i0 = b - t.offset, i1 = e - t.offset;  // element indices within the tensor
    switch (t.init) {
      case ParamInit::kOnes:
        for (int64_t i = i0; i < i1; ++i) p[i - i0] = 1.0f;
        break;
      case ParamInit::kZeros:
        for (int64_t i = i0; i < i1; ++i) p[i - i0] = 0.0f;
        break;
      case ParamInit::kFamily:
        for (int64_t i = i0; i < i1; ++i) p[i - i0] = cfg.family->init_value(cfg, t, i);  // replicated: i is global
        break;
      case ParamInit::kNormal:
      case ParamInit::kNormalResidual: {
        // GPT-2 scales the residual projections by 1/sqrt(2L); ClimaX (timm) does not.
        const float std = t.init == ParamInit::kNormalResidual ? proj_std : cfg.init_std;
        // Padded vocabulary rows stay zero: they never receive a gradient.
        // Keyed by the element's index in the whole tensor: every tensor-parallel split
        // reproduces the single-process values.
        const int64_t live = t.live < 0 ? INT64_MAX : t.live;
        const uint64_t stream = kRngStreamInit + t.id;
#pragma omp parallel for schedule(static)
        for (int64_t i = i0; i < i1; ++i) {
          const int64_t gi = layout.global_index(t, i);
          p[i - i0] = gi < live ? std * Philox::normal(seed, stream, static_cast<uint64_t>(gi)) : 0.0f;
        }
      }
    }
  }
}

}  // namespace weft
