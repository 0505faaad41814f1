#include "params/param_layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/rng.h"

namespace weft {

StageSpec resolve_stage(int n_layer, StageSpec stage) {
  if (stage.num_layers < 0) stage.num_layers = n_layer - stage.first_layer;
  if (stage.first_layer < 0 || stage.first_layer + stage.num_layers > n_layer) {
    throw_input("pipeline stage layers [{}, {}) outside the model's {} layers", stage.first_layer,
                stage.first_layer + stage.num_layers, n_layer);
  }
  return stage;
}

ParamLayout::ParamLayout(const ParamTable& table, int tp_size, int tp_rank, const StageSpec& stage)
    : n_layer_(static_cast<int>(table.layers.size())),
      tp_size_(tp_size),
      tp_rank_(tp_rank),
      stage_(resolve_stage(static_cast<int>(table.layers.size()), stage)),
      init_value_(table.init_value),
      foreign_(table.foreign) {
  if (tp_size < 1 || tp_rank < 0 || tp_rank >= tp_size) throw_input("tensor-parallel rank {} of {}", tp_rank, tp_size);
  group_tensors_.assign(static_cast<size_t>(n_layer_ + 2), {-1, -1});
  // The family's tensors in its order: the ids (the initialisation's RNG streams) follow it.
  auto add_group = [&](const std::vector<ParamSpec>& specs, int layer, int group) {
    const int first = static_cast<int>(tensors_.size());
    for (const ParamSpec& p : specs) add(p, layer, group);
    if (include_ && !specs.empty()) group_tensors_[static_cast<size_t>(group)] = {first, static_cast<int>(tensors_.size())};
  };
  include_ = stage_.embedding || (table.front_with_head && stage_.head);
  add_group(table.front, -1, 0);
  for (int l = 0; l < n_layer_; ++l) {
    include_ = l >= stage_.first_layer && l < stage_.first_layer + stage_.num_layers;
    add_group(table.layers[static_cast<size_t>(l)], l, l + 1);
  }
  include_ = stage_.head;
  add_group(table.back, -1, n_layer_ + 1);
}

void ParamLayout::add(const ParamSpec& spec, int layer, int group) {
  const uint64_t id = next_id_++;
  if (!include_) return;
  const int64_t P = tp_size_;
  ParamTensor t;
  t.name = spec.name;
  t.tag = spec.tag;
  t.layer = layer;
  t.group = group;
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
  t.std = spec.std;
  t.live = spec.live;
  t.sparse_rows = spec.sparse_rows;
  t.tied_head = spec.tied_head;
  t.statistic_momentum = spec.statistic_momentum;
  t.col_blocks = spec.col_blocks;
  if (!t.col_blocks.empty()) {
    int64_t w = 0;
    for (int64_t b : t.col_blocks) w += b;
    WEFT_CHECK(w == spec.full.back(), "{}: column blocks of {} columns for {}", t.name, w, spec.full.back());
    t.col_parts = col_block_parts(t.name, t.col_blocks, spec.col_units, P, tp_rank_);
    if (t.split != TpSplit::kReplicated) {
      int64_t lc = 0;
      for (const ColBlockPart& b : t.col_parts) lc += b.local;
      t.shape.back() = lc;
      t.numel = 1;
      for (int64_t d : t.shape) t.numel *= d;
    }
  }
  total_ += t.numel;
  tensors_.push_back(std::move(t));
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
      if (!t.col_parts.empty()) {  // blocks of their own widths, each split by tp (or replicated)
        const int64_t lc = t.shape.back(), fc = t.full_shape.back();
        const int64_t i = local / lc;
        int64_t j = local % lc;
        for (const ColBlockPart& b : t.col_parts) {
          if (j < b.local) return i * fc + b.first + j;
          j -= b.local;
        }
        WEFT_CHECK(false, "{}: column {} outside its blocks", t.name, local % lc);
      }
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

std::vector<ColBlockPart> col_block_parts(const std::string& name, const std::vector<int64_t>& blocks,
                                          const std::vector<int64_t>& units, int64_t P, int64_t r) {
  WEFT_CHECK(units.empty() || units.size() == blocks.size(), "{}: {} column units for {} blocks", name, units.size(),
             blocks.size());
  std::vector<ColBlockPart> parts;
  int64_t start = 0;
  for (size_t k = 0; k < blocks.size(); ++k) {
    ColBlockPart b;
    b.whole = blocks[k];
    b.start = start;
    const int64_t u = units.empty() ? 0 : units[k];
    const int64_t n_units = u > 0 ? b.whole / u : 0;
    WEFT_CHECK(u == 0 || b.whole % u == 0, "{}: a column block of {} is not whole units of {}", name, b.whole, u);
    if (u > 0 && n_units % P != 0 && P % n_units == 0) {  // replicated: one unit a rank
      b.replicas = static_cast<int>(P / n_units);
      b.replica = static_cast<int>(r % b.replicas);
      b.local = u;
      b.first = start + (r / b.replicas) * u;
    } else {
      if (b.whole % P != 0 || (u > 0 && n_units % P != 0)) {
        throw_input("{}: a column block of {} columns ({} units of {}) splits neither into whole units over tp {} "
                    "nor replicates evenly over it", name, b.whole, n_units, u, P);
      }
      b.local = b.whole / P;
      b.first = start + r * b.local;
    }
    parts.push_back(b);
    start += b.whole;
  }
  return parts;
}

bool ParamTensor::has_replicated_cols() const {
  if (split == TpSplit::kReplicated) return false;
  for (const ColBlockPart& b : col_parts) {
    if (b.replicas > 1) return true;
  }
  return false;
}

std::vector<std::pair<int64_t, int64_t>> ParamLayout::replica_copies() const {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const ParamTensor& t : tensors_) {
    if (!t.has_replicated_cols()) continue;
    const int64_t lc = t.shape.back(), rows = t.numel / lc;
    int64_t at = 0;
    for (const ColBlockPart& b : t.col_parts) {
      if (b.replicas > 1 && b.replica != 0) {
        for (int64_t i = 0; i < rows; ++i) out.emplace_back(t.offset + i * lc + at, t.offset + i * lc + at + b.local);
      }
      at += b.local;
    }
  }
  return out;
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
  int64_t n = 0;
  for (const auto& t : tensors_) {
    int64_t f = 1;
    for (int64_t d : t.full_shape) f *= d;
    n += t.live >= 0 ? std::min(t.live, f) : f;
  }
  return n;
}

std::pair<int64_t, int64_t> ParamLayout::layer_range(int l) const {
  WEFT_CHECK(l >= 0 && l < n_layer_ && has_group(l + 1), "layer {} is not in this part of the model", l);
  return group_range(l + 1);
}

bool ParamLayout::has_group(int g) const {
  return g >= 0 && g < num_groups() && group_tensors_[static_cast<size_t>(g)].first >= 0;
}

std::pair<int64_t, int64_t> ParamLayout::group_range(int g) const {
  WEFT_CHECK(has_group(g), "group {} is not in this part of the model", g);
  const auto [first, end] = group_tensors_[static_cast<size_t>(g)];
  const ParamTensor& last = tensors_[static_cast<size_t>(end - 1)];
  return {tensors_[static_cast<size_t>(first)].offset, last.offset + last.numel};
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
  CView te, pe;
  embedding_ptrs(CView(base), &te, &pe);
  *wte = base;
  *wpe = const_cast<float*>(static_cast<const float*>(pe.data));
}

void ParamLayout::embedding_ptrs(CView base, CView* wte, CView* wpe) const {
  WEFT_CHECK(has_group(0) && group_tensors_[0].second - group_tensors_[0].first >= 1,
             "the embedding is not in this part of the model");
  const int e = group_tensors_[0].first;
  *wte = base;
  // The positions' table, when the group has one (a model with rotary positions has none): null.
  const bool pos = group_tensors_[0].second - group_tensors_[0].first >= 2;
  *wpe = pos ? base.at(tensors_[static_cast<size_t>(e + 1)].offset - tensors_[static_cast<size_t>(e)].offset) : CView();
}

const ParamTensor* ParamLayout::sparse_rows_tensor() const {
  for (const auto& t : tensors_) {
    if (t.sparse_rows) return &t;
  }
  return nullptr;
}

std::span<const ParamTensor> ParamLayout::group_tensors(int g) const {
  WEFT_CHECK(has_group(g), "group {} is not in this part of the model", g);
  const auto [first, end] = group_tensors_[static_cast<size_t>(g)];
  return std::span<const ParamTensor>(tensors_).subspan(static_cast<size_t>(first), static_cast<size_t>(end - first));
}

std::vector<int64_t> ParamLayout::group_offsets(int g) const {
  const std::span<const ParamTensor> t = group_tensors(g);
  std::vector<int64_t> out;
  for (const ParamTensor& x : t) out.push_back(x.offset - t.front().offset);
  return out;
}

std::vector<float*> ParamLayout::group_ptrs(int g, float* base) const {
  std::vector<float*> out;
  for (const int64_t o : group_offsets(g)) out.push_back(base + o);
  return out;
}

std::vector<CView> ParamLayout::group_ptrs(int g, CView base) const {
  std::vector<CView> out;
  for (const int64_t o : group_offsets(g)) out.push_back(base.at(o));
  return out;
}

const ParamTensor* ParamLayout::find(const std::string& name) const {
  for (const auto& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::string ForeignNames::strip(const std::string& name) const {
  const std::string& p = optional_prefix;
  return !p.empty() && name.compare(0, p.size(), p) == 0 ? name.substr(p.size()) : name;
}

bool ForeignNames::is_buffer(const std::string& name, const std::string& prefix) const {
  if (layer_buffers.empty()) return false;
  const std::string head = prefix + layer_prefix;
  if (name.compare(0, head.size(), head) != 0) return false;
  size_t i = head.size();
  const size_t digits_begin = i;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9') ++i;
  if (i == digits_begin) return false;
  const std::string rest = name.substr(i);
  return std::find(layer_buffers.begin(), layer_buffers.end(), rest) != layer_buffers.end();
}

float ParamLayout::family_value(const ParamTensor& t, int64_t i) const {
  WEFT_CHECK(init_value_ != nullptr, "{}: the family declared no initial values", t.name);
  return init_value_(t, i);
}

void init_params(const ParamLayout& layout, uint64_t seed, float* params) {
  init_params_range(layout, seed, 0, layout.total(), params);
}

void init_params_range(const ParamLayout& layout, uint64_t seed, int64_t begin, int64_t end, float* out) {
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
        for (int64_t i = i0; i < i1; ++i) p[i - i0] = layout.family_value(t, i);  // replicated: i is global
        break;
      case ParamInit::kNormal:
      case ParamInit::kNormalResidual: {
        const float std = t.std;  // the family's (GPT-2 scales the residual projections by 1/sqrt(2L))
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
