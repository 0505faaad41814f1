// AdamW over the flat parameter buffer, the learning-rate schedule and global-norm clipping.
#pragma once
#include <cstdint>

#include "backend/backend.h"
#include "backend/device_buffer.h"
#include "core/precision.h"
#include "params/param_layout.h"
#include "optim/optim_config.h"

namespace weft {

// The optimizer's state (moments and, with 16-bit storage, fp32 master weights) lives in
// device buffers of its backend; every update runs through the backend's ops. Pointers given
// to and returned by it are device memory of that backend.
class AdamW {
 public:
  // State for the element range [begin, end) of the flat buffer (end < 0: the whole buffer);
  // a ZeRO rank keeps only its shard. The moments start at zero.
  AdamW(const ParamLayout& layout, AdamWConfig cfg, Backend& backend, int64_t begin = 0, int64_t end = -1);
  // One update at learning rate lr; t is the 1-based step number (bias correction). The
  // gradients are used multiplied by grad_scale (the clipping coefficient). params and grads
  // point at the first element of the range (device memory). With master weights params is
  // the model's working copy (f32, or the 16-bit storage of a bf16/fp16 run); without, f32.
  // Running statistics (ParamTensor::statistic_momentum) are blended in instead, their slots
  // multiplied by stat_scale (the loss scale's inverse: no clipping).
  void step(View params, const float* grads, float lr, int64_t t, float grad_scale = 1.0f, float stat_scale = 1.0f);
  // Mixed precision (Micikevicius et al. 2018): keep fp32 master weights of the range, copied
  // from `fp32` (the range's values, first element first; host memory when from_host, else
  // device memory). From then on step() updates the master weights and writes them, rounded
  // to `p`, to params (a 16-bit working copy, or an f32 one holding rounded values; the caller
  // rounds the model's parameters once at the start). kFp32: no master copy.
  void use_master_weights(Precision p, const float* fp32, bool from_host);
  // The fp32 master weights of the range (null without mixed precision, or for an empty range);
  // device memory.
  float* master() { return master_.count() ? master_.data<float>() : nullptr; }
  // Whether the optimizer keeps master weights (16-bit storage), whatever its range holds: a
  // ZeRO rank whose shard is empty keeps none but takes part in their gathers.
  bool uses_master() const { return precision_ != Precision::kFp32; }
  int64_t begin() const { return begin_; }
  int64_t end() const { return end_; }
  float* exp_avg() { return m_.data<float>(); }
  float* exp_avg_sq() { return v_.data<float>(); }
  // Sets the moments of the range from host values (a checkpoint's), first element first.
  void load_moments(const float* exp_avg, const float* exp_avg_sq);
  const AdamWConfig& config() const { return cfg_; }
  int64_t state_bytes() const { return static_cast<int64_t>(m_.bytes() + v_.bytes() + master_.bytes()); }

 private:
  struct Range {
    int64_t begin, end;
    bool decay;
    float momentum;  // > 0: running statistics
  };
  // consecutive tensors with the same decay setting and momentum, merged, relative to begin_
  std::vector<Range> ranges_;
  // p = (1 - m) p + m s g over the range's elements (host arithmetic: a few per norm layer).
  void blend_statistics(View params, const float* grads, const Range& r, float stat_scale);
  int64_t begin_ = 0, end_ = 0;
  AdamWConfig cfg_;
  Backend& be_;
  DeviceBuffer m_, v_;
  DeviceBuffer master_;
  Precision precision_ = Precision::kFp32;
};

// Linear warmup over `warmup` steps to `lr`, then cosine decay to lr * min_ratio at
// `decay_steps`, constant after. step is 0-based: the first update uses lr * 1/warmup.
float lr_at(int64_t step, float lr, int64_t warmup, int64_t decay_steps, float min_ratio);

// Global L2 norm of the gradients.
double grad_norm(Backend& be, const float* grads, int64_t n);
// The factor torch.nn.utils.clip_grad_norm_ scales gradients by: min(1, max_norm / (norm + 1e-6));
// 1 when max_norm is 0 (clipping off) or the norm is not finite. AdamW applies it on the fly.
float clip_coefficient(double norm, double max_norm);

}  // namespace weft
