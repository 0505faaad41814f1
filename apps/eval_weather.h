// `weft eval` of a ClimaX checkpoint (eval_cmd.cc picks it by the checkpoint's config): the
// forecasts of a weather folder's split scored per variable against persistence and
// climatology (data/weather_metrics.h), printed as a table, optionally written as JSON, and a
// map of one forecast beside its truth (report/weather_map.h). docs/climax.md, "Evaluating a
// forecast".
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "cli_util.h"
#include "comm/communicator.h"
#include "model/config.h"

namespace weft {

struct WeatherEvalOptions {
  std::string data;              // a weather folder: train.nc (its climatology), the split, stats.json
  std::string split = "test";    // test or val
  std::vector<double> lead_hours{6.0};
  int64_t samples = 0;           // start times scored (0: all)
  int64_t stride = 1;            // time steps between start times
  std::string stats;             // "": DIR/stats.json, else the train split's own stats
  std::string variables;         // comma-separated, model order; "": the run's, else the file's
  int64_t batch = 8;             // forecasts per forward pass
  std::string out_json;          // --out
  std::string map_png;           // --map
  std::string map_var;           // "": the first variable
  int64_t map_sample = 0;        // index into the start times
  double map_lead = 0.0;         // 0: the first lead
  std::string backend = "cpu";
  std::string comm;              // "": the backend's default communicator
  RunConfig layout = layout_defaults();  // any layout the family allows (tp, dp, ZeRO, HSDP)
  std::string format = "text";
};

// Runs through the engine in any layout the family allows (tp, dp, ZeRO, HSDP; the layout rules
// refuse pp and sequence parallelism): each data-parallel rank forecasts its share of the start
// times, every rank scores all of them, rank 0 prints and writes. InputError (exit 2) naming the values for: data that is no weather
// folder (token shards, a missing train.nc), a missing split, a variable not in the file, a grid
// or variable count other than the model's, a lead that is not a positive multiple of the time
// step, a sample or map option out of range; RuntimeError for predictions that are not finite.
int eval_weather_checkpoint(const std::string& ckpt_dir, const ModelConfig& mc, const WeatherEvalOptions& o,
                            Communicator& world);

// Whether `path` looks like weather data (a .nc file, or a folder with train.nc, val.nc or
// test.nc) or like token shards (a .bin file, or a folder holding some): for the message that
// a GPT checkpoint was given weather data or the reverse.
bool looks_like_weather_data(const std::string& path);
bool looks_like_token_data(const std::string& path);

}  // namespace weft
