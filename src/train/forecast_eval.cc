#include "train/forecast_eval.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.h"
#include "data/field_batch.h"
#include "data/weather_metrics.h"
#include "engine/engine.h"

namespace weft {

namespace {

VariableScores scores_of(const ForecastScores& s) { return {s.rmse(), s.acc()}; }

// Forecast `p` (V, H, W) of start s at lead k must be finite.
void check_finite(const ForecastEvalSpec& spec, const float* p, int64_t s, size_t k) {
  const WeatherDataset& ds = *spec.split;
  const int64_t HW = ds.height() * ds.width(), n_v = ds.num_variables() * HW;
  for (int64_t i = 0; i < n_v; ++i) {
    if (!std::isfinite(p[i])) {
      throw_runtime("eval: the forecast of {} from time step {} (lead {} h) holds {} at variable {}: the "
                    "model's outputs overflow on this data",
                    spec.what, spec.starts[static_cast<size_t>(s)], spec.lead_hours[k], p[i],
                    ds.variables()[static_cast<size_t>(i / HW)]);
    }
  }
}

}  // namespace

ForecastEval evaluate_forecasts(Engine& engine, const ForecastEvalSpec& spec) {
  WEFT_CHECK(spec.split != nullptr && spec.lead_steps.size() == spec.lead_hours.size(),
             "evaluate_forecasts: a split and one lead step per lead");
  const WeatherDataset& ds = *spec.split;
  const std::vector<int64_t>& starts = spec.starts;
  const int64_t n = static_cast<int64_t>(starts.size());
  const int64_t V = ds.num_variables(), H = ds.height(), W = ds.width(), n_v = V * H * W;
  const auto t0 = std::chrono::steady_clock::now();
  ForecastEval r;
  r.latitude_weights = latitude_weights(ds.lat());
  const std::vector<float>& clim = spec.climatology;
  // Forecasts of `chunk` start times at once: a micro-batch on every data-parallel rank.
  const int64_t chunk = engine.config().layout.micro_batch * engine.config().layout.dp;
  std::vector<float> x(static_cast<size_t>(n_v)), y(static_cast<size_t>(chunk * n_v)), pred(y.size());
  for (size_t k = 0; k < spec.lead_steps.size(); ++k) {
    const int64_t lead = spec.lead_steps[k];
    ForecastScores ms(V, H, W, r.latitude_weights, clim);
    for (int64_t first = 0; first < n; first += chunk) {
      const int64_t b = std::min(chunk, n - first);
      engine.outputs_rows(
          [&](int64_t row, int64_t count, HostBatch& hb) {
            const FieldBatch::Rows out = FieldBatch::of(hb).grow(count);
            for (int64_t s = 0; s < count; ++s) {
              ds.sample(starts[static_cast<size_t>(first + row + s)], lead, out.fields + s * n_v,
                        out.target_fields + s * n_v);
              out.lead_hours[s] = static_cast<float>(spec.lead_hours[k]);
            }
          },
          b, pred.data());
      for (int64_t s = 0; s < b; ++s) ds.sample(starts[static_cast<size_t>(first + s)], lead, x.data(), y.data() + s * n_v);
      for (int64_t s = 0; s < b; ++s) {
        const float* p = pred.data() + s * n_v;
        check_finite(spec, p, first + s, k);
        ms.add(p, y.data() + s * n_v);
        if (static_cast<int64_t>(k) == spec.map_lead && first + s == spec.map_sample) {
          const int64_t off = spec.map_variable * H * W;
          r.map_pred.assign(p + off, p + off + H * W);
          r.map_truth.assign(y.data() + s * n_v + off, y.data() + s * n_v + off + H * W);
        }
      }
    }
    LeadScores res;
    res.hours = spec.lead_hours[k];
    res.steps = lead;
    res.model = scores_of(ms);
    res.persistence = scores_of(baseline_scores(ds, WeatherBaseline::kPersistence, clim, lead, starts));
    res.climatology = scores_of(baseline_scores(ds, WeatherBaseline::kClimatology, clim, lead, starts));
    r.leads.push_back(std::move(res));
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace weft
