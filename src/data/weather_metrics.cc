#include "data/weather_metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/error.h"

namespace weft {

std::vector<double> lat_weighted_acc(const float* pred, const float* truth, const float* clim, int64_t V, int64_t H,
                                     int64_t W, const std::vector<float>& weights) {
  if (static_cast<int64_t>(weights.size()) != H) {
    throw_input("lat-weighted ACC: {} weights for {} latitudes", weights.size(), H);
  }
  const int64_t n = H * W;
  std::vector<double> out(static_cast<size_t>(V), 0.0);
  for (int64_t v = 0; v < V; ++v) {
    const int64_t o = v * n;
    double fmean = 0, amean = 0;
    for (int64_t k = 0; k < n; ++k) {
      fmean += static_cast<double>(pred[o + k]) - clim[o + k];
      amean += static_cast<double>(truth[o + k]) - clim[o + k];
    }
    fmean /= static_cast<double>(n);
    amean /= static_cast<double>(n);
    double fa = 0, ff = 0, aa = 0;
    for (int64_t j = 0; j < H; ++j) {
      double rfa = 0, rff = 0, raa = 0;
      for (int64_t i = 0; i < W; ++i) {
        const int64_t k = o + j * W + i;
        const double f = static_cast<double>(pred[k]) - clim[k] - fmean;
        const double a = static_cast<double>(truth[k]) - clim[k] - amean;
        rfa += f * a;
        rff += f * f;
        raa += a * a;
      }
      fa += weights[j] * rfa;
      ff += weights[j] * rff;
      aa += weights[j] * raa;
    }
    // No anomaly signal in one of them: nothing to correlate, 0 by definition.
    if (!(ff > 0.0) || !(aa > 0.0)) continue;
    const double acc = fa / std::sqrt(ff * aa);
    out[static_cast<size_t>(v)] = std::clamp(acc, -1.0, 1.0);  // rounding may step just outside
  }
  return out;
}

ForecastScores::ForecastScores(int64_t V, int64_t H, int64_t W, std::vector<float> weights, std::vector<float> clim)
    : V_(V), H_(H), W_(W), w_(std::move(weights)), clim_(std::move(clim)) {
  if (V <= 0 || H <= 0 || W <= 0) throw_input("forecast scores of V={}, H={}, W={}: each must be positive", V, H, W);
  if (static_cast<int64_t>(w_.size()) != H) throw_input("forecast scores: {} latitude weights for {} latitudes", w_.size(), H);
  if (static_cast<int64_t>(clim_.size()) != V * H * W) {
    throw_input("forecast scores: the climatology has {} values, a forecast {} (V={}, H={}, W={})", clim_.size(),
                V * H * W, V, H, W);
  }
  rmse_sum_.assign(static_cast<size_t>(V), 0.0);
  acc_sum_.assign(static_cast<size_t>(V), 0.0);
}

void ForecastScores::add(const float* pred, const float* truth) {
  const std::vector<double> r = lat_weighted_rmse(pred, truth, V_, H_, W_, w_);
  const std::vector<double> a = lat_weighted_acc(pred, truth, clim_.data(), V_, H_, W_, w_);
  for (size_t v = 0; v < r.size(); ++v) {
    rmse_sum_[v] += r[v];
    acc_sum_[v] += a[v];
  }
  ++n_;
}

std::vector<double> ForecastScores::rmse() const {
  if (n_ == 0) throw_input("forecast scores: no forecast was added");
  std::vector<double> out = rmse_sum_;
  for (double& x : out) x /= static_cast<double>(n_);
  return out;
}

std::vector<double> ForecastScores::acc() const {
  if (n_ == 0) throw_input("forecast scores: no forecast was added");
  std::vector<double> out = acc_sum_;
  for (double& x : out) x /= static_cast<double>(n_);
  return out;
}

std::vector<int64_t> forecast_start_times(int64_t num_times, int64_t max_lead_steps, int64_t stride,
                                          int64_t max_samples) {
  if (stride < 1) throw_input("a stride of {} time steps between start times: it must be at least 1", stride);
  if (max_samples < 0) throw_input("{} samples: the count must be >= 0 (0: every start time)", max_samples);
  if (max_lead_steps < 0) throw_input("a lead of {} steps: it must be >= 0", max_lead_steps);
  const int64_t span = num_times - max_lead_steps;  // start times [0, span)
  if (span <= 0) {
    throw_input("a lead of {} time steps leaves no start time in {} time steps", max_lead_steps, num_times);
  }
  const int64_t avail = (span + stride - 1) / stride;
  if (max_samples > avail) {
    throw_input("{} samples asked for, {} start times there ({} time steps, the longest lead {} of them, stride {})",
                max_samples, avail, num_times, max_lead_steps, stride);
  }
  const int64_t n = max_samples > 0 ? max_samples : avail;
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (int64_t s = 0; s < n; ++s) out[static_cast<size_t>(s)] = s * stride;
  return out;
}

const char* baseline_name(WeatherBaseline b) {
  return b == WeatherBaseline::kPersistence ? "persistence" : "climatology";
}

ForecastScores baseline_scores(const WeatherDataset& ds, WeatherBaseline b, const std::vector<float>& clim,
                               int64_t lead_steps, const std::vector<int64_t>& starts) {
  ForecastScores scores(ds.num_variables(), ds.height(), ds.width(), latitude_weights(ds.lat()), clim);
  std::vector<float> x(static_cast<size_t>(ds.sample_size())), y(x.size());
  for (int64_t t : starts) {
    ds.sample(t, lead_steps, x.data(), y.data());  // InputError naming t, the lead and T outside the file
    scores.add(b == WeatherBaseline::kPersistence ? x.data() : clim.data(), y.data());
  }
  return scores;
}

}  // namespace weft
