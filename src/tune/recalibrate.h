// `weft tune --recalibrate FILE`: the planner's device constants corrected by the trials'
// measurements, written as a system file, with the planner's error on the trials before and
// after (docs/tune.md).
//
// The correction keeps the planner's model and rescales its inputs: every device rate (matrix
// and fp32/16 peaks, memory bandwidth, codec speeds) by one factor and its kernel latency by the
// inverse, every link level's bandwidth by a second factor and its latency by the inverse, and
// adds a fixed per-step overhead. The two factors are searched on a grid of powers of two
// (2^-5 .. 2^5 in quarter steps, then refined twice around the best, to 1/256 of an octave)
// by re-running the planner on
// every successful trial's layout; for each pair the overhead minimising the squared relative
// error has a closed form (clamped at 0). The pair with the smallest mean relative error wins,
// so the error after is never above the error before (the pair 1, 1 with no overhead is on
// the grid).
#pragma once
#include <string>
#include <vector>

#include "plan/predict.h"
#include "plan/system.h"

namespace weft::tune {

struct Recalibration {
  plan::System system;         // the corrected system
  double device_scale = 1;     // device rates multiplied by this
  double link_scale = 1;       // link bandwidths multiplied by this
  double added_overhead_s = 0; // added to [defaults] step_overhead
  double error_before = 0;     // mean |predicted / measured - 1| over the trials
  double error_after = 0;
  int trials = 0;
  bool link_fitted = true;     // false: no trial communicates (one rank), link_scale stays 1
};

// `sys` with device rates x device_scale, link bandwidths x link_scale (latencies divided).
plan::System scaled_system(const plan::System& sys, double device_scale, double link_scale);

// The correction from measured step times `measured_s` of `layouts` (same length, at least
// one; every measurement > 0). InputError otherwise. When no layout spans more than one rank
// the link bandwidth is not determined by the trials (every factor fits them equally): it is
// not searched (link_scale 1, link_fitted false) instead of taking an arbitrary value.
Recalibration recalibrate(const plan::System& sys, const plan::ModelShape& m, const plan::Options& o,
                          const std::vector<plan::Layout>& layouts, const std::vector<double>& measured_s);

}  // namespace weft::tune
