// Forecast scores of gridded weather fields as ClimaX reports them (Nguyen et al. 2023;
// microsoft/ClimaX src/climax/utils/metrics.py; WeatherBench, Rasp et al. 2020): the
// latitude-weighted RMSE and the anomaly correlation coefficient (ACC) per variable, of one
// forecast and averaged over the forecasts of a set of start times, and the persistence and
// climatology baselines on the same start times. Formulas and conventions: docs/climax.md,
// "Evaluating a forecast".
//
// Shapes as in data/weather.h: V variables, H latitudes, W longitudes; a forecast, its truth
// and a climatology are (V, H, W) row-major with latitude outer; weights (H) come from
// latitude_weights() (cos(lat) / mean cos(lat)).
#pragma once
#include <cstdint>
#include <vector>

#include "data/weather.h"

namespace weft {

// ACC of one (V, H, W) forecast `pred` against `truth`, per variable (V), ClimaX's
// lat_weighted_acc for one forecast:
//   f = pred - clim, a = truth - clim                  anomalies against the climatology (V, H, W)
//   f' = f - mean_{j,i} f, a' = a - mean_{j,i} a       centred (unweighted means over the grid)
//   acc_v = sum_{j,i} w_j f' a' / sqrt(sum_{j,i} w_j f'^2 * sum_{j,i} w_j a'^2)
// in [-1, 1]. When either centred anomaly is zero everywhere there is nothing to correlate and
// the ACC is 0 by definition (so the climatology forecast's own ACC is 0). The ACC does not
// change when pred, truth and clim are rescaled alike per variable (value * s + m, s > 0): it is
// the same in normalised and in physical units. InputError when weights has not H entries.
std::vector<double> lat_weighted_acc(const float* pred, const float* truth, const float* clim, int64_t V, int64_t H,
                                     int64_t W, const std::vector<float>& weights);

// The means over forecasts of the per-forecast scores, per variable: lat_weighted_rmse
// (data/weather.h) and lat_weighted_acc against the climatology given here. ClimaX averages
// its per-batch scores the same way; its batch-pooled ACC is this one at batch size 1.
class ForecastScores {
 public:
  // weights (H), clim (V, H, W): InputError naming the sizes when they do not match.
  ForecastScores(int64_t V, int64_t H, int64_t W, std::vector<float> weights, std::vector<float> clim);
  void add(const float* pred, const float* truth);  // one forecast and its truth, (V, H, W) each
  int64_t count() const { return n_; }
  std::vector<double> rmse() const;  // (V) mean RMSE; InputError before the first add()
  std::vector<double> acc() const;   // (V) mean ACC
  const std::vector<float>& climatology() const { return clim_; }
  const std::vector<float>& weights() const { return w_; }

 private:
  int64_t V_, H_, W_, n_ = 0;
  std::vector<float> w_, clim_;
  std::vector<double> rmse_sum_, acc_sum_;
};

// The start times t of an evaluation: 0, stride, 2 stride, ... while t + max_lead_steps <
// num_times (every lead has its target in the file), the first max_samples of them (0: all).
// InputError naming the values for stride < 1, max_samples < 0, a lead that leaves no start
// time, or more samples asked for than there are.
std::vector<int64_t> forecast_start_times(int64_t num_times, int64_t max_lead_steps, int64_t stride,
                                          int64_t max_samples);

// The two reference forecasts of a lead: persistence predicts y(t + lead) = x(t); climatology
// predicts the climatology (the train split's time mean) whatever t.
enum class WeatherBaseline { kPersistence, kClimatology };
const char* baseline_name(WeatherBaseline b);  // "persistence", "climatology"

// The scores of a baseline over the start times of a split: x at t, truth at t + lead_steps,
// as ds gives them (normalised after set_normalisation); `clim` (V, H, W) in the same units,
// e.g. the train split's climatology() normalised with the same stats. Weights from ds.lat().
// With every start time (forecast_start_times(T, lead, 1, 0)) the RMSEs are persistence_rmse's
// and climatology_rmse's. InputError for a start time outside the file.
ForecastScores baseline_scores(const WeatherDataset& ds, WeatherBaseline b, const std::vector<float>& clim,
                               int64_t lead_steps, const std::vector<int64_t>& starts);

}  // namespace weft
