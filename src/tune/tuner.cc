#include "tune/tuner.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/text_util.h"
#include "core/log.h"
#include "plan/system.h"
#include "report/gnuplot.h"
#include "tune/cbo.h"

namespace fs = std::filesystem;

namespace weft::tune {

namespace {

using clock = std::chrono::steady_clock;

void validate(const TuneOptions& o) {
  if (o.trials < 1 || o.trials > 100000) throw_input("--trials must be in [1, 100000], got {}", o.trials);
  if (!(o.budget_s >= 0) || !std::isfinite(o.budget_s)) throw_input("--budget must be >= 0 seconds, got {}", o.budget_s);
  if (o.trial.steps < 1 || o.trial.steps > 100000) throw_input("--steps must be in [1, 100000], got {}", o.trial.steps);
  if (o.trial.warmup < 0 || o.trial.warmup > 100000) throw_input("--warmup must be in [0, 100000], got {}", o.trial.warmup);
  if (o.planner_seeds < 0) throw_input("--planner-seeds must be >= 0, got {}", o.planner_seeds);
  if (o.n_initial < 1) throw_input("--initial must be >= 1, got {}", o.n_initial);
  if (o.batch < 1) throw_input("--batch must be >= 1, got {}", o.batch);
  if (!(o.kappa >= 0) || !std::isfinite(o.kappa)) throw_input("--kappa must be >= 0, got {}", o.kappa);
  if (o.out.empty()) throw_input("--out must name a folder");
  if (o.confirm < 0 || o.confirm > 1000) throw_input("--confirm must be in [0, 1000] trials, got {}", o.confirm);
  if (!o.recalibrate.empty() && o.trials < 2) {
    throw_input("--recalibrate {} needs at least 2 trials (it fits the device speed, the link bandwidth and a step "
                "overhead to their times); --trials {} measures at most {}",
                o.recalibrate, o.trials, o.trials);
  }
}

// --recalibrate: the planner's constants fitted to the successful trials (every rank computes
// the same; rank 0 writes the file).
std::optional<Recalibration> recalibrate_from(const TuneResult& res, const plan::System& sys,
                                              const plan::ModelShape& shape, const plan::Options& po) {
  std::vector<plan::Layout> layouts;
  std::vector<double> measured;
  for (const TrialRecord& t : res.trials) {
    if (t.result.failed) continue;
    layouts.push_back(res.space.layouts[t.layout]);
    measured.push_back(t.result.step_s);
  }
  if (layouts.size() < 2) {  // the tune's own results are still written
    log_warn("--recalibrate: {} successful trial(s) of {}: too few to fit the planner's constants (at least 2); no "
             "system file written",
             layouts.size(), res.trials.size());
    return std::nullopt;
  }
  Recalibration r = recalibrate(sys, shape, po, layouts, measured);
  if (!r.link_fitted) {
    log_warn("--recalibrate: every trial ran on one rank, so their times say nothing of the links: the link "
             "bandwidths are kept as they are (x 1)");
  }
  return r;
}

// The system file the planner prices with: the option, else the config's, else the implicit
// one (WEFT_SYSTEM or systems/local.toml, as `weft train`); "" for none.
std::string resolve_system(const TuneOptions& o, const RunConfig& cfg) {
  if (!o.system.empty()) return o.system;
  if (!cfg.system.empty()) return cfg.system;
  return plan::implicit_system_path();
}

// --oracle: the results of earlier trials by encoded knobs.
using Oracle = std::map<std::vector<double>, TrialResult>;

std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> f(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        f.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        f.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      f.emplace_back();
    } else {
      f.back() += c;
    }
  }
  return f;
}

// A tune.csv's trials by their knobs; `what` names the option that reads it in messages.
Oracle read_oracle(const std::string& path, const std::string& what = "--oracle") {
  std::ifstream in(path);
  if (!in) throw_input("{} {}: cannot read it", what, path);
  std::string line;
  std::getline(in, line);
  const std::vector<std::string> head = split_csv_line(line);
  auto column = [&](const std::string& name) {
    const auto it = std::find(head.begin(), head.end(), name);
    if (it == head.end()) throw_input("{} {}: no column '{}' (a tune.csv of weft tune has it)", what, path, name);
    return static_cast<size_t>(it - head.begin());
  };
  std::vector<size_t> knob_cols;
  for (const char* k : kKnobNames) knob_cols.push_back(column(std::string("p:") + k));
  const size_t obj = column("objective"), ms = column("m:step_ms"), peak = column("m:peak_bytes"), why = column("m:failure");
  Oracle oracle;
  for (int row = 2; std::getline(in, line); ++row) {
    if (line.empty()) continue;
    const std::vector<std::string> f = split_csv_line(line);
    if (f.size() != head.size()) throw_input("{} {}: row {} has {} fields, the header {}", what, path, row, f.size(), head.size());
    std::vector<double> knobs;
    try {
      for (int k = 0; k < kNumKnobs; ++k) knobs.push_back(knob_value_from_text(k, f[knob_cols[static_cast<size_t>(k)]]));
    } catch (const InputError& e) {
      throw_input("{} {}: row {}: {}", what, path, row, e.what());
    }
    // A measured figure: a finite number >= 0, the whole field.
    const auto number = [&](size_t col) {
      const std::string& t = f[col];
      char* end = nullptr;
      const double x = std::strtod(t.c_str(), &end);
      if (t.empty() || end != t.c_str() + t.size() || !std::isfinite(x) || x < 0) {
        throw_input("{} {}: row {}: {} '{}' is not a finite number >= 0", what, path, row, head[col], t);
      }
      return x;
    };
    TrialResult r;
    if (f[obj] == "F") {
      r.failed = true;
      r.reason = f[why].empty() ? "failed in the oracle" : f[why];
    } else {
      r.tokens_per_s = number(obj);
      r.step_s = number(ms) / 1e3;
      r.peak_bytes = static_cast<int64_t>(number(peak));
    }
    oracle[knobs] = r;
  }
  return oracle;
}

TrialResult look_up(const Oracle& oracle, const std::vector<double>& knobs, const std::string& path) {
  const auto it = oracle.find(knobs);
  if (it != oracle.end()) return it->second;
  TrialResult r;
  r.failed = true;
  r.reason = fmt::format("not in the oracle {}", path);
  return r;
}

void write_csv(const TuneResult& res, const std::string& path);

// The search: the planner's seeds, then CBO's proposals, trial by trial, until the trials,
// the candidates or the budget run out (the budget's clock agreed over the ranks).
void run_search(TuneResult& res, const RunConfig& cfg, const TuneOptions& o, const RunData& data,
                Communicator& world) {
  const LayoutSpace& space = res.space;
  const Oracle oracle = o.oracle.empty() ? Oracle{} : read_oracle(o.oracle);
  const std::string csv = o.out + "/tune.csv";
  const Oracle recorded = o.resume ? read_oracle(csv, "--resume") : Oracle{};
  if (o.resume) log_info("tune: resuming {}: {} trials recorded", csv, recorded.size());
  size_t reused = 0;
  std::vector<Candidate> cands;
  for (size_t i = 0; i < space.size(); ++i) cands.push_back({static_cast<int64_t>(i), space.features(i)});
  std::vector<int64_t> seeds;
  const std::vector<size_t> order = space.by_prediction();
  for (size_t k = 0; k < order.size() && static_cast<int>(k) < o.planner_seeds; ++k) seeds.push_back(static_cast<int64_t>(order[k]));
  CboOptions co;
  co.kappa = o.kappa;
  co.n_initial = o.n_initial;
  co.seed = o.seed;
  Cbo cbo(std::move(cands), co, seeds);
  const auto t0 = clock::now();
  auto elapsed = [&] {
    double s = std::chrono::duration<double>(clock::now() - t0).count();
    world.all_reduce(&s, 1, CommDType::kF64, ReduceOp::kMax);
    return s;
  };
  while (static_cast<int>(res.trials.size()) < o.trials) {
    if (o.budget_s > 0 && elapsed() >= o.budget_s) {
      log_info("tune: the budget of {:.0f} s is spent after {} trials", o.budget_s, res.trials.size());
      break;
    }
    const int q = std::min(o.batch, o.trials - static_cast<int>(res.trials.size()));
    const int observed = static_cast<int>(cbo.observations().size()) + cbo.n_pending();
    const std::vector<int64_t> ids = cbo.propose(q);
    if (ids.empty()) {
      log_info("tune: every one of the {} layouts has been tried", space.size());
      break;
    }
    for (size_t k = 0; k < ids.size(); ++k) {
      TrialRecord t;
      t.index = static_cast<int>(res.trials.size());
      t.layout = static_cast<size_t>(ids[k]);
      const bool seeded = std::find(seeds.begin(), seeds.end(), ids[k]) != seeds.end();
      t.source = seeded ? "planner" : observed + static_cast<int>(k) < o.n_initial ? "random" : "surrogate";
      t.predicted_s = space.has_prediction() ? space.predicted_s[t.layout] : 0.0;
      t.submitted_s = elapsed();
      const auto rec = recorded.find(space.knobs[t.layout]);
      const bool replayed = rec != recorded.end();
      if (replayed) {
        t.result = rec->second;  // measured before the stop: not run again
        ++reused;
      } else {
        t.result = oracle.empty() ? run_trial(cfg, space.layouts[t.layout], data, world, o.trial)
                                  : look_up(oracle, space.knobs[t.layout], o.oracle);
      }
      t.gathered_s = elapsed();
      if (replayed) t.source += " (recorded)";
      if (t.result.failed) {
        cbo.observe_failure(ids[k]);
        log_info("tune: trial {:>3}/{} [{}] {}: failed: {}", t.index + 1, o.trials, t.source,
                 space.layouts[t.layout].describe(), t.result.reason);
      } else {
        cbo.observe(ids[k], t.result.tokens_per_s);
        log_info("tune: trial {:>3}/{} [{}] {}: {:.0f} tokens/s, step {:.1f} ms{}, peak {:.1f} MiB", t.index + 1,
                 o.trials, t.source, space.layouts[t.layout].describe(), t.result.tokens_per_s, t.result.step_s * 1e3,
                 t.predicted_s > 0 ? fmt::format(" (planner {:.1f} ms)", t.predicted_s * 1e3) : "",
                 static_cast<double>(t.result.peak_bytes) / (1 << 20));
      }
      if (!order.empty() && t.layout == order[0]) res.planner_pick = t.index;
      res.trials.push_back(std::move(t));
      // Every finished trial on disk at once (renamed into place, synced): a stop, a kill -9
      // or a lost node keeps them, and --resume goes on from them.
      if (world.rank() == 0) write_csv(res, csv);
    }
  }
  if (o.resume && reused < recorded.size()) {
    log_warn("tune: {} of the {} trials {} records were not proposed again (another config, seed, trial count or "
             "rank count than the stopped tune's?); they are not in the new tune.csv",
             recorded.size() - reused, recorded.size(), csv);
  }
}

// --confirm (TuneOptions::confirm): the fastest successful trials and the planner's pick, run
// twice more each, round by round (the second round in reverse order: a machine that drifts
// during the confirmation weighs on every candidate alike); each one's step becomes the median
// of its measurements. Returns the confirmed trials' indices (empty: nothing confirmed).
std::vector<int> confirm_fastest(TuneResult& res, const RunConfig& cfg, const TuneOptions& o, const RunData& data,
                                 Communicator& world) {
  if (o.confirm <= 0) return {};
  if (!o.oracle.empty()) {
    log_info("tune: --confirm {} not done: the trials were looked up in {}, not run", o.confirm, o.oracle);
    return {};
  }
  std::vector<int> ok;
  for (const TrialRecord& t : res.trials) {
    if (!t.result.failed) ok.push_back(t.index);
  }
  std::stable_sort(ok.begin(), ok.end(), [&](int a, int b) {
    return res.trials[static_cast<size_t>(a)].result.step_s < res.trials[static_cast<size_t>(b)].result.step_s;
  });
  std::vector<int> cand(ok.begin(), ok.begin() + static_cast<std::ptrdiff_t>(std::min<size_t>(ok.size(), static_cast<size_t>(o.confirm))));
  const int pick = res.planner_pick;
  const bool add_pick = pick >= 0 && !res.trials[static_cast<size_t>(pick)].result.failed &&
                        std::find(cand.begin(), cand.end(), pick) == cand.end();
  if (cand.empty()) return {};
  log_info("tune: confirming the {} fastest trials{}: two more runs each, interleaved", cand.size(),
           add_pick ? " and the planner's pick" : "");
  if (add_pick) cand.push_back(pick);
  std::map<int, std::vector<double>> steps;
  for (int i : cand) steps[i] = {res.trials[static_cast<size_t>(i)].result.step_s};
  for (int round = 0; round < 2; ++round) {
    for (size_t k = 0; k < cand.size(); ++k) {
      const int i = round == 0 ? cand[k] : cand[cand.size() - 1 - k];
      TrialRecord& t = res.trials[static_cast<size_t>(i)];
      const TrialResult r = run_trial(cfg, res.space.layouts[t.layout], data, world, o.trial);
      if (r.failed) {
        log_warn("tune: trial {} ({}) failed when run again: {}", i + 1, res.space.layouts[t.layout].describe(), r.reason);
        continue;
      }
      steps[i].push_back(r.step_s);
      t.result.peak_bytes = std::max(t.result.peak_bytes, r.peak_bytes);
    }
  }
  for (int i : cand) {
    const size_t n = steps[i].size();
    const double median = median_seconds(steps[i]);
    TrialRecord& t = res.trials[static_cast<size_t>(i)];
    std::string each;
    for (double x : steps[i]) each += fmt::format("{}{:.1f}", each.empty() ? "" : ", ", x * 1e3);
    log_info("tune: confirmed trial {:>3} {}: step {:.1f} ms, the median of {} runs ({} ms){}", i + 1,
             res.space.layouts[t.layout].describe(), median * 1e3, n, each,
             t.predicted_s > 0 ? fmt::format(" (planner {:.1f} ms)", t.predicted_s * 1e3) : "");
    t.result.tokens_per_s *= t.result.step_s / median;
    t.result.step_s = median;
    t.runs = static_cast<int>(n);
  }
  return cand;
}

// The fastest successful trial (res.best): of the confirmed ones when there are.
void pick_best(TuneResult& res, const std::vector<int>& confirmed) {
  res.best = -1;
  for (const TrialRecord& t : res.trials) {
    if (t.result.failed) continue;
    if (!confirmed.empty() && std::find(confirmed.begin(), confirmed.end(), t.index) == confirmed.end()) continue;
    if (res.best < 0 || t.result.tokens_per_s > res.trials[static_cast<size_t>(res.best)].result.tokens_per_s) res.best = t.index;
  }
}

// Shapley values of the knobs for the surrogate's predicted throughput at every successful
// trial, against a background of valid layouts spread over the space. A hybrid of knobs that
// is no valid layout (tp x pp x dp != world, ...) is left out of the value function
// (tune/shapley.h); a valid one takes its planner prediction as the surrogate's extra feature.
void analyse(TuneResult& res) {
  const LayoutSpace& space = res.space;
  std::vector<std::vector<double>> x;
  std::vector<double> y;
  for (const TrialRecord& t : res.trials) {
    if (t.result.failed) continue;
    x.push_back(space.features(t.layout));
    y.push_back(t.result.tokens_per_s);
    res.shap_trials.push_back(t.index);
  }
  if (x.size() < 2) {
    res.shap_trials.clear();
    return;
  }
  ForestOptions fo;
  fo.seed = 7;
  const Forest forest = Forest::fit(x, y, fo);
  auto model = [&](std::span<const double> knobs) {
    const std::vector<double> k(knobs.begin(), knobs.end());
    const std::optional<size_t> i = space.find(k);
    WEFT_CHECK(i.has_value(), "tune: the Shapley analysis asked about a layout outside the space");
    return forest.predict(space.features(*i)).mean;
  };
  auto valid = [&](std::span<const double> knobs) {
    return space.find(std::vector<double>(knobs.begin(), knobs.end())).has_value();
  };
  std::vector<std::vector<double>> points, background;
  for (int t : res.shap_trials) points.push_back(space.knobs[res.trials[static_cast<size_t>(t)].layout]);
  const size_t nb = std::min<size_t>(space.size(), 32);
  for (size_t k = 0; k < nb; ++k) background.push_back(space.knobs[k * space.size() / nb]);
  res.shap = shapley_values(model, points, background, valid);
  res.ranking = rank_by_mean_abs(res.shap);
}

// --- outputs ---

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

void write_csv(const TuneResult& res, const std::string& path) {
  std::string out = "job_id";
  for (const char* k : kKnobNames) out += fmt::format(",p:{}", k);
  out += ",objective,m:step_ms,m:predicted_ms,m:peak_bytes,m:source,m:timestamp_submit,m:timestamp_gather,m:failure,m:runs\n";
  for (const TrialRecord& t : res.trials) {
    const std::vector<double>& k = res.space.knobs[t.layout];
    out += std::to_string(t.index);
    for (int j = 0; j < kNumKnobs; ++j) {
      out += ',';
      out += knob_value_text(j, k[static_cast<size_t>(j)]);
    }
    const TrialResult& r = t.result;
    // DeepHyper writes "F" as the objective of a failed evaluation. The figures are written
    // in full (shortest round-trip form), so a replay (--oracle) sees the same numbers.
    out += r.failed ? std::string(",F,,") : fmt::format(",{},{},", r.tokens_per_s, r.step_s * 1e3);
    out += t.predicted_s > 0 ? fmt::format("{:.6g}", t.predicted_s * 1e3) : "";
    out += fmt::format(",{},{},{:.3f},{:.3f},{},{}\n", r.failed ? 0 : r.peak_bytes, t.source, t.submitted_s, t.gathered_s,
                       csv_field(r.reason), r.failed ? 0 : t.runs);
  }
  write_file_atomic(path, out);
}

nlohmann::json summary_json(const TuneResult& res) {
  auto trial_json = [&](int i) -> nlohmann::json {
    if (i < 0) return nullptr;
    const TrialRecord& t = res.trials[static_cast<size_t>(i)];
    return {{"trial", t.index}, {"layout", res.space.layouts[t.layout].describe()},
            {"tokens_per_s", t.result.tokens_per_s}, {"step_ms", t.result.step_s * 1e3},
            {"predicted_ms", t.predicted_s * 1e3}, {"peak_bytes", t.result.peak_bytes}, {"runs", t.runs}};
  };
  nlohmann::json j = {{"space", res.space.size()}, {"trials", res.trials.size()}, {"best", trial_json(res.best)},
                      {"planner_pick", trial_json(res.planner_pick)}, {"system", res.system_path}};
  int failed = 0;
  std::vector<double> errs;
  for (const TrialRecord& t : res.trials) {
    if (t.result.failed) {
      ++failed;
    } else if (t.predicted_s > 0) {
      errs.push_back(t.predicted_s / t.result.step_s - 1.0);
    }
  }
  j["failed"] = failed;
  if (res.recalibration) {
    const Recalibration& c = *res.recalibration;
    j["recalibration"] = {{"trials", c.trials}, {"link_fitted", c.link_fitted}, {"error_before", c.error_before}, {"error_after", c.error_after},
                          {"device_scale", c.device_scale}, {"link_scale", c.link_scale},
                          {"added_overhead_ms", c.added_overhead_s * 1e3}};
  }
  if (!errs.empty()) {
    double abs_sum = 0, sum = 0;
    for (double e : errs) abs_sum += std::fabs(e), sum += e;
    j["planner_error"] = {{"mean_abs", abs_sum / static_cast<double>(errs.size())},
                          {"mean_signed", sum / static_cast<double>(errs.size())}, {"trials", errs.size()}};
  }
  if (res.best >= 0 && res.planner_pick >= 0) {
    j["best_over_planner_pick"] = res.trials[static_cast<size_t>(res.best)].result.tokens_per_s /
                                  res.trials[static_cast<size_t>(res.planner_pick)].result.tokens_per_s;
  }
  return j;
}

nlohmann::json shap_json(const TuneResult& res) {
  nlohmann::json ranking = nlohmann::json::array(), points = nlohmann::json::array();
  for (const FeatureImportance& f : res.ranking) {
    ranking.push_back({{"knob", kKnobNames[static_cast<size_t>(f.feature)]}, {"mean_abs_phi", f.mean_abs_phi}});
  }
  for (size_t p = 0; p < res.shap_trials.size(); ++p) {
    const TrialRecord& t = res.trials[static_cast<size_t>(res.shap_trials[p])];
    nlohmann::json knobs, phi;
    for (int k = 0; k < kNumKnobs; ++k) {
      knobs[kKnobNames[static_cast<size_t>(k)]] = knob_value_text(k, res.space.knobs[t.layout][static_cast<size_t>(k)]);
      phi[kKnobNames[static_cast<size_t>(k)]] = res.shap.phi[p][static_cast<size_t>(k)];
    }
    points.push_back({{"trial", t.index}, {"knobs", knobs}, {"phi", phi}, {"surrogate", res.shap.value[p]},
                      {"measured", t.result.tokens_per_s}});
  }
  return {{"objective", "tokens_per_s"}, {"base", res.shap.base}, {"ranking", ranking}, {"points", points},
          {"method", "exact interventional Shapley values of the random-forest surrogate's mean, over every "
                     "coalition of the knobs; hybrids that are no valid layout are left out (tune/shapley.h)"}};
}

// shap.png: mean |phi| per knob, largest on top; shap_beeswarm.png: one dot per trial and knob
// at its phi, coloured by the knob's value (low blue, high red) within the knob's range.
void write_plots(const TuneResult& res, const std::string& dir) {
  const report::Gnuplot gp = report::find_gnuplot();
  std::vector<std::string> bars;
  const size_t n = res.ranking.size();
  for (size_t r = 0; r < n; ++r) {
    const FeatureImportance& f = res.ranking[n - 1 - r];
    bars.push_back(fmt::format("{} {} {:.6g}", r, kKnobNames[static_cast<size_t>(f.feature)], f.mean_abs_phi));
  }
  std::string s = report::script_header(gp, "shap", 800, 500) + report::datablock("bars", bars);
  s += "set termoption noenhanced\nset title 'SHAP: mean |phi| of each knob (tokens/s)'\nset xlabel 'mean |phi| (tokens/s)'\nunset key\n"
       "set style fill solid 0.8\nset yrange [-0.6:" + fmt::format("{}", n) + "-0.4]\n"
       "plot $bars using ($3*0.5):1:($3*0.5):(0.35):yticlabels(2) with boxxyerror lc rgb '#3366aa'\n";
  report::run_script(gp, dir, "shap", s);
  std::vector<std::string> dots;
  for (size_t r = 0; r < n; ++r) {
    const int k = res.ranking[n - 1 - r].feature;
    double lo = 1e300, hi = -1e300;
    for (int t : res.shap_trials) {
      const double v = res.space.knobs[res.trials[static_cast<size_t>(t)].layout][static_cast<size_t>(k)];
      lo = std::min(lo, v), hi = std::max(hi, v);
    }
    for (size_t p = 0; p < res.shap_trials.size(); ++p) {
      const double v = res.space.knobs[res.trials[static_cast<size_t>(res.shap_trials[p])].layout][static_cast<size_t>(k)];
      const double jitter = 0.3 * (static_cast<double>((p * 2654435761u) % 1000) / 1000.0 - 0.5);
      dots.push_back(fmt::format("{:.6g} {:.4f} {:.4f}", res.shap.phi[p][static_cast<size_t>(k)],
                                 static_cast<double>(r) + jitter, hi > lo ? (v - lo) / (hi - lo) : 0.5));
    }
  }
  std::string ticks;
  for (size_t r = 0; r < n; ++r) {
    ticks += fmt::format("{}'{}' {}", r ? ", " : "", kKnobNames[static_cast<size_t>(res.ranking[n - 1 - r].feature)], r);
  }
  std::string b = report::script_header(gp, "shap_beeswarm", 800, 500) + report::datablock("dots", dots);
  b += "set termoption noenhanced\nset title 'SHAP per trial: phi of each knob (colour: the knob value, low to high)'\n"
       "set xlabel 'phi (tokens/s)'\nunset key\nset palette defined (0 '#3366cc', 1 '#cc3333')\nset cbrange [0:1]\n"
       "set ytics (" + ticks + ")\n" + fmt::format("set yrange [-0.6:{}-0.4]\n", n) +
       "plot $dots using 1:2:3 with points pt 7 ps 1 lc palette\n";
  report::run_script(gp, dir, "shap_beeswarm", b);
}

void write_outputs(const TuneResult& res, const std::string& dir) {
  fs::create_directories(dir);
  write_csv(res, dir + "/tune.csv");
  write_file_atomic(dir + "/summary.json", summary_json(res).dump(2) + "\n");
  if (res.best >= 0) {
    const TrialRecord& b = res.trials[static_cast<size_t>(res.best)];
    write_file_atomic(dir + "/best.toml",
                       fmt::format("# weft tune: the fastest of {} trials, {:.0f} tokens/s (trial {})\n{}",
                                   res.trials.size(), b.result.tokens_per_s, b.index,
                                   layout_toml(res.space.layouts[b.layout])));
  }
  if (!res.shap_trials.empty()) {
    write_file_atomic(dir + "/shap.json", shap_json(res).dump(2) + "\n");
    write_plots(res, dir);
  }
}

void log_summary(const TuneResult& res) {
  if (res.best < 0) {
    log_warn("tune: no trial succeeded");
    return;
  }
  const TrialRecord& b = res.trials[static_cast<size_t>(res.best)];
  log_info("tune: best of {} trials: {} at {:.0f} tokens/s (trial {}{})", res.trials.size(),
           res.space.layouts[b.layout].describe(), b.result.tokens_per_s, b.index + 1,
           b.runs > 1 ? fmt::format("; the median of {} runs", b.runs) : "");
  if (res.planner_pick >= 0) {
    const TrialRecord& p = res.trials[static_cast<size_t>(res.planner_pick)];
    log_info("tune: the planner's pick {}: {} ({:.2f}x the best)", res.space.layouts[p.layout].describe(),
             p.result.failed ? "failed: " + p.result.reason : fmt::format("{:.0f} tokens/s", p.result.tokens_per_s),
             p.result.failed ? 0.0 : b.result.tokens_per_s / p.result.tokens_per_s);
  }
  std::string rank;
  for (const FeatureImportance& f : res.ranking) {
    rank += fmt::format("{}{} {:.1f}", rank.empty() ? "" : ", ", kKnobNames[static_cast<size_t>(f.feature)], f.mean_abs_phi);
  }
  if (!rank.empty()) log_info("tune: knobs by mean |SHAP| (tokens/s): {}", rank);
}

}  // namespace


TuneResult tune(const RunConfig& cfg, const TuneOptions& o, Communicator& world) {
  validate(o);
  cfg.validate();
  const ModelConfig mc = cfg.model_config();
  const Precision precision = parse_precision(cfg.precision);
  TuneResult res;
  res.system_path = resolve_system(o, cfg);
  std::optional<plan::System> sys;
  plan::Options po;
  if (!res.system_path.empty()) {
    sys = plan::load_system(res.system_path);  // InputError naming the file and the key
    po = plan::Options::from_system(*sys, precision, cfg.global_batch);
    po.matmul = parse_matmul_mode(cfg.matmul);  // the trials' products
  } else if (!o.recalibrate.empty()) {
    throw_input("--recalibrate {} needs a system file to correct (--system, the config's system key or "
                "systems/local.toml from `weft calibrate`)", o.recalibrate);
  }
  res.space = layout_space(mc, cfg.seq(), cfg.global_batch, precision, world.size(), sys ? &*sys : nullptr, po, cfg.order,
                           o.allow_lossy);
  // The family's training data (also with --oracle: the run is real); trials validate nothing.
  RunConfig train_only = cfg;
  train_only.val_batches = 0;
  const std::unique_ptr<RunData> data = open_run_data(train_only, mc, cfg.seq(mc));
  log_info("tune: {} valid layouts of {} on {} ranks (global batch {}, seq {}); planner: {}", res.space.size(), mc.name,
           world.size(), cfg.global_batch, cfg.seq(),
           res.system_path.empty() ? std::string("no system file (no seeds, no predicted-time feature)") : res.system_path);
  if (world.rank() == 0) fs::create_directories(o.out);  // tune.csv grows there trial by trial
  // The trials run the fp32 product `weft calibrate` measured fastest, as `weft train` does
  // with the same system file (train/trainer.cc), unless the config names one: a sweep timed on
  // another library than the runs and the planner's prices would measure the library.
  RunConfig trial_cfg = cfg;
  if (sys && trial_cfg.fp32_kernel.empty() && trial_cfg.backend.rfind("cpu", 0) == 0) {
    trial_cfg.fp32_kernel = sys->device.fp32_kernel;
  }
  run_search(res, trial_cfg, o, *data, world);
  pick_best(res, confirm_fastest(res, trial_cfg, o, *data, world));
  analyse(res);
  if (!o.recalibrate.empty()) {
    res.recalibration = recalibrate_from(res, *sys, plan::ModelShape::from_config(mc, cfg.seq()), po);
  }
  if (world.rank() == 0) {
    write_outputs(res, o.out);
    log_summary(res);
    if (res.recalibration) {
      const Recalibration& c = *res.recalibration;
      const std::vector<std::string> notes = {
          fmt::format("Recalibrated by `weft tune` from {} trials of {} on {} ranks (base: {}).", c.trials, mc.name,
                      world.size(), res.system_path),
          fmt::format("Device rates x {:.4g}, link bandwidths x {:.4g}{}, step overhead + {:.4g} ms.", c.device_scale,
                      c.link_scale, c.link_fitted ? "" : " (not fitted: the trials ran on one rank)",
                      c.added_overhead_s * 1e3),
          fmt::format("Planner error on those trials (mean |predicted/measured - 1|): before {:.1f}%, after {:.1f}%.",
                      c.error_before * 100, c.error_after * 100)};
      write_file_atomic(o.recalibrate, plan::system_to_toml(c.system, notes));
      log_info("tune: wrote {}: {} {}", o.recalibrate, notes[1], notes[2]);
    }
  }
  world.barrier();
  return res;
}

}  // namespace weft::tune
