// `weft eval` of a ClimaX checkpoint: see eval_weather.h.
#include "eval_weather.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "backend/registry.h"
#include "ckpt/checkpoint.h"
#include "cli_util.h"
#include "core/error.h"
#include "core/log.h"
#include "data/text_util.h"
#include "data/weather.h"
#include "data/weather_metrics.h"
#include "engine/engine.h"
#include "report/gnuplot.h"
#include "report/weather_map.h"
#include "train/config.h"
#include "train/forecast_eval.h"

namespace fs = std::filesystem;

namespace weft {

namespace {

std::string join(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

// The variables the model was trained on: the `variables` key of the run's config.toml beside
// the checkpoint folder ("" when there is none or it names none: the file's fields).
std::string run_variables(const std::string& ckpt_dir) {
  const fs::path cfg = fs::path(ckpt_dir).parent_path() / "config.toml";
  std::error_code ec;
  if (!fs::is_regular_file(cfg, ec)) return "";
  try {
    return load_run_config(cfg.string(), {}).variables;
  } catch (const InputError& e) {
    log_warn("eval: cannot read the training run's variables from {} ({}); using the file's fields", cfg.string(),
             e.what());
    return "";
  }
}

// "2000-01-03 06:00" for `hours` after a reference "YYYY-MM-DD[ hh:mm:ss]"; "<hours> h since
// <reference>" when the reference has another form.
std::string valid_time(const std::string& reference, double offset_hours) {
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0;
  const int got = std::sscanf(reference.c_str(), "%d-%d-%d%*[ T]%d:%d:%d", &y, &mo, &d, &h, &mi, &s);
  if (got < 3) return fmt::format("{} h since {}", offset_hours, reference);
  using namespace std::chrono;
  const sys_days day0{year{y} / month{static_cast<unsigned>(mo)} / day{static_cast<unsigned>(d)}};
  const auto t = day0 + std::chrono::hours(h) + minutes(mi) + seconds(s) + minutes(std::llround(offset_hours * 60.0));
  const sys_days day1 = floor<days>(t);
  const year_month_day ymd{day1};
  const auto rest = duration_cast<minutes>(t - day1).count();
  return fmt::format("{:04d}-{:02d}-{:02d} {:02d}:{:02d}", static_cast<int>(ymd.year()),
                     static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()), rest / 60, rest % 60);
}

double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

constexpr const char* kKinds[] = {"model", "persistence", "climatology"};

const VariableScores& kind_scores(const LeadScores& r, int k) {
  return k == 0 ? r.model : k == 1 ? r.persistence : r.climatology;
}

}  // namespace

bool looks_like_weather_data(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  if (fs::is_regular_file(p, ec)) return p.extension() == ".nc";
  if (!fs::is_directory(p, ec)) return false;
  for (const char* f : {"train.nc", "val.nc", "test.nc"}) {
    if (fs::exists(p / f, ec)) return true;
  }
  return false;
}

bool looks_like_token_data(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  if (fs::is_regular_file(p, ec)) return p.extension() == ".bin";
  if (!fs::is_directory(p, ec)) return false;
  for (const auto& e : fs::directory_iterator(p, ec)) {
    if (e.path().extension() == ".bin") return true;
  }
  return false;
}

namespace {

constexpr const char* kAccNote = "the climatology forecast has no anomaly: its ACC is 0 by definition";

// What the phases of eval_weather_checkpoint share.
struct EvalRun {
  EvalRun(const std::string& c, const ModelConfig& m, const WeatherEvalOptions& opts) : ckpt_dir(c), mc(m), o(opts) {}
  const std::string& ckpt_dir;
  const ModelConfig& mc;
  const WeatherEvalOptions& o;
  std::string model_desc;  // "'climax-tiny' (5 variables on a 32x64 grid)"
  fs::path dir, split_path;
  std::optional<report::Gnuplot> gp;
  std::optional<WeatherDataset> train, ds;  // normalised with the stats of stats_src ("": train's own)
  std::string stats_src;
  std::vector<int64_t> lead_steps, starts;
  int64_t map_v = 0;
  size_t map_k = 0;
  int64_t step = -1;  // the checkpoint's training step (-1: unknown)
  std::vector<float> clim, weights, map_pred, map_truth;
  std::vector<LeadScores> results;
  double seconds = 0;
};

// The options and the folder, before any data is read.
void check_eval_inputs(EvalRun& r) {
  const std::string& ckpt_dir = r.ckpt_dir;

  const WeatherEvalOptions& o = r.o;
  const std::string& model_desc = r.model_desc;
  const fs::path dir(o.data);
  r.dir = dir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    if (looks_like_weather_data(o.data)) {
      throw_input("--data {} is one NetCDF file; a ClimaX checkpoint is evaluated on a weather folder (train.nc for the "
                  "climatology, the {}.nc split, stats.json)",
                  o.data, o.split);
    }
    throw_input("--data {}: no such folder; checkpoint {} is a ClimaX model {} that reads a weather folder (train.nc, "
                "val.nc, test.nc, stats.json: weft prepare --synthetic-weather DIR)",
                o.data, ckpt_dir, model_desc);
  }
  if (!fs::exists(dir / "train.nc", ec)) {
    if (looks_like_token_data(o.data)) {
      throw_input("--data {} holds token shards, not weather fields: checkpoint {} is a ClimaX model {} that reads a "
                  "weather folder (train.nc, val.nc, test.nc, stats.json: weft prepare --synthetic-weather DIR)",
                  o.data, ckpt_dir, model_desc);
    }
    throw_input("--data {} has no train.nc: a ClimaX checkpoint is evaluated on a weather folder (train.nc for the "
                "climatology, the {}.nc split, stats.json)",
                o.data, o.split);
  }
  if (o.split != "test" && o.split != "val") throw_input("--split {}: expected test or val", o.split);
  const fs::path split_path = dir / (o.split + ".nc");
  r.split_path = split_path;
  if (!fs::exists(split_path, ec)) {
    std::vector<std::string> there;
    for (const char* s : {"train", "val", "test"}) {
      if (fs::exists(dir / (std::string(s) + ".nc"), ec)) there.push_back(s);
    }
    throw_input("--split {}: {} has no {}.nc (splits there: {})", o.split, o.data, o.split, join(there));
  }
  if (o.lead_hours.empty()) throw_input("--lead-hours: give at least one lead time");
  if (o.batch <= 0) throw_input("--batch must be positive, got {}", o.batch);
  if (o.map_sample < 0) throw_input("--map-sample must be >= 0, got {}", o.map_sample);
  if (o.format != "text" && o.format != "json") throw_input("--format {}: expected text or json", o.format);
  if (!o.out_json.empty()) check_output_file(o.out_json, "--out");
  if (!o.map_png.empty()) {
    check_output_file(o.map_png, "--map");
    r.gp = report::find_gnuplot();
  }

}

// The train file (climatology, stats) and the scored split, normalised alike; the lead steps and
// the start times.
void open_eval_data(EvalRun& r) {
  const std::string& ckpt_dir = r.ckpt_dir;
  const ModelConfig& mc = r.mc;
  const WeatherEvalOptions& o = r.o;
  const std::string& model_desc = r.model_desc;
  const bool given = !o.variables.empty();
  const std::vector<std::string> vars =
      parse_name_list(given ? o.variables : run_variables(ckpt_dir), given ? "--variables" : "the run's data.variables");
  r.train.emplace(WeatherDataset::open((r.dir / "train.nc").string(), vars));
  r.ds.emplace(WeatherDataset::open(r.split_path.string(), r.train->variables()));
  WeatherDataset& train = *r.train;
  WeatherDataset& ds = *r.ds;
  if (ds.height() != train.height() || ds.width() != train.width() || ds.lat() != train.lat() ||
      ds.lon() != train.lon() || ds.step_hours() != train.step_hours()) {
    throw_input("{}: a {}x{} grid every {} h, but {} is {}x{} every {} h (or other coordinates)", ds.path(),
                ds.height(), ds.width(), ds.step_hours(), train.path(), train.height(), train.width(),
                train.step_hours());
  }
  if (ds.num_variables() != mc.vars || ds.height() != mc.img_h || ds.width() != mc.img_w) {
    throw_input("{}: {} fields ({}) on a {}x{} grid; checkpoint {} is model {}{}", ds.path(), ds.num_variables(),
                join(ds.variables()), ds.height(), ds.width(), ckpt_dir, model_desc,
                ds.num_variables() != mc.vars ? " (choose the fields with --variables)" : "");
  }
  std::error_code ec;
  std::string& stats_src = r.stats_src;
  stats_src = o.stats;
  if (stats_src.empty() && fs::exists(r.dir / "stats.json", ec)) stats_src = (r.dir / "stats.json").string();
  const WeatherStats stats = stats_src.empty() ? train.compute_stats() : WeatherStats::load(stats_src);
  train.set_normalisation(stats);
  ds.set_normalisation(stats);

  std::vector<int64_t>& lead_steps = r.lead_steps;
  for (double h : o.lead_hours) {
    const double steps = h / ds.step_hours();
    if (!(h > 0) || !std::isfinite(h) || std::abs(steps - std::round(steps)) > 1e-9) {
      throw_input("--lead-hours {}: not a positive multiple of the {} h time step of {}", h, ds.step_hours(),
                  ds.path());
    }
    lead_steps.push_back(std::llround(steps));
  }
  const int64_t max_lead = *std::max_element(lead_steps.begin(), lead_steps.end());
  try {
    r.starts = forecast_start_times(ds.num_times(), max_lead, o.stride, o.samples);
  } catch (const InputError& e) {
    throw_input("{} ({} time steps every {} h; --samples {}, --stride {}): {}", ds.path(), ds.num_times(),
                ds.step_hours(), o.samples, o.stride, e.what());
  }

}

// The map's variable, lead and start time (checked before the model runs).
void choose_map(EvalRun& r) {
  const WeatherEvalOptions& o = r.o;
  const WeatherDataset& ds = *r.ds;
  const int64_t n = static_cast<int64_t>(r.starts.size());
  if (!o.map_png.empty()) {
    if (!o.map_var.empty()) {
      const auto it = std::find(ds.variables().begin(), ds.variables().end(), o.map_var);
      if (it == ds.variables().end()) {
        throw_input("--map-var {}: not among the evaluated fields ({})", o.map_var, join(ds.variables()));
      }
      r.map_v = it - ds.variables().begin();
    }
    if (o.map_lead != 0.0) {
      const auto it = std::find(o.lead_hours.begin(), o.lead_hours.end(), o.map_lead);
      if (it == o.lead_hours.end()) {
        std::vector<std::string> ls;
        for (double h : o.lead_hours) ls.push_back(fmt::format("{}", h));
        throw_input("--map-lead {}: not among --lead-hours ({})", o.map_lead, join(ls));
      }
      r.map_k = static_cast<size_t>(it - o.lead_hours.begin());
    }
    if (o.map_sample >= n) {
      throw_input("--map-sample {}: the evaluation has {} start times (0..{})", o.map_sample, n, n - 1);
    }
  }

}

// The checkpoint's parameters in an engine of the requested layout, for micro-batches of up to
// B forecasts per data-parallel rank.
EngineRun load_eval_engine(EvalRun& r, Communicator& world) {
  EngineRequest req;
  req.model = r.mc;
  req.seq = r.mc.n_ctx;
  req.batch = 1;
  req.per_replica = true;
  req.training = false;
  // Up to o.batch forecasts per data-parallel rank, no more than its share of the start times.
  const int64_t dp = layout_engine_config(r.o.layout, req, world.size()).layout.dp;
  req.batch = std::clamp<int64_t>((static_cast<int64_t>(r.starts.size()) + dp - 1) / dp, 1, r.o.batch);
  EngineRun run(layout_engine_config(r.o.layout, req, world.size()), world, r.o.backend, r.o.comm);
  load_checkpoint_into(*run.engine, r.ckpt_dir);
  try {
    const nlohmann::json tj = load_checkpoint_trainer(r.ckpt_dir);
    if (tj.contains("step") && tj.at("step").is_number_integer()) r.step = tj.at("step").get<int64_t>();
  } catch (const InputError&) {
    // A checkpoint without trainer.json (converted from elsewhere): no step to show.
  }
  return run;
}

// The model's forecasts and the two baselines', scored lead by lead over the same start times
// (train/forecast_eval.h); the map's forecast and truth kept on the way.
void score_forecasts(EvalRun& r, Engine& engine) {
  r.clim = r.train->climatology();  // normalised with the same stats
  ForecastEvalSpec spec;
  spec.split = &*r.ds;
  spec.climatology = r.clim;
  spec.starts = r.starts;
  spec.lead_hours = r.o.lead_hours;
  spec.lead_steps = r.lead_steps;
  spec.what = r.ckpt_dir;
  if (!r.o.map_png.empty()) {
    spec.map_lead = static_cast<int64_t>(r.map_k);
    spec.map_sample = r.o.map_sample;
    spec.map_variable = r.map_v;
  }
  ForecastEval e = evaluate_forecasts(engine, spec);
  r.weights = std::move(e.latitude_weights);
  r.map_pred = std::move(e.map_pred);
  r.map_truth = std::move(e.map_truth);
  r.results = std::move(e.leads);
  r.seconds = e.seconds;
}

// The scores as JSON (--out, --format json).
nlohmann::ordered_json eval_json(const EvalRun& r) {
  const std::string& ckpt_dir = r.ckpt_dir;
  const ModelConfig& mc = r.mc;
  const WeatherEvalOptions& o = r.o;
  const WeatherDataset& train = *r.train;
  const WeatherDataset& ds = *r.ds;
  const std::vector<int64_t>& starts = r.starts;
  const std::vector<LeadScores>& results = r.results;
  const int64_t n = static_cast<int64_t>(starts.size()), V = ds.num_variables();
  const std::vector<std::string>& names = ds.variables();
  const std::vector<std::string>& units = ds.units();
  const std::vector<double>& sd = ds.norm_std();
  const std::string& stats_src = r.stats_src;
  const double seconds = r.seconds;
  const int64_t step = r.step;
  const std::string stats_desc = stats_src.empty() ? fmt::format("the stats of {} (no stats.json)", train.path()) : stats_src;
  const char* const acc_note = kAccNote;
  nlohmann::ordered_json j;
  j["checkpoint"] = ckpt_dir;
  j["model"] = mc.name;
  j["step"] = step >= 0 ? nlohmann::ordered_json(step) : nlohmann::ordered_json(nullptr);
  j["data"] = o.data;
  j["split"] = o.split;
  j["file"] = ds.path();
  j["stats"] = stats_desc;
  j["climatology"] = fmt::format("time mean of {} ({} time steps)", train.path(), train.num_times());
  j["samples"] = n;
  j["stride"] = o.stride;
  j["start_hours"] = {ds.times_hours()[static_cast<size_t>(starts.front())],
                      ds.times_hours()[static_cast<size_t>(starts.back())]};
  j["time_units"] = ds.time_units();
  j["variables"] = names;
  j["units"] = units;
  j["std"] = sd;
  nlohmann::ordered_json leads = nlohmann::ordered_json::array();
  for (const LeadScores& r : results) {
    nlohmann::ordered_json l;
    l["lead_hours"] = r.hours;
    l["lead_steps"] = r.steps;
    nlohmann::ordered_json per = nlohmann::ordered_json::object();
    for (int64_t v = 0; v < V; ++v) {
      nlohmann::ordered_json e;
      for (int k = 0; k < 3; ++k) {
        const VariableScores& s = kind_scores(r, k);
        e[kKinds[k]] = {{"rmse", s.rmse[v]}, {"rmse_physical", s.rmse[v] * sd[v]}, {"acc", s.acc[v]}};
      }
      per[names[v]] = e;
    }
    l["scores"] = per;
    nlohmann::ordered_json mean;
    for (int k = 0; k < 3; ++k) {
      const VariableScores& s = kind_scores(r, k);
      mean[kKinds[k]] = {{"rmse", mean_of(s.rmse)}, {"acc", mean_of(s.acc)}};
    }
    l["mean"] = mean;
    leads.push_back(l);
  }
  j["leads"] = leads;
  j["notes"] = {
      "rmse: latitude-weighted, normalised units (the stats above), per forecast, then the mean over start times; "
      "rmse_physical = rmse * std",
      "acc: anomalies against the climatology above, centred per forecast, latitude-weighted; the mean over start "
      "times; the same in normalised and physical units",
      acc_note,
      "mean: over the variables (physical units differ, so only normalised RMSE and ACC)"};
  j["seconds"] = seconds;

  return j;
}

// The map (--map): forecast, truth and error of one field in physical units; its entry in j.
void draw_eval_map(const EvalRun& r, nlohmann::ordered_json& j) {

  const ModelConfig& mc = r.mc;
  const WeatherEvalOptions& o = r.o;
  const WeatherDataset& train = *r.train;
  const WeatherDataset& ds = *r.ds;
  const std::vector<int64_t>& starts = r.starts;
  const std::vector<LeadScores>& results = r.results;
  const int64_t n = static_cast<int64_t>(starts.size());
  const std::vector<std::string>& names = ds.variables();
  const std::vector<std::string>& units = ds.units();
  const std::vector<double>& sd = ds.norm_std();
  const std::string& stats_src = r.stats_src;

  const int64_t step = r.step;
  const std::string stats_desc = stats_src.empty() ? fmt::format("the stats of {} (no stats.json)", train.path()) : stats_src;
  const std::vector<int64_t>& lead_steps = r.lead_steps;
  const int64_t H = ds.height(), W = ds.width();
  const std::vector<float>& clim = r.clim;
  const std::vector<float>& weights = r.weights;
  const std::string step_desc = step >= 0 ? fmt::format(", step {}", step) : "";
  const std::string starts_desc =
      fmt::format("{} start times{} from {} to {}", n, o.stride > 1 ? fmt::format(" every {} steps", o.stride) : "",
                  valid_time(ds.time_reference(), ds.times_hours()[static_cast<size_t>(starts.front())]),
                  valid_time(ds.time_reference(), ds.times_hours()[static_cast<size_t>(starts.back())]));

  if (!o.map_png.empty()) {
    report::WeatherMap m;
    const int64_t t = starts[static_cast<size_t>(o.map_sample)];
    const double m_sd = sd[static_cast<size_t>(r.map_v)], m_mean = ds.norm_mean()[static_cast<size_t>(r.map_v)];
    m.units = units[static_cast<size_t>(r.map_v)];
    m.lat = ds.lat();
    m.lon = ds.lon();
    m.pred.resize(r.map_pred.size());
    m.truth.resize(r.map_truth.size());
    for (size_t i = 0; i < r.map_pred.size(); ++i) {
      m.pred[i] = static_cast<float>(r.map_pred[i] * m_sd + m_mean);
      m.truth[i] = static_cast<float>(r.map_truth[i] * m_sd + m_mean);
    }
    const double valid_hours = ds.times_hours()[static_cast<size_t>(t + lead_steps[r.map_k])];
    const size_t mv = static_cast<size_t>(r.map_v);
    const std::vector<double> one_rmse = lat_weighted_rmse(r.map_pred.data(), r.map_truth.data(), 1, H, W, weights);
    std::vector<float> clim_v(clim.begin() + r.map_v * H * W, clim.begin() + (r.map_v + 1) * H * W);
    const std::vector<double> one_acc =
        lat_weighted_acc(r.map_pred.data(), r.map_truth.data(), clim_v.data(), 1, H, W, weights);
    m.title = fmt::format(
        "{}{}: {} h forecast from {}, valid {} ({} sample {})\n{}{}: RMSE {:.4g}{}, ACC {:.4f}", names[mv],
        m.units.empty() ? "" : " (" + m.units + ")", results[r.map_k].hours,
        valid_time(ds.time_reference(), ds.times_hours()[static_cast<size_t>(t)]),
        valid_time(ds.time_reference(), valid_hours), o.split, o.map_sample, mc.name, step_desc,
        one_rmse[0] * m_sd, m.units.empty() ? "" : " " + m.units, one_acc[0]);
    report::draw_weather_map(*r.gp, m, o.map_png);
    j["map"] = {{"file", o.map_png}, {"variable", names[mv]}, {"lead_hours", results[r.map_k].hours},
                {"sample", o.map_sample}, {"start_hours", ds.times_hours()[static_cast<size_t>(t)]},
                {"rmse_physical", one_rmse[0] * m_sd}, {"acc", one_acc[0]}};
  }
}

// The scores as a table on stdout.
void print_eval_table(const EvalRun& r) {

  const ModelConfig& mc = r.mc;
  const WeatherEvalOptions& o = r.o;
  const WeatherDataset& train = *r.train;
  const WeatherDataset& ds = *r.ds;
  const std::vector<int64_t>& starts = r.starts;
  const std::vector<LeadScores>& results = r.results;
  const int64_t n = static_cast<int64_t>(starts.size()), V = ds.num_variables();
  const std::vector<std::string>& names = ds.variables();
  const std::vector<std::string>& units = ds.units();
  const std::vector<double>& sd = ds.norm_std();
  const std::string& stats_src = r.stats_src;
  const double seconds = r.seconds;
  const int64_t step = r.step;
  const std::string stats_desc = stats_src.empty() ? fmt::format("the stats of {} (no stats.json)", train.path()) : stats_src;
  const std::string step_desc = step >= 0 ? fmt::format(", step {}", step) : "";
  const std::string starts_desc =
      fmt::format("{} start times{} from {} to {}", n, o.stride > 1 ? fmt::format(" every {} steps", o.stride) : "",
                  valid_time(ds.time_reference(), ds.times_hours()[static_cast<size_t>(starts.front())]),
                  valid_time(ds.time_reference(), ds.times_hours()[static_cast<size_t>(starts.back())]));

  fmt::print("weft eval: {}{} on {} ({}), {}\n", mc.name, step_desc, ds.path(), o.split, starts_desc);
  fmt::print("normalised with {}; climatology: time mean of {}; {:.1f} s\n", stats_desc, train.path(), seconds);
  for (const LeadScores& r : results) {
    fmt::print("\n{:<10} {:^26}    {:^41}  {:^23}\n", fmt::format("lead {} h", r.hours), "RMSE (normalised)",
               "RMSE (physical units)", "ACC");
    fmt::print("{:<10} {:>8} {:>8} {:>8}    {:>9} {:>9} {:>9} {:<11}  {:>7} {:>7} {:>7}\n", "variable", "model",
               "persist", "climat", "model", "persist", "climat", "units", "model", "persist", "climat");
    for (int64_t v = 0; v < V; ++v) {
      fmt::print("{:<10} {:>8.4f} {:>8.4f} {:>8.4f}    {:>9.4g} {:>9.4g} {:>9.4g} {:<11}  {:>7.4f} {:>7.4f} {:>7}\n",
                 names[v], r.model.rmse[v], r.persistence.rmse[v], r.climatology.rmse[v], r.model.rmse[v] * sd[v],
                 r.persistence.rmse[v] * sd[v], r.climatology.rmse[v] * sd[v], units[v].empty() ? "-" : units[v],
                 r.model.acc[v], r.persistence.acc[v], fmt::format("{:.0f} (*)", r.climatology.acc[v]));
    }
    fmt::print("{:<10} {:>8.4f} {:>8.4f} {:>8.4f}    {:>9} {:>9} {:>9} {:<11}  {:>7.4f} {:>7.4f} {:>7}\n", "mean",
               mean_of(r.model.rmse), mean_of(r.persistence.rmse), mean_of(r.climatology.rmse), "-", "-", "-", "",
               mean_of(r.model.acc), mean_of(r.persistence.acc), fmt::format("{:.0f} (*)", mean_of(r.climatology.acc)));
  }
  fmt::print("\n(*) {}.\n", kAccNote);
  fmt::print("RMSE: latitude-weighted, per forecast, mean over the start times; physical = normalised x the std of "
             "stats. ACC: anomalies against the train climatology (docs/climax.md).\n");
  if (!o.out_json.empty()) fmt::print("wrote {}\n", o.out_json);
  if (!o.map_png.empty()) {
    fmt::print("wrote {}: {} forecast beside the truth, {} h from {} ({} sample {})\n", o.map_png,
               names[static_cast<size_t>(r.map_v)], results[r.map_k].hours,
               valid_time(ds.time_reference(), ds.times_hours()[static_cast<size_t>(starts[o.map_sample])]),
               o.split, o.map_sample);
  }
}

}  // namespace

int eval_weather_checkpoint(const std::string& ckpt_dir, const ModelConfig& mc, const WeatherEvalOptions& o,
                            Communicator& world) {
  EvalRun r{ckpt_dir, mc, o};
  r.model_desc = fmt::format("'{}' ({} variables on a {}x{} grid)", mc.name, mc.vars, mc.img_h, mc.img_w);
  check_eval_inputs(r);
  open_eval_data(r);
  if (!o.map_png.empty()) choose_map(r);
  EngineRun run = load_eval_engine(r, world);
  score_forecasts(r, *run.engine);
  if (world.rank() != 0) return 0;  // every rank scored the same forecasts; rank 0 reports them
  nlohmann::ordered_json j = eval_json(r);
  if (!o.map_png.empty()) draw_eval_map(r, j);
  if (!o.out_json.empty()) write_output_file(o.out_json, j.dump(2) + "\n");
  if (o.format == "json") {
    fmt::print("{}\n", j.dump());
    return 0;
  }
  print_eval_table(r);
  return 0;
}

}  // namespace weft
