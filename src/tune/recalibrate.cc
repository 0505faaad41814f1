#include "tune/recalibrate.h"

#include <cmath>
#include <limits>

#include "core/error.h"

namespace weft::tune {

namespace {

struct Fit {
  double device = 1, link = 1, overhead = 0, error = std::numeric_limits<double>::infinity();
};

// For factors (device, link): the planner's predictions, the best added overhead and the mean
// relative error that leaves.
Fit evaluate(const plan::System& sys, const plan::ModelShape& m, const plan::Options& o,
             const std::vector<plan::Layout>& layouts, const std::vector<double>& measured, double device,
             double link) {
  const plan::System s = scaled_system(sys, device, link);
  std::vector<double> pred(layouts.size());
  for (size_t i = 0; i < layouts.size(); ++i) pred[i] = plan::predict(m, s, layouts[i], o).step_time_s;
  // min over c >= 0 of sum ((p + c - y) / y)^2: c = sum (y - p) / y^2 / sum 1 / y^2.
  double num = 0, den = 0;
  for (size_t i = 0; i < pred.size(); ++i) {
    num += (measured[i] - pred[i]) / (measured[i] * measured[i]);
    den += 1.0 / (measured[i] * measured[i]);
  }
  Fit f{device, link, std::max(0.0, num / den), 0.0};
  for (size_t i = 0; i < pred.size(); ++i) f.error += std::fabs((pred[i] + f.overhead) / measured[i] - 1.0);
  f.error /= static_cast<double>(pred.size());
  return f;
}

}  // namespace

plan::System scaled_system(const plan::System& sys, double device_scale, double link_scale) {
  plan::System s = sys;
  plan::Device& d = s.device;
  d.peak_flops_16 *= device_scale;
  d.peak_flops_32 *= device_scale;
  d.memory_bandwidth *= device_scale;
  d.kernel_latency /= device_scale;
  for (auto& [name, speed] : s.codecs.per_core) {
    speed.encode *= device_scale;
    speed.decode *= device_scale;
  }
  for (plan::LinkLevel& l : s.levels) {
    l.bandwidth *= link_scale;
    l.latency /= link_scale;
  }
  return s;
}

Recalibration recalibrate(const plan::System& sys, const plan::ModelShape& m, const plan::Options& o,
                          const std::vector<plan::Layout>& layouts, const std::vector<double>& measured_s) {
  if (layouts.empty() || layouts.size() != measured_s.size()) {
    throw_input("recalibrate: {} layouts and {} measurements (at least one of each, as many of both)", layouts.size(),
                measured_s.size());
  }
  for (double y : measured_s) {
    if (!(y > 0) || !std::isfinite(y)) throw_input("recalibrate: a measured step time of {} s", y);
  }
  Recalibration r;
  r.trials = static_cast<int>(layouts.size());
  r.link_fitted = false;
  for (const plan::Layout& l : layouts) r.link_fitted = r.link_fitted || l.tp * l.pp * l.dp > 1;
  r.error_before = 0;
  for (size_t i = 0; i < layouts.size(); ++i) {
    r.error_before += std::fabs(plan::predict(m, sys, layouts[i], o).step_time_s / measured_s[i] - 1.0);
  }
  r.error_before /= static_cast<double>(layouts.size());
  Fit best{1, 1, 0, r.error_before};  // no correction: the error after is never worse
  // Coarse: quarter steps of log2 in [-5, 5]; fine: eighths around the best.
  auto search = [&](double d0, double l0, double half_width, double step) {
    for (double dd = -half_width; dd <= half_width + 1e-9; dd += step) {
      for (double dl = r.link_fitted ? -half_width : 0.0; dl <= (r.link_fitted ? half_width : 0.0) + 1e-9; dl += step) {
        const Fit f = evaluate(sys, m, o, layouts, measured_s, d0 * std::exp2(dd), l0 * std::exp2(dl));
        if (f.error < best.error) best = f;
      }
    }
  };
  search(1.0, 1.0, 5.0, 0.25);
  search(best.device, best.link, 0.25, 1.0 / 32);
  search(best.device, best.link, 1.0 / 32, 1.0 / 256);
  r.device_scale = best.device;
  r.link_scale = best.link;
  r.added_overhead_s = best.overhead;
  r.error_after = best.error;
  r.system = scaled_system(sys, best.device, best.link);
  r.system.defaults.step_overhead += best.overhead;
  return r;
}

}  // namespace weft::tune
