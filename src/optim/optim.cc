#include "optim/optim.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace weft {

AdamW::AdamW(const ParamLayout& layout, AdamWConfig cfg, Backend& backend, int64_t begin, int64_t end)
    : begin_(begin), end_(end < 0 ? layout.total() : end), cfg_(cfg), be_(backend) {
  const int64_t n = end_ - begin_;
  m_ = DeviceBuffer(be_, DType::kF32, n, MemCategory::kOptimizer);
  v_ = DeviceBuffer(be_, DType::kF32, n, MemCategory::kOptimizer);
  m_.zero();
  v_.zero();
  for (const ParamTensor& t : layout.tensors()) {
    const int64_t b = std::max(t.offset, begin_), e = std::min(t.offset + t.numel, end_);
    if (b >= e) continue;
    const bool decay = t.weight_decay && t.statistic_momentum <= 0.0f;
    if (!ranges_.empty() && ranges_.back().decay == decay && ranges_.back().momentum == t.statistic_momentum &&
        ranges_.back().end == b - begin_) {
      ranges_.back().end = e - begin_;
    } else {
      ranges_.push_back({b - begin_, e - begin_, decay, t.statistic_momentum});
    }
  }
}

void AdamW::step(View params, const float* grads, float lr, int64_t t, float grad_scale, float stat_scale) {
  for (const Range& r : ranges_) {
    const int64_t n = r.end - r.begin;
    if (r.momentum > 0.0f) {
      blend_statistics(params, grads, r, stat_scale);
      continue;
    }
    const float wd = r.decay ? cfg_.weight_decay : 0.0f;
    if (master()) {
      // The fp32 master weights updated, and the model's 16-bit copy of them written (one pass
      // on a backend that fuses it; the ranges tile the buffer, so range by range is the same).
      be_.adamw_copy(master() + r.begin, params.at(r.begin), grads + r.begin, exp_avg() + r.begin,
                     exp_avg_sq() + r.begin, n, lr, cfg_.beta1, cfg_.beta2, cfg_.eps, wd, t, grad_scale, precision_);
    } else {
      be_.adamw(params.at(r.begin).as_f32("the parameters an fp32 AdamW updates"), grads + r.begin, exp_avg() + r.begin, exp_avg_sq() + r.begin, n, lr, cfg_.beta1,
                cfg_.beta2, cfg_.eps, wd, t, grad_scale);
    }
  }
}

void AdamW::blend_statistics(View params, const float* grads, const Range& r, float stat_scale) {
  const int64_t n = r.end - r.begin;
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  std::vector<float> p(static_cast<size_t>(n)), g(static_cast<size_t>(n));
  float* target = master() ? master() + r.begin : params.at(r.begin).as_f32("the running statistics of an fp32 model");
  be_.copy_to_host(p.data(), target, 0, bytes);
  be_.copy_to_host(g.data(), grads + r.begin, 0, bytes);
  const float m = r.momentum;
  for (size_t i = 0; i < p.size(); ++i) p[i] = (1.0f - m) * p[i] + m * (stat_scale * g[i]);
  be_.copy_to_device(target, 0, p.data(), bytes);
  if (master()) be_.convert(params.at(r.begin), CView(target), n);  // the working copy, rounded
}

void AdamW::use_master_weights(Precision prec, const float* fp32, bool from_host) {
  precision_ = prec;
  if (prec == Precision::kFp32) {
    master_ = DeviceBuffer();
    return;
  }
  master_ = DeviceBuffer(be_, DType::kF32, end_ - begin_, MemCategory::kOptimizer);
  const size_t bytes = static_cast<size_t>(master_.bytes());
  if (from_host) {
    be_.copy_to_device(master(), 0, fp32, bytes);
  } else {
    be_.copy_device(master(), 0, fp32, 0, bytes);
  }
}

void AdamW::load_moments(const float* exp_avg_host, const float* exp_avg_sq_host) {
  be_.copy_to_device(exp_avg(), 0, exp_avg_host, static_cast<size_t>(m_.bytes()));
  be_.copy_to_device(exp_avg_sq(), 0, exp_avg_sq_host, static_cast<size_t>(v_.bytes()));
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
