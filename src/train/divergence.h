// Divergence made visible: a loss or gradient-norm spike is a value more than `zscore` standard
// deviations above the mean of the recent window of steps (as llm.c's OutlierDetector, but
// one-sided: a falling loss is no alarm). What a spike does is the run's spike_policy:
//
//   warn       a warning line in the log and a "spike" field in the step's metrics line;
//   skip-step  the same, and the engine does not apply the step's update (as an fp16 overflow);
//   stop       the run stops with a RuntimeError naming the step, the value, the mean and the
//              std (exit 1); the update is not applied and no checkpoint is written, so the
//              last checkpoint stays the newest.
//
// The detector judges the step's reduced loss and gradient norm, which are the same bits on
// every rank (the all-reduces that make them are the ones gradient clipping already relies
// on), so every rank reaches the same verdict without a collective of its own. Non-finite
// values never reach it: they stop the run (or are an fp16 overflow) before the update.
// See docs/configuration.md ([train] spike_*) and docs/formats-run.md.
#pragma once
#include <cstdint>
#include <deque>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>

namespace weft {

struct RunConfig;

enum class SpikePolicy { kWarn, kSkipStep, kStop };
// "warn", "skip-step", "stop"; anything else is an InputError naming the valid ones.
SpikePolicy parse_spike_policy(const std::string& name);
const char* spike_policy_name(SpikePolicy p);
// Checks the [train] spike_* keys: a known policy, spike_zscore finite and > 0,
// 2 <= spike_min_steps <= spike_window. Throws InputError naming the key and the value.
void validate_spike_keys(const RunConfig& cfg);

// The last `window` values of a series and the z-score of a new value against them.
class OutlierWindow {
 public:
  OutlierWindow(int64_t window, int64_t min_count);
  // (x - mean) / std over the values held (population std), before x is added; NaN while
  // fewer than min_count values are held or when their std is 0.
  double zscore(double x) const;
  void push(double x);  // drops the oldest value when the window is full
  int64_t count() const { return static_cast<int64_t>(values_.size()); }
  double mean() const;
  double stddev() const;
  const std::deque<double>& values() const { return values_; }

 private:
  int64_t window_, min_count_;
  std::deque<double> values_;
};

// One series' part of a spike: the value, the window's mean and std, and the z-score.
struct SpikeStat {
  double value = 0.0, mean = 0.0, stddev = 0.0, z = 0.0;
  bool spiked = false;
};

struct Spike {
  SpikeStat loss, grad_norm;
  int64_t window_count = 0;  // steps in the window the statistics came from
  bool vetoed = false;       // the update was not applied (skip-step or stop)
};

class SpikeDetector {
 public:
  SpikeDetector(SpikePolicy policy, double zscore, int64_t window, int64_t min_steps);
  // From the [train] spike_* keys.
  explicit SpikeDetector(const RunConfig& cfg);

  SpikePolicy policy() const { return policy_; }
  double threshold() const { return zscore_; }
  // Judges a step from its reduced loss and gradient norm (finite), then adds them to the
  // windows (a spike too: a lasting shift of the level stops counting as a spike after a few
  // steps, so skip-step cannot skip forever). Returns true when the update must not be
  // applied (a spike under skip-step or stop). The engine calls it before the update.
  bool judge(double loss, double grad_norm);
  // The spike of the last judged step, if it was one; cleared by the call.
  std::optional<Spike> take() { return std::exchange(last_, std::nullopt); }

  // The windows, for a checkpoint's trainer.json (so that a resumed run judges as the
  // uninterrupted one would); restore() reads them back, checking every value (InputError
  // naming `where`). An absent state leaves the windows empty.
  nlohmann::json state() const;
  void restore(const nlohmann::json& trainer_state, const std::string& where);

 private:
  SpikePolicy policy_;
  double zscore_;
  OutlierWindow loss_, grad_norm_;
  std::optional<Spike> last_;
};

// A run that climbs away from where it started (issue 34 class 9). The spike detector judges a
// value against its recent window, so a steady climb, or one within the first spike_min_steps,
// is never a spike. The watch follows the loss since the run's first step: once the loss has
// lost more than half of the way down it had come (above lowest + (first - lowest) / 2, when it
// had come down at least a tenth of the first loss), or has stayed above 1.5 x the first loss,
// for kSteps consecutive steps, observe() returns the warning (once per process).
class DivergenceWatch {
 public:
  static constexpr int kSteps = 3;
  // step: 1-based; loss finite. Returns the warning the first time the rule holds.
  std::optional<std::string> observe(int64_t step, double loss);

 private:
  double first_ = 0, lowest_ = 0;
  int64_t first_step_ = 0, lowest_step_ = 0;
  int above_ = 0;
  bool warned_ = false;
};

// The "spike" field of a step's metrics line: {"loss_z", "grad_norm_z", "action"} (a z-score
// is null while the window is too short).
nlohmann::json spike_json(const Spike& s, SpikePolicy policy);
// Logs the warning for warn and skip-step; for stop throws RuntimeError naming the step
// (1-based), the value(s), the mean(s) and std(s), and the last checkpoint.
void act_on_spike(const Spike& s, const SpikeDetector& d, int64_t step, const std::string& last_checkpoint);

}  // namespace weft
