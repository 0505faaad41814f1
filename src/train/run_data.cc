#include "train/run_data.h"

#include <fmt/format.h>

#include <filesystem>
#include <map>

#include "core/error.h"
#include "data/field_batch.h"
#include "data/loader.h"
#include "data/token_batch.h"
#include "data/text_util.h"
#include "data/weather.h"
#include "train/graph_run_data.h"

namespace fs = std::filesystem;

namespace weft {

namespace {

// Token shards: the training split and, with validation, the validation split (checked to hold
// at least one sequence).
class TokenRunData final : public RunData {
 public:
  TokenRunData(const RunConfig& cfg, int64_t T, int vocab_size)
      : seed_(static_cast<uint64_t>(cfg.seed)), T_(T), train_(TokenDataset::open_split(cfg.data, "train", vocab_size)) {
    const std::string val_src = cfg.val_data.empty() ? cfg.data : cfg.val_data;
    if (cfg.val_batches > 0) val_ = std::make_unique<TokenDataset>(TokenDataset::open_split(val_src, "val", vocab_size));
    if (train_.num_windows(T) <= 0) {
      throw_input("{}: the training split holds {} tokens, fewer than one sequence of {}+1", cfg.data, train_.size(), T);
    }
    if (val_ && val_->num_windows(T) <= 0) {
      throw_input("{}: the validation split holds {} tokens, fewer than one sequence of {}+1", val_src, val_->size(), T);
    }
  }
  void fill(int64_t step, int64_t global_batch, int64_t first, int64_t count, HostBatch& out) const override {
    const TokenBatch::Rows r = TokenBatch::of(out).grow(count);
    train_.sample_batch(seed_, step, global_batch, first, count, static_cast<int>(T_), r.inputs, r.targets);
  }
  bool has_val() const override { return val_ != nullptr; }
  int64_t val_rows(int64_t requested) const override { return std::min(val_->num_windows(T_), requested); }
  double evaluate(Engine& engine, int64_t requested) const override {
    return engine.evaluate_rows(token_windows(*val_, T_), val_rows(requested));
  }
  std::string describe(int64_t seq) const override {
    return fmt::format("{} train tokens ({} windows of {})", train_.size(), train_.num_windows(seq), seq);
  }

 private:
  uint64_t seed_;
  int64_t T_;
  TokenDataset train_;
  std::unique_ptr<TokenDataset> val_;
};

// A split of a weather folder (DIR/NAME.nc) or a .nc file itself.
std::string weather_file(const std::string& src, const char* split) {
  if (fs::is_directory(src)) return (fs::path(src) / (std::string(split) + ".nc")).string();
  return src;
}

// Gridded fields: the training file with its sampler (global sample i of the run -> a start
// time and a lead), the validation file with a fixed draw (seed 0) of its first rows.
class WeatherRunData final : public RunData {
 public:
  WeatherRunData(const RunConfig& cfg, const ModelConfig& mc)
      : train_(WeatherDataset::open(weather_file(cfg.data, "train"), parse_name_list(cfg.variables, "data.variables"))) {
    const std::vector<double> leads(cfg.lead_hours.begin(), cfg.lead_hours.end());
    check_shape(train_, mc);
    const fs::path stats_path = fs::is_directory(cfg.data) ? fs::path(cfg.data) / "stats.json" : fs::path();
    const WeatherStats stats =
        !stats_path.empty() && fs::exists(stats_path) ? WeatherStats::load(stats_path.string()) : train_.compute_stats();
    train_.set_normalisation(stats);
    sampler_ = std::make_unique<WeatherSampler>(train_, leads, static_cast<uint64_t>(cfg.seed));
    if (cfg.val_batches > 0) {
      const std::string val_src = cfg.val_data.empty() ? cfg.data : cfg.val_data;
      val_ = std::make_unique<WeatherDataset>(WeatherDataset::open(weather_file(val_src, "val"), train_.variables()));
      check_shape(*val_, mc);
      val_->set_normalisation(stats);
      val_sampler_ = std::make_unique<WeatherSampler>(*val_, leads, 0);
    }
  }
  void fill(int64_t step, int64_t global_batch, int64_t first, int64_t count, HostBatch& out) const override {
    const FieldBatch::Rows r = FieldBatch::of(out).grow(count);
    weather_sample_batch(train_, *sampler_, step, global_batch, first, count, r.fields, r.target_fields,
                         r.lead_hours);
  }
  bool has_val() const override { return val_ != nullptr; }
  int64_t val_rows(int64_t requested) const override { return std::min(val_sampler_->epoch_size(), requested); }
  double evaluate(Engine& engine, int64_t requested) const override {
    const int64_t n = val_rows(requested);
    return engine.evaluate_rows(
        [&](int64_t first, int64_t count, HostBatch& out) {
          const FieldBatch::Rows r = FieldBatch::of(out).grow(count);
          weather_sample_batch(*val_, *val_sampler_, 0, n, first, count, r.fields, r.target_fields, r.lead_hours);
        },
        n);
  }
  void configure(Engine& engine) const override {
    std::vector<float> lat(train_.lat().begin(), train_.lat().end());
    for (int c = 0; c < engine.num_chunks(); ++c) engine.model(c).set_latitudes(lat);
  }
  std::string describe(int64_t) const override {
    return fmt::format("{} train times of {} fields on a {}x{} grid every {} h, {} start times per epoch",
                       train_.num_times(), train_.num_variables(), train_.height(), train_.width(), train_.step_hours(),
                       sampler_->epoch_size());
  }

 private:
  static void check_shape(const WeatherDataset& ds, const ModelConfig& mc) {
    if (ds.num_variables() != mc.vars || ds.height() != mc.img_h || ds.width() != mc.img_w) {
      throw_input("{}: {} fields on a {}x{} grid; model '{}' takes {} variables on a {}x{} grid", ds.path(),
                  ds.num_variables(), ds.height(), ds.width(), mc.name, mc.vars, mc.img_h, mc.img_w);
    }
  }
  WeatherDataset train_;
  std::unique_ptr<WeatherSampler> sampler_;
  std::unique_ptr<WeatherDataset> val_;
  std::unique_ptr<WeatherSampler> val_sampler_;
};

std::map<std::string, RunDataFactory>& run_data_sources() {
  static std::map<std::string, RunDataFactory> sources = {
      {"tokens", [](const RunConfig& cfg, const ModelConfig& mc, int64_t T) -> std::unique_ptr<RunData> {
         // A weather key on a token corpus would be ignored: refused instead (issue 34 class 8).
         if (!cfg.variables.empty()) {
           throw_input("data.variables '{}' chooses weather fields; model '{}' trains on token shards ({}): remove it",
                       cfg.variables, mc.name, cfg.data);
         }
         return std::make_unique<TokenRunData>(cfg, T, mc.vocab_size);
       }},
      {"fields", [](const RunConfig& cfg, const ModelConfig& mc, int64_t) -> std::unique_ptr<RunData> {
         return std::make_unique<WeatherRunData>(cfg, mc);
       }},
      {"graphs", [](const RunConfig& cfg, const ModelConfig& mc, int64_t) -> std::unique_ptr<RunData> {
         return open_graph_run_data(cfg, mc);
       }},
  };
  return sources;
}

}  // namespace

void register_run_data(const std::string& kind, RunDataFactory factory) {
  if (!run_data_sources().emplace(kind, factory).second) throw_input("a data source '{}' is registered already", kind);
}

std::unique_ptr<RunData> open_run_data(const RunConfig& cfg, const ModelConfig& mc, int64_t T) {
  const char* kind = mc.capabilities().data_source;
  const auto it = run_data_sources().find(kind);
  if (it == run_data_sources().end()) {
    std::string known;
    for (const auto& [k, f] : run_data_sources()) known += (known.empty() ? "" : ", ") + k;
    throw_input("model '{}' ({}) reads data source '{}', which is not registered (known: {})", mc.name,
                mc.family_name(), kind, known);
  }
  return it->second(cfg, mc, T);
}

}  // namespace weft
