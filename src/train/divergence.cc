#include "train/divergence.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <utility>

#include "core/error.h"
#include "core/log.h"
#include "train/config.h"

namespace weft {

SpikePolicy parse_spike_policy(const std::string& name) {
  if (name == "warn") return SpikePolicy::kWarn;
  if (name == "skip-step") return SpikePolicy::kSkipStep;
  if (name == "stop") return SpikePolicy::kStop;
  throw_input("spike_policy \"{}\" is not one of \"warn\", \"skip-step\", \"stop\"", name);
}

const char* spike_policy_name(SpikePolicy p) {
  switch (p) {
    case SpikePolicy::kWarn: return "warn";
    case SpikePolicy::kSkipStep: return "skip-step";
    case SpikePolicy::kStop: return "stop";
  }
  return "?";
}

void validate_spike_keys(const RunConfig& cfg) {
  parse_spike_policy(cfg.spike_policy);
  if (!(cfg.spike_zscore > 0) || !std::isfinite(cfg.spike_zscore)) {
    throw_input("spike_zscore must be a finite number > 0 (standard deviations), got {}", cfg.spike_zscore);
  }
  if (cfg.spike_window < 2 || cfg.spike_min_steps < 2 || cfg.spike_min_steps > cfg.spike_window) {
    throw_input("spike_window {} and spike_min_steps {} must satisfy 2 <= spike_min_steps <= spike_window",
                cfg.spike_window, cfg.spike_min_steps);
  }
}

OutlierWindow::OutlierWindow(int64_t window, int64_t min_count) : window_(window), min_count_(min_count) {
  WEFT_CHECK(window >= 2 && min_count >= 2 && min_count <= window, "outlier window {} / min count {}", window,
             min_count);
}

double OutlierWindow::mean() const {
  if (values_.empty()) return std::numeric_limits<double>::quiet_NaN();
  double sum = 0.0;
  for (double v : values_) sum += v;
  return sum / static_cast<double>(values_.size());
}

// Two passes over at most `window` values: exact enough, and no running sums to drift.
double OutlierWindow::stddev() const {
  const double m = mean();
  double ss = 0.0;
  for (double v : values_) ss += (v - m) * (v - m);
  return values_.empty() ? m : std::sqrt(ss / static_cast<double>(values_.size()));
}

double OutlierWindow::zscore(double x) const {
  if (count() < min_count_) return std::numeric_limits<double>::quiet_NaN();
  const double s = stddev();
  if (!(s > 0.0)) return std::numeric_limits<double>::quiet_NaN();
  return (x - mean()) / s;
}

void OutlierWindow::push(double x) {
  values_.push_back(x);
  while (count() > window_) values_.pop_front();
}

SpikeDetector::SpikeDetector(SpikePolicy policy, double zscore, int64_t window, int64_t min_steps)
    : policy_(policy), zscore_(zscore), loss_(window, min_steps), grad_norm_(window, min_steps) {}

SpikeDetector::SpikeDetector(const RunConfig& cfg)
    : SpikeDetector(parse_spike_policy(cfg.spike_policy), cfg.spike_zscore, cfg.spike_window, cfg.spike_min_steps) {}

namespace {

SpikeStat judge_one(const OutlierWindow& w, double x, double threshold) {
  SpikeStat s;
  s.value = x;
  s.z = w.zscore(x);
  s.spiked = s.z > threshold;  // false for NaN
  if (s.spiked) {
    s.mean = w.mean();
    s.stddev = w.stddev();
  }
  return s;
}

}  // namespace

bool SpikeDetector::judge(double loss, double grad_norm) {
  Spike s;
  s.loss = judge_one(loss_, loss, zscore_);
  s.grad_norm = judge_one(grad_norm_, grad_norm, zscore_);
  s.window_count = loss_.count();
  loss_.push(loss);
  grad_norm_.push(grad_norm);
  last_.reset();
  if (!s.loss.spiked && !s.grad_norm.spiked) return false;
  s.vetoed = policy_ != SpikePolicy::kWarn;
  last_ = s;
  return s.vetoed;
}

nlohmann::json SpikeDetector::state() const {
  return {{"loss", loss_.values()}, {"grad_norm", grad_norm_.values()}};
}

void SpikeDetector::restore(const nlohmann::json& trainer_state, const std::string& where) {
  const auto it = trainer_state.find("spike_window");
  if (it == trainer_state.end()) return;
  for (auto [key, window] : {std::pair<const char*, OutlierWindow*>{"loss", &loss_}, {"grad_norm", &grad_norm_}}) {
    if (!it->is_object() || !it->contains(key) || !(*it)[key].is_array()) {
      throw_input("{}: key 'spike_window.{}' must be an array of numbers", where, key);
    }
    const nlohmann::json& v = (*it)[key];
    for (size_t i = 0; i < v.size(); ++i) {
      const nlohmann::json& x = v[i];
      if (!x.is_number() || !std::isfinite(x.get<double>())) {
        throw_input("{}: spike_window.{}[{}] is {}, not a finite number", where, key, i, x.dump());
      }
      window->push(x.get<double>());  // a smaller spike_window than the saved run's keeps the newest
    }
  }
}

nlohmann::json spike_json(const Spike& s, SpikePolicy policy) {
  auto z = [](const SpikeStat& st) { return std::isnan(st.z) ? nlohmann::json() : nlohmann::json(st.z); };
  const char* action = policy == SpikePolicy::kWarn ? "warned" : policy == SpikePolicy::kSkipStep ? "skipped" : "stopped";
  return {{"loss_z", z(s.loss)}, {"grad_norm_z", z(s.grad_norm)}, {"action", action}};
}

namespace {

std::string describe_stat(const char* name, const SpikeStat& s) {
  return fmt::format("{} {:.6g} is {:.1f} standard deviations above the mean {:.6g} (std {:.3g})", name, s.value, s.z,
                     s.mean, s.stddev);
}

}  // namespace

void act_on_spike(const Spike& s, const SpikeDetector& d, int64_t step, const std::string& last_checkpoint) {
  std::string what;
  if (s.loss.spiked) what = describe_stat("loss", s.loss);
  if (s.grad_norm.spiked) what += (what.empty() ? "" : "; ") + describe_stat("gradient norm", s.grad_norm);
  const std::string over = fmt::format("of the last {} steps (spike_zscore = {})", s.window_count, d.threshold());
  switch (d.policy()) {
    case SpikePolicy::kWarn:
      log_warn("step {}: spike: {} {}", step, what, over);
      return;
    case SpikePolicy::kSkipStep:
      log_warn("step {}: spike: {} {}; update skipped (spike_policy = \"skip-step\")", step, what, over);
      return;
    case SpikePolicy::kStop:
      throw_runtime("step {}: spike: {} {}; stopping as spike_policy = \"stop\" says, without applying the update "
                    "(last checkpoint: {})",
                    step, what, over, last_checkpoint.empty() ? "none" : last_checkpoint);
  }
}

std::optional<std::string> DivergenceWatch::observe(int64_t step, double loss) {
  if (first_step_ == 0) {
    first_ = lowest_ = loss;
    first_step_ = lowest_step_ = step;
    return std::nullopt;
  }
  if (loss < lowest_) lowest_ = loss, lowest_step_ = step;
  const bool came_down = first_ - lowest_ >= 0.1 * std::fabs(first_);
  const double limit = came_down ? lowest_ + 0.5 * (first_ - lowest_) : first_ + 0.5 * std::fabs(first_);
  above_ = loss > limit ? above_ + 1 : 0;
  if (above_ < kSteps || warned_) return std::nullopt;
  warned_ = true;
  return fmt::format(
      "step {}: the run looks diverging: the loss {:.4g} has been above {:.4g} for {} steps ({}; first {:.4g} at step {}, "
      "lowest {:.4g} at step {}); the spike detector judges each value against the recent steps only, so it does not "
      "flag a climb. Lower the learning rate or lengthen its warm-up (docs/divergence.md)",
      step, loss, limit, kSteps, came_down ? "more than half of the way down lost again" : "1.5 x where it started",
      first_, first_step_, lowest_, lowest_step_);
}

}  // namespace weft
