// `weft tune CONFIG [--trials K] [--steps S] [--budget SECONDS] [--seed S] [--out DIR] ...`:
// planner-guided Bayesian trials of the run's layouts on the ranks given (tune/tuner.h,
// docs/tune.md). Launched like `weft train` (mpirun -np N weft tune CONFIG).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "cli_util.h"
#include "commands.h"
#include "core/error.h"
#include "core/log.h"
#include "train/config.h"
#include "train/trainer.h"  // set_threads
#include "tune/model_search.h"
#include "tune/tuner.h"
#include "ckpt/checkpoint.h"
#include "eval_graphs.h"

namespace weft {

namespace {

// A tune's results are never replaced silently: --out that holds one needs --overwrite (or
// --resume, which continues it), and --oracle never names the tune.csv this run writes (its
// replay would overwrite its source).
void check_tune_outputs(const tune::TuneOptions& o, bool overwrite) {
  namespace fs = std::filesystem;
  const fs::path out(o.out);
  std::error_code ec;
  if (o.resume) {
    if (overwrite) throw_input("--resume continues the tune in --out {}; --overwrite would replace it: give one", o.out);
    if (!o.oracle.empty()) throw_input("--resume runs the trials its tune.csv lacks; --oracle {} looks every trial up: give one", o.oracle);
    if (!fs::exists(fs::symlink_status(out / "tune.csv", ec))) {
      throw_input("--resume: --out {} holds no tune.csv to continue (a tune writes it after its first trial)", o.out);
    }
    return;
  }
  if (!o.oracle.empty() && fs::equivalent(fs::path(o.oracle), out / "tune.csv", ec)) {
    throw_input("--oracle {} is the tune.csv this run writes into --out {}: the replay would overwrite what it "
                "replays; give another --out",
                o.oracle, o.out);
  }
  for (const char* f : {"tune.csv", "summary.json", "best.toml"}) {
    if (!fs::exists(fs::symlink_status(out / f, ec)) || overwrite) continue;
    throw_input("--out {} already holds a tune ({}); pass --overwrite to replace it, or give another --out", o.out,
                (out / f).string());
  }
}

// `weft tune CONFIG --space ...`: the model search (tune/model_search.h), its trials scored on
// the validation split (graph runs: energy and force MAE; others: the trainer's validation loss).
int model_search_cmd(const std::string& config, const std::vector<std::string>& sets,
                     const std::vector<std::string>& space, const std::string& objective, const tune::TuneOptions& t,
                     int64_t seed, bool overwrite, Communicator& world) {
  if (seed < 0) throw_input("--seed must be >= 0, got {}", seed);
  if (!std::filesystem::exists(config)) throw_input("config file {} does not exist", config);
  if (t.resume || !t.oracle.empty() || !t.recalibrate.empty()) {
    throw_input("--resume, --oracle and --recalibrate apply to a layout search, not to a model search (--space)");
  }
  std::vector<std::pair<std::string, std::string>> overrides;
  for (const std::string& s : sets) overrides.push_back(parse_set(s));
  const RunConfig cfg = load_run_config(config, overrides);
  tune::ModelSearchOptions o;
  for (const std::string& s : space) o.space.push_back(tune::parse_search_dim(s));
  o.trials = t.trials;
  o.n_initial = t.n_initial;
  o.kappa = t.kappa;
  o.seed = static_cast<uint64_t>(seed);
  o.objective = objective;
  o.out = t.out;
  o.overwrite = overwrite;
  std::error_code ec;
  if (std::filesystem::exists(o.out + "/models.json", ec) && !overwrite) {
    throw_input("--out {} already holds a model search ({}/models.json); pass --overwrite to replace it, or give another "
                "--out", o.out, o.out);
  }
  set_threads(cfg.threads);
  set_log_rank(world.rank());
  const bool graphs = std::string_view(cfg.model_config().capabilities().data_source) == "graphs";
  const tune::TrialScorer score = [&](const RunConfig& c, const TrainResult& r, Communicator& w) {
    std::map<std::string, double> m;
    if (r.last_val_loss >= 0) m["val_loss"] = r.last_val_loss;
    if (graphs) {
      // The checkpoint's config.json holds the model the run trained (with the data's statistics).
      const ModelConfig trained = load_checkpoint_config(r.last_checkpoint);
      for (const auto& [k, v] : graph_validation_metrics(r.last_checkpoint, trained, c.data, w)) m[k] = v;
    }
    return m;
  };
  const tune::ModelSearchResult res = tune::model_search(cfg, o, world, score);
  if (world.rank() == 0) {
    fmt::print("wrote {}/models.json{}\n", o.out, res.best >= 0 ? " and best.toml" : "");
    if (res.best >= 0) {
      const tune::ModelTrial& b = res.trials[static_cast<size_t>(res.best)];
      std::string vals;
      for (const auto& [k, v] : b.values) vals += fmt::format(" {}={}", k, v);
      fmt::print("best:{} ({} {:.6g})\n", vals, res.objective, b.objective);
    }
  }
  return res.best >= 0 ? 0 : 1;
}

}  // namespace

int cmd_tune(CLI::App& app, int argc, char** argv, Communicator& world) {
  std::string config;
  std::vector<std::string> sets;
  tune::TuneOptions o;
  int64_t seed = 0;
  app.add_option("config", config, "the run's config (model, data, batch, precision; its layout keys are searched)")->required();
  app.add_option("--trials", o.trials, "trials at most (default 20)");
  app.add_option("--steps", o.trial.steps, "timed steps per trial (default 5)");
  app.add_option("--warmup", o.trial.warmup, "untimed steps before them (default 2)");
  app.add_option("--budget", o.budget_s, "seconds of wall time after which no new trial starts (0: none)");
  app.add_option("--seed", seed, "the search's random draws: a fixed seed gives the same trials (default 0)");
  app.add_option("--out", o.out, "folder for tune.csv, best.toml, summary.json, shap.json and the plots (default runs/tune)");
  app.add_option("--system", o.system, "system file the planner prices with (default: the config's, else $WEFT_SYSTEM, else systems/local.toml)");
  app.add_option("--planner-seeds", o.planner_seeds, "the planner's top picks evaluated first (default 3)");
  app.add_option("--initial", o.n_initial, "points evaluated before the surrogate picks, seeds included (default 5)");
  app.add_option("--batch", o.batch, "points proposed per round by constant liar (default 1)");
  app.add_option("--kappa", o.kappa, "UCB exploration weight (default 1.96)");
  app.add_option("--recalibrate", o.recalibrate, "write the system file corrected by the trials here (error before/after in the log and summary.json)");
  app.add_flag("--allow-lossy", o.allow_lossy, "also search ZeRO++ (zero 3) and lossy compressed collectives: they change the numbers the model trains on");
  app.add_option("--confirm", o.confirm,
                 "after the search, run the N fastest trials and the planner's pick twice more each, interleaved, "
                 "and keep each one's median: the best is the fastest of them (default 0: off)");
  app.add_option("--oracle", o.oracle, "look the trials up in this tune.csv (an earlier sweep) instead of running them");
  bool overwrite = false;
  app.add_flag("--overwrite", overwrite, "replace the tune that --out already holds (refused otherwise)");
  app.add_flag("--resume", o.resume, "continue the tune that --out holds: the trials its tune.csv records are not run again");
  app.add_option("--set", sets, "config override KEY=VALUE (repeatable), e.g. --set seq_len=64");
  std::vector<std::string> space;
  std::string objective;
  app.add_option("--space", space,
                 "model search instead of layouts: a key and its values KEY=V1,V2,... (repeatable), e.g. --space "
                 "model.layer=schnet,egnn --space n_embd=32,64 --space lr=1e-3,3e-3 (docs/tune.md, \"Model search\")");
  app.add_option("--objective", objective,
                 "model search: the validation metric minimised (default val_mae for graph runs, else val_loss)");
  app.parse(argc - 1, argv + 1);
  if (!space.empty()) return model_search_cmd(config, sets, space, objective, o, seed, overwrite, world);
  if (!objective.empty()) throw_input("--objective {} applies to a model search (--space)", objective);
  if (seed < 0) throw_input("--seed must be >= 0, got {}", seed);
  o.seed = static_cast<uint64_t>(seed);
  if (!std::filesystem::exists(config)) throw_input("config file {} does not exist", config);
  std::vector<std::pair<std::string, std::string>> overrides;
  for (const std::string& s : sets) overrides.push_back(parse_set(s));
  const RunConfig cfg = load_run_config(config, overrides);
  check_tune_outputs(o, overwrite);
  check_output_file(o.out + "/tune.csv", "--out");
  if (!o.recalibrate.empty()) check_output_file(o.recalibrate, "--recalibrate");
  set_threads(cfg.threads);
  set_log_rank(world.rank());
  world.set_timeout(std::chrono::milliseconds(static_cast<int64_t>(cfg.comm_timeout * 1000.0)));
  const tune::TuneResult res = tune::tune(cfg, o, world);
  if (world.rank() == 0) fmt::print("wrote {}/tune.csv{}\n", o.out, res.best >= 0 ? " and best.toml" : "");
  return res.best >= 0 ? 0 : 1;
}

}  // namespace weft
