// The forecast scores of a gridded-field model (ClimaX): its forecasts of a weather split,
// computed through the engine in any layout its family allows (Engine::outputs_rows: each
// data-parallel rank forecasts its share of the start times, every rank gets all of them), and
// the persistence and climatology baselines over the same start times, scored per variable
// (data/weather_metrics.h: latitude-weighted RMSE and ACC, WeatherBench's). `weft eval` of a
// ClimaX checkpoint prints and writes them (apps/eval_weather.cc).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/weather.h"

namespace weft {

class Engine;

// Per variable, in normalised units.
struct VariableScores {
  std::vector<double> rmse, acc;
};

// The scores of one lead time: the model's and the two baselines', over the same start times.
struct LeadScores {
  double hours = 0;
  int64_t steps = 0;  // time steps of the split
  VariableScores model, persistence, climatology;
};

struct ForecastEvalSpec {
  const WeatherDataset* split = nullptr;  // normalised as the model was trained
  std::vector<float> climatology;         // (V, H, W), normalised the same way (the train split's)
  std::vector<int64_t> starts;            // start time indices into the split
  std::vector<double> lead_hours;
  std::vector<int64_t> lead_steps;        // the leads in time steps of the split, one per lead_hours
  std::string what;                       // the checkpoint, for messages
  // One forecast kept for a map: of lead map_lead, start map_sample (index into starts),
  // variable map_variable; map_lead < 0: none.
  int64_t map_lead = -1, map_sample = 0, map_variable = 0;
};

struct ForecastEval {
  std::vector<LeadScores> leads;
  std::vector<float> latitude_weights;  // the split's (cos(lat) / mean)
  std::vector<float> map_pred, map_truth;  // (H, W) normalised, when a map was asked for
  double seconds = 0;
};

// Collective over the engine's grid. RuntimeError naming the checkpoint, start, lead and
// variable for a forecast that is not finite.
ForecastEval evaluate_forecasts(Engine& engine, const ForecastEvalSpec& spec);

}  // namespace weft
