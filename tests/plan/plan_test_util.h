// Small fixtures shared by the planner's tests.
#pragma once
#include <string>
#include <vector>

#include "model/description.h"
#include "plan/shape.h"
#include "plan/system.h"

namespace weft::plan::plan_test {

// A machine with one link level of `bw` bytes/s per device and `lat` s per message, and a
// 1 TFLOP/s device: collectives in closed form.
inline System one_level(double bw, double lat) {
  System s;
  s.name = "flat";
  s.device.peak_flops_16 = s.device.peak_flops_32 = 1e12;
  s.device.memory_bytes = 1e10;
  s.device.memory_bandwidth = 1e11;
  s.levels.push_back(LinkLevel{"net", 0, bw, lat, {}});
  s.validate();
  return s;
}

inline Layout grid(int tp, int pp, int dp) {
  Layout l;
  l.tp = tp;
  l.pp = pp;
  l.dp = dp;
  return l;
}

// The operand layouts of a family's end products (Kernel::trans): the forward products (times x
// batch), those of them not A B, the backward weight gradients (A^T B), and the backward
// products in the forward layout A B ("m x n x k" each).
struct EndLayouts {
  double forward = 0, forward_not_ab = 0, weight_gradients = 0;
  std::vector<std::string> backward_ab;
};
inline EndLayouts end_layouts(const EndsWork& w) {
  EndLayouts r;
  for (const EndPass* pass : {&w.front_forward, &w.back_forward}) {
    for (const Kernel& k : pass->kernels) {
      if (k.k <= 0) continue;
      r.forward += k.times * k.batch;
      if (k.trans != 0) r.forward_not_ab += k.times * k.batch;
    }
  }
  for (const EndPass* pass : {&w.front_backward, &w.back_backward}) {
    for (const Kernel& k : pass->kernels) {
      if (k.k <= 0) continue;
      if (k.trans == 2) r.weight_gradients += k.times * k.batch;
      if (k.trans == 0) r.backward_ab.push_back(std::to_string(k.m) + " x " + std::to_string(k.n) + " x " + std::to_string(k.k));
    }
  }
  return r;
}

}  // namespace weft::plan::plan_test
