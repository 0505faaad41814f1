// Loss scaling for 16-bit gradients (Micikevicius et al. 2018, "Mixed Precision Training"):
// the loss is multiplied by a scale S so that small gradients stay representable in fp16, and
// the gradients are divided by S before the update.
//
//   static   a fixed scale (loss_scale > 0), with any precision;
//   dynamic  fp16 with loss_scale = 0, as DeepSpeed's DynamicLossScaler: start at
//            initial_loss_scale; a step whose gradient norm overflows (inf/NaN) while its loss
//            is finite is skipped and the scale halved (not below min_loss_scale); after
//            `window` good steps in a row the scale doubles;
//   none     scale 1 (fp32 and bf16 by default).
#pragma once
#include <cstdint>

#include "core/precision.h"

namespace weft {

struct LossScaleConfig {
  double loss_scale = 0.0;          // > 0: static scale; 0: dynamic for fp16, none otherwise
  double initial_scale = 65536.0;   // dynamic: the first scale
  double min_scale = 1.0;           // dynamic: never below
  int64_t window = 1000;            // dynamic: good steps before doubling
};

class LossScaler {
 public:
  LossScaler(Precision p, const LossScaleConfig& cfg);

  // What a step's gradients say about the update.
  enum class Verdict {
    kApply,      // finite: update (and count a good step with updated())
    kSkip,       // dynamic scaling, fp16 overflow: skip the update; the scale was halved
    kNonFinite,  // not finite and nothing to adjust: the run must stop
  };
  // Judges a step from its loss and the norm of its unscaled gradients; on kSkip halves the
  // scale and restarts the count of good steps.
  Verdict check(double loss, double grad_norm);
  // After an applied update: counts a good step and doubles the scale after `window` of them.
  void updated();

  double scale() const { return scale_; }
  bool dynamic() const { return dynamic_; }
  // Whether the run uses any scaling (a static scale or dynamic): reported in the metrics.
  bool active() const { return dynamic_ || cfg_.loss_scale > 0; }
  int64_t good_steps() const { return good_steps_; }
  // Resumes the dynamic state saved in a checkpoint (ignored for static and no scaling).
  void restore(double scale, int64_t good_steps);

 private:
  LossScaleConfig cfg_;
  bool dynamic_ = false;
  double scale_ = 1.0;
  int64_t good_steps_ = 0;
};

}  // namespace weft
