#include "model/params.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/climax/climax_config.h"
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
  if (cfg.family == &climax_family()) {
    add_climax_tensors();
  } else {
    add_gpt_tensors();
  }
}

void ParamLayout::add(std::string name, ParamKind kind, int layer, std::vector<int64_t> full, TpSplit split,
                      bool decay) {
  const uint64_t id = next_id_++;
  if (!include_) return;
  const int64_t P = tp_size_;
  ParamTensor t;
  t.name = std::move(name);
  t.kind = kind;
  t.layer = layer;
  t.full_shape = full;
  t.hf_shape = full;
  t.split = P == 1 ? TpSplit::kReplicated : split;
  t.shape = full;
  if (t.split == TpSplit::kRows) t.shape[0] /= P;
  if (t.split == TpSplit::kCols || t.split == TpSplit::kQkvCols || t.split == TpSplit::kKvCols) t.shape.back() /= P;
  t.offset = total_;
  t.numel = 1;
  for (int64_t d : t.shape) t.numel *= d;
  t.id = id;
  t.weight_decay = decay;
  total_ += t.numel;
  tensors_.push_back(std::move(t));
}

// One transformer block's 12 tensors (model/block.h), named `prefix` + names[i].
void ParamLayout::add_layer_tensors(int l, const std::string& prefix, const char* const names[]) {
  using S = TpSplit;
  using K = ParamKind;
  const int64_t C = cfg_.n_embd, F = cfg_.ffn;
  include_ = l >= stage_.first_layer && l < stage_.first_layer + stage_.num_layers;
  if (include_) layer_first_[l] = static_cast<int>(tensors_.size());
  add(prefix + names[0], K::kLn1W, l, {C}, S::kReplicated, false);
  add(prefix + names[1], K::kLn1B, l, {C}, S::kReplicated, false);
  add(prefix + names[2], K::kQkvW, l, {C, 3 * C}, S::kQkvCols, true);
  add(prefix + names[3], K::kQkvB, l, {3 * C}, S::kQkvCols, false);
  add(prefix + names[4], K::kAttnProjW, l, {C, C}, S::kRows, true);
  add(prefix + names[5], K::kAttnProjB, l, {C}, S::kReplicated, false);
  add(prefix + names[6], K::kLn2W, l, {C}, S::kReplicated, false);
  add(prefix + names[7], K::kLn2B, l, {C}, S::kReplicated, false);
  add(prefix + names[8], K::kFcW, l, {C, F}, S::kCols, true);
  add(prefix + names[9], K::kFcB, l, {F}, S::kCols, false);
  add(prefix + names[10], K::kFcProjW, l, {F, C}, S::kRows, true);
  add(prefix + names[11], K::kFcProjB, l, {C}, S::kReplicated, false);
}

void ParamLayout::add_gpt_tensors() {
  const int64_t C = cfg_.n_embd, Vp = cfg_.padded_vocab, V = cfg_.vocab_size;
  using S = TpSplit;
  include_ = stage_.embedding || stage_.head;
  if (include_) emb_ = static_cast<int>(tensors_.size());
  add("transformer.wte.weight", ParamKind::kWte, -1, {Vp, C}, S::kRows, true);
  if (include_) tensors_.back().hf_shape = {V, C};
  add("transformer.wpe.weight", ParamKind::kWpe, -1, {cfg_.n_ctx, C}, S::kReplicated, true);
  if (include_) emb_end_ = static_cast<int>(tensors_.size());
  static const char* const kNames[kParamsPerLayer] = {
      "ln_1.weight",      "ln_1.bias",      "attn.c_attn.weight", "attn.c_attn.bias",
      "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",      "ln_2.bias",
      "mlp.c_fc.weight",  "mlp.c_fc.bias",  "mlp.c_proj.weight",  "mlp.c_proj.bias"};
  for (int l = 0; l < cfg_.n_layer; ++l) add_layer_tensors(l, fmt::format("transformer.h.{}.", l), kNames);
  include_ = stage_.head;
  if (include_) final_ = static_cast<int>(tensors_.size());
  add("transformer.ln_f.weight", ParamKind::kLnfW, -1, {C}, S::kReplicated, false);
  add("transformer.ln_f.bias", ParamKind::kLnfB, -1, {C}, S::kReplicated, false);
  if (include_) final_end_ = static_cast<int>(tensors_.size());
}

// ClimaX (Nguyen et al. 2023, microsoft/ClimaX src/climax/arch.py), names as there. Tensor
// parallelism as ORBIT's Hybrid-STOP: the blocks and the variable aggregation's projections are
// split (q and k|v by heads, the output projection by rows); the patch, variable, position and
// lead-time embeddings and the decoder head are replicated.
void ParamLayout::add_climax_tensors() {
  const int64_t C = cfg_.n_embd, V = cfg_.vars, P2 = int64_t{cfg_.patch} * cfg_.patch, L = cfg_.num_patches();
  using S = TpSplit;
  using K = ParamKind;
  include_ = stage_.embedding;
  if (include_) emb_ = static_cast<int>(tensors_.size());
  add("token_embeds.weight", K::kPatchW, -1, {V, P2, C}, S::kReplicated, true);
  add("token_embeds.bias", K::kPatchB, -1, {V, C}, S::kReplicated, false);
  add("var_embed", K::kVarEmbed, -1, {V, C}, S::kReplicated, true);
  add("var_query", K::kVarQuery, -1, {C}, S::kReplicated, false);
  add("var_agg.q.weight", K::kAggQW, -1, {C, C}, S::kCols, true);
  add("var_agg.q.bias", K::kAggQB, -1, {C}, S::kCols, false);
  add("var_agg.kv.weight", K::kAggKvW, -1, {C, 2 * C}, S::kKvCols, true);
  add("var_agg.kv.bias", K::kAggKvB, -1, {2 * C}, S::kKvCols, false);
  add("var_agg.out_proj.weight", K::kAggOutW, -1, {C, C}, S::kRows, true);
  add("var_agg.out_proj.bias", K::kAggOutB, -1, {C}, S::kReplicated, false);
  add("pos_embed", K::kPosEmbed, -1, {L, C}, S::kReplicated, true);
  add("lead_time_embed.weight", K::kLeadW, -1, {1, C}, S::kReplicated, true);
  add("lead_time_embed.bias", K::kLeadB, -1, {C}, S::kReplicated, false);
  if (include_) emb_end_ = static_cast<int>(tensors_.size());
  static const char* const kNames[kParamsPerLayer] = {
      "norm1.weight",     "norm1.bias",     "attn.qkv.weight", "attn.qkv.bias",
      "attn.proj.weight", "attn.proj.bias", "norm2.weight",    "norm2.bias",
      "mlp.fc1.weight",   "mlp.fc1.bias",   "mlp.fc2.weight",  "mlp.fc2.bias"};
  for (int l = 0; l < cfg_.n_layer; ++l) add_layer_tensors(l, fmt::format("blocks.{}.", l), kNames);
  include_ = stage_.head;
  if (include_) final_ = static_cast<int>(tensors_.size());
  add("norm.weight", K::kLnfW, -1, {C}, S::kReplicated, false);
  add("norm.bias", K::kLnfB, -1, {C}, S::kReplicated, false);
  for (int d = 0; d < cfg_.decoder_depth; ++d) {
    add(fmt::format("head.{}.weight", 2 * d), K::kHeadW, -1, {C, C}, S::kReplicated, true);
    add(fmt::format("head.{}.bias", 2 * d), K::kHeadB, -1, {C}, S::kReplicated, false);
  }
  add(fmt::format("head.{}.weight", 2 * cfg_.decoder_depth), K::kHeadW, -1, {C, V * P2}, S::kReplicated, true);
  add(fmt::format("head.{}.bias", 2 * cfg_.decoder_depth), K::kHeadB, -1, {V * P2}, S::kReplicated, false);
  if (include_) final_end_ = static_cast<int>(tensors_.size());
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

float sincos_embedding(const ModelConfig& cfg, ParamKind kind, int64_t index) {
  const int64_t C = cfg.n_embd, row = index / C, col = index % C;
  // MAE's get_1d_sincos_pos_embed_from_grid(D, pos): [sin(pos w_k), cos(pos w_k)], k < D/2,
  // w_k = 1 / 10000^(k / (D/2)).
  auto one_d = [](int64_t D, double pos, int64_t c) {
    const int64_t half = D / 2, k = c % half;
    const double w = 1.0 / std::pow(10000.0, static_cast<double>(k) / static_cast<double>(half));
    return static_cast<float>(c < half ? std::sin(pos * w) : std::cos(pos * w));
  };
  if (kind == ParamKind::kVarEmbed) return one_d(C, static_cast<double>(row), col);
  // get_2d_sincos_pos_embed(D, h, w): the first D/2 columns encode the patch's column index,
  // the last D/2 its row index (MAE's meshgrid(w, h) order).
  const int64_t w = cfg.img_w / cfg.patch, hi = row / w, wi = row % w;
  return col < C / 2 ? one_d(C / 2, static_cast<double>(wi), col) : one_d(C / 2, static_cast<double>(hi), col - C / 2);
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
      case ParamKind::kPatchB: case ParamKind::kAggQB: case ParamKind::kAggKvB: case ParamKind::kAggOutB:
      case ParamKind::kLeadB: case ParamKind::kHeadB: case ParamKind::kVarQuery:
        for (int64_t i = i0; i < i1; ++i) p[i - i0] = 0.0f;
        break;
      case ParamKind::kVarEmbed:
      case ParamKind::kPosEmbed:
        for (int64_t i = i0; i < i1; ++i) p[i - i0] = sincos_embedding(cfg, t.kind, i);  // replicated: i is global
        break;
      default: {
        // GPT-2 scales the residual projections by 1/sqrt(2L); ClimaX (timm) does not.
        const bool scaled = cfg.family != &climax_family() && (t.kind == ParamKind::kAttnProjW || t.kind == ParamKind::kFcProjW);
        const float std = scaled ? proj_std : cfg.init_std;
        // Padded vocabulary rows stay zero: they never receive a gradient.
        // Keyed by the element's index in the whole tensor: every tensor-parallel split
        // reproduces the single-process values.
        const int64_t live = t.kind == ParamKind::kWte ? int64_t{cfg.vocab_size} * cfg.n_embd : INT64_MAX;
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
