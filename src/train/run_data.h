// A run's data, as the training loop sees it whatever the model family: the rows of each step's
// global batch and the validation loss. GPT runs read token shards (data/loader.h), ClimaX runs
// gridded fields from NetCDF files (data/weather.h). Opened before anything is written: a
// missing or unusable split fails the run with the path and the values.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "engine/engine.h"
#include "model/config.h"
#include "train/config.h"

namespace weft {

class RunData {
 public:
  virtual ~RunData() = default;
  // Rows [first, first + count) of the global batch of `step` (layout-free: the same rows
  // whatever the number of ranks).
  // Appended to `out`, a host batch of the family's kind (Family::make_batch).
  virtual void fill(int64_t step, int64_t global_batch, int64_t first, int64_t count, HostBatch& out) const = 0;
  virtual bool has_val() const = 0;
  // The validation rows evaluated when `requested` are asked for (what the split holds at most).
  virtual int64_t val_rows(int64_t requested) const = 0;
  // The mean validation loss over val_rows(requested) rows (collective).
  virtual double evaluate(Engine& engine, int64_t requested) const = 0;
  // Settings the data gives the model before it is made (Family::with_settings: a graph
  // dataset's radius and normalisation statistics); none by default.
  virtual std::map<std::string, std::string> model_settings() const { return {}; }
  // Anything the model needs from the data before training (ClimaX: the latitudes).
  virtual void configure(Engine& engine) const {}
  // "1234 train tokens (56 windows of 64)" for the log.
  virtual std::string describe(int64_t seq) const = 0;
};

// The data source of the model's family (ModelCapabilities::data_source: "tokens", token shards;
// "fields", NetCDF weather fields) for `cfg` (T: the sequence length; ClimaX, its patches).
std::unique_ptr<RunData> open_run_data(const RunConfig& cfg, const ModelConfig& mc, int64_t T);

// A further data source under `kind`, for a family that names it (a test's or a plug-in's);
// InputError when the kind is taken.
using RunDataFactory = std::unique_ptr<RunData> (*)(const RunConfig& cfg, const ModelConfig& mc, int64_t T);
void register_run_data(const std::string& kind, RunDataFactory factory);

}  // namespace weft
