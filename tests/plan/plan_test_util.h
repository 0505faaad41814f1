// Small fixtures shared by the planner's tests.
#pragma once
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

}  // namespace weft::plan::plan_test
