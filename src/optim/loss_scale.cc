#include "optim/loss_scale.h"

#include <algorithm>
#include <cmath>

namespace weft {

LossScaler::LossScaler(Precision p, const LossScaleConfig& cfg)
    : cfg_(cfg), dynamic_(p == Precision::kFp16 && cfg.loss_scale == 0.0) {
  scale_ = cfg.loss_scale > 0 ? cfg.loss_scale : dynamic_ ? cfg.initial_scale : 1.0;
}

LossScaler::Verdict LossScaler::check(double loss, double grad_norm) {
  if (dynamic_ && std::isfinite(loss) && !std::isfinite(grad_norm)) {
    scale_ = std::max(cfg_.min_scale, scale_ / 2);
    good_steps_ = 0;
    return Verdict::kSkip;
  }
  if (!std::isfinite(loss) || !std::isfinite(grad_norm)) return Verdict::kNonFinite;
  return Verdict::kApply;
}

void LossScaler::updated() {
  if (dynamic_ && ++good_steps_ >= cfg_.window) {
    scale_ *= 2;
    good_steps_ = 0;
  }
}

void LossScaler::restore(double scale, int64_t good_steps) {
  if (!dynamic_) return;
  scale_ = scale;
  good_steps_ = good_steps;
}

}  // namespace weft
