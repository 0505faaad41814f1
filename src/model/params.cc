#include "model/params.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/rng.h"

namespace weft {

ParamLayout::ParamLayout(const ModelConfig& cfg) : cfg_(cfg) {
  cfg_.validate();
  const int64_t C = cfg.n_embd, F = cfg.ffn, Vp = cfg.padded_vocab, V = cfg.vocab_size;
  auto add = [&](std::string name, ParamKind kind, int layer, std::vector<int64_t> shape,
                 bool decay) {
    ParamTensor t;
    t.name = std::move(name);
    t.kind = kind;
    t.layer = layer;
    t.shape = shape;
    t.hf_shape = shape;
    t.offset = total_;
    t.numel = 1;
    for (int64_t d : shape) t.numel *= d;
    t.id = static_cast<uint64_t>(tensors_.size());
    t.weight_decay = decay;
    total_ += t.numel;
    tensors_.push_back(std::move(t));
  };
  add("transformer.wte.weight", ParamKind::kWte, -1, {Vp, C}, true);
  tensors_.back().hf_shape = {V, C};
  add("transformer.wpe.weight", ParamKind::kWpe, -1, {cfg.n_ctx, C}, true);
  for (int l = 0; l < cfg.n_layer; ++l) {
    std::string p = fmt::format("transformer.h.{}.", l);
    add(p + "ln_1.weight", ParamKind::kLn1W, l, {C}, false);
    add(p + "ln_1.bias", ParamKind::kLn1B, l, {C}, false);
    add(p + "attn.c_attn.weight", ParamKind::kQkvW, l, {C, 3 * C}, true);
    add(p + "attn.c_attn.bias", ParamKind::kQkvB, l, {3 * C}, false);
    add(p + "attn.c_proj.weight", ParamKind::kAttnProjW, l, {C, C}, true);
    add(p + "attn.c_proj.bias", ParamKind::kAttnProjB, l, {C}, false);
    add(p + "ln_2.weight", ParamKind::kLn2W, l, {C}, false);
    add(p + "ln_2.bias", ParamKind::kLn2B, l, {C}, false);
    add(p + "mlp.c_fc.weight", ParamKind::kFcW, l, {C, F}, true);
    add(p + "mlp.c_fc.bias", ParamKind::kFcB, l, {F}, false);
    add(p + "mlp.c_proj.weight", ParamKind::kFcProjW, l, {F, C}, true);
    add(p + "mlp.c_proj.bias", ParamKind::kFcProjB, l, {C}, false);
  }
  add("transformer.ln_f.weight", ParamKind::kLnfW, -1, {C}, false);
  add("transformer.ln_f.bias", ParamKind::kLnfB, -1, {C}, false);
}

int64_t ParamLayout::count_unpadded() const {
  return total_ - static_cast<int64_t>(cfg_.padded_vocab - cfg_.vocab_size) * cfg_.n_embd;
}

std::pair<int64_t, int64_t> ParamLayout::layer_range(int l) const {
  WEFT_CHECK(l >= 0 && l < cfg_.n_layer, "layer {} of {}", l, cfg_.n_layer);
  const ParamTensor& first = tensors_[2 + l * kParamsPerLayer];
  const ParamTensor& last = tensors_[2 + l * kParamsPerLayer + kParamsPerLayer - 1];
  return {first.offset, last.offset + last.numel};
}

std::pair<int64_t, int64_t> ParamLayout::group_range(int g) const {
  WEFT_CHECK(g >= 0 && g < num_groups(), "group {} of {}", g, num_groups());
  if (g == 0) return {0, tensors_[1].offset + tensors_[1].numel};
  if (g <= cfg_.n_layer) return layer_range(g - 1);
  const ParamTensor& w = tensors_[tensors_.size() - 2];
  return {w.offset, total_};
}

int64_t ParamLayout::max_group_size() const {
  int64_t m = 0;
  for (int g = 0; g < num_groups(); ++g) {
    auto [b, e] = group_range(g);
    m = std::max(m, e - b);
  }
  return m;
}

void ParamLayout::embedding_ptrs(float* base, float** wte, float** wpe) const {
  *wte = base + tensors_[0].offset;
  *wpe = base + tensors_[1].offset;
}

LayerPtrs ParamLayout::layer_ptrs(int l, float* base) const {
  const ParamTensor* t = &tensors_[2 + l * kParamsPerLayer];
  const int64_t b = t[0].offset;
  LayerPtrs p;
  float** slots[kParamsPerLayer] = {&p.ln1w, &p.ln1b, &p.qkvw, &p.qkvb, &p.attprojw, &p.attprojb,
                                    &p.ln2w, &p.ln2b, &p.fcw,  &p.fcb,  &p.fcprojw,  &p.fcprojb};
  for (int i = 0; i < kParamsPerLayer; ++i) *slots[i] = base + (t[i].offset - b);
  return p;
}

void ParamLayout::final_ptrs(float* base, float** lnfw, float** lnfb) const {
  const ParamTensor& w = tensors_[tensors_.size() - 2];
  *lnfw = base;
  *lnfb = base + (tensors_.back().offset - w.offset);
}

const ParamTensor* ParamLayout::find(const std::string& name) const {
  for (const auto& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

ModelPtrs ParamLayout::pointers(float* base) const {
  ModelPtrs m;
  m.wte = base + tensors_[0].offset;
  m.wpe = base + tensors_[1].offset;
  m.layers.resize(cfg_.n_layer);
  for (int l = 0; l < cfg_.n_layer; ++l) {
    const ParamTensor* t = &tensors_[2 + l * kParamsPerLayer];
    LayerPtrs& p = m.layers[l];
    float** slots[kParamsPerLayer] = {&p.ln1w, &p.ln1b, &p.qkvw, &p.qkvb, &p.attprojw, &p.attprojb,
                                      &p.ln2w, &p.ln2b, &p.fcw,  &p.fcb,  &p.fcprojw,  &p.fcprojb};
    for (int i = 0; i < kParamsPerLayer; ++i) *slots[i] = base + t[i].offset;
  }
  m.lnfw = base + tensors_[tensors_.size() - 2].offset;
  m.lnfb = base + tensors_[tensors_.size() - 1].offset;
  return m;
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
    switch (t.kind) {
      case ParamKind::kLn1W:
      case ParamKind::kLn2W:
      case ParamKind::kLnfW:
        for (int64_t i = i0; i < i1; ++i) p[i - i0] = 1.0f;
        break;
      case ParamKind::kLn1B: case ParamKind::kLn2B: case ParamKind::kLnfB: case ParamKind::kQkvB:
      case ParamKind::kAttnProjB: case ParamKind::kFcB: case ParamKind::kFcProjB:
        for (int64_t i = i0; i < i1; ++i) p[i - i0] = 0.0f;
        break;
      default: {
        const float std = (t.kind == ParamKind::kAttnProjW || t.kind == ParamKind::kFcProjW) ? proj_std : cfg.init_std;
        // Padded vocabulary rows stay zero: they never receive a gradient.
        const int64_t live = t.kind == ParamKind::kWte ? int64_t{cfg.vocab_size} * cfg.n_embd : t.numel;
        const uint64_t stream = kRngStreamInit + t.id;
#pragma omp parallel for schedule(static)
        for (int64_t i = i0; i < i1; ++i) {
          p[i - i0] = i < live ? std * Philox::normal(seed, stream, static_cast<uint64_t>(i)) : 0.0f;
        }
      }
    }
  }
}

}  // namespace weft
