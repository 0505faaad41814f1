#include "optim/optim.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace weft {

AdamW::AdamW(const ParamLayout& layout, AdamWConfig cfg, int64_t begin, int64_t end)
    : begin_(begin), end_(end < 0 ? layout.total() : end), cfg_(cfg) {
  m_.set_category(MemCategory::kOptimizer);
  v_.set_category(MemCategory::kOptimizer);
  m_.resize(static_cast<size_t>(end_ - begin_), true);
  v_.resize(static_cast<size_t>(end_ - begin_), true);
  for (const ParamTensor& t : layout.tensors()) {
    const int64_t b = std::max(t.offset, begin_), e = std::min(t.offset + t.numel, end_);
    if (b >= e) continue;
    if (!ranges_.empty() && ranges_.back().decay == t.weight_decay && ranges_.back().end == b - begin_) {
      ranges_.back().end = e - begin_;
    } else {
      ranges_.push_back({b - begin_, e - begin_, t.weight_decay});
    }
  }
}

void AdamW::step(Backend& be, float* params, const float* grads, float lr, int64_t t, float grad_scale) {
  float* p = master_.size() ? master_.data() : params;
  for (const Range& r : ranges_) {
    be.adamw(p + r.begin, grads + r.begin, m_.data() + r.begin, v_.data() + r.begin,
             r.end - r.begin, lr, cfg_.beta1, cfg_.beta2, cfg_.eps, r.decay ? cfg_.weight_decay : 0.0f, t, grad_scale);
  }
  if (master_.size()) {
    // The model computes with the 16-bit copy of the updated master weights.
    std::memcpy(params, master_.data(), master_.bytes());
    be.round_to(params, static_cast<int64_t>(master_.size()), precision_);
  }
}

void AdamW::use_master_weights(Precision prec, const float* fp32) {
  precision_ = prec;
  if (prec == Precision::kFp32) {
    master_.resize(0);
    return;
  }
  master_.set_category(MemCategory::kOptimizer);
  master_.resize(static_cast<size_t>(end_ - begin_));
  std::memcpy(master_.data(), fp32, master_.bytes());
}

float lr_at(int64_t step, float lr, int64_t warmup, int64_t decay_steps, float min_ratio) {
  if (warmup > 0 && step < warmup) return lr * static_cast<float>(step + 1) / static_cast<float>(warmup);
  const float min_lr = lr * min_ratio;
  if (step >= decay_steps || decay_steps <= warmup) return min_lr;
  const double progress = static_cast<double>(step - warmup) / static_cast<double>(decay_steps - warmup);
  const double coeff = 0.5 * (1.0 + std::cos(M_PI * progress));
  return static_cast<float>(min_lr + coeff * (lr - min_lr));
}

double grad_norm(Backend& be, const float* grads, int64_t n) { return std::sqrt(be.sum_squares(grads, n)); }

float clip_coefficient(double norm, double max_norm) {
  if (max_norm <= 0.0 || !std::isfinite(norm)) return 1.0f;
  return static_cast<float>(std::min(1.0, max_norm / (norm + 1e-6)));
}

}  // namespace weft
