// `weft ensemble CONFIG --from TUNE_DIR --top K [--groups cost|equal] [--evaluate] [--out DIR]`:
// the top-K configurations of a model search (weft tune --space, tune/model_search.h) trained
// concurrently as sub-communicators of one MPI world, then evaluated together (seed 003's
// workflow: HydraGNN's DeepHyper search, then its top configurations as an ensemble).
//
// Groups: `cost` (default) gives each member ranks in proportion to its predicted work (the
// planner's step time on one rank x steps with a system file, else its model FLOPs per step x
// steps), so that the members finish together; `equal` gives every member world / K ranks
// (HydraGNN's way, whatever the member's size: the imbalance seed 003 names). A member's ranks
// are its data-parallel group (its global batch must divide over them). Ranks no member can use
// wait. `--evaluate` skips the training: the members are the search's own trained trials.
//
// Member k trains with the config's seed + k (its own initial weights and batch order) unless the
// search chose the seed. The ensemble's prediction of a structure is the members' mean, its
// uncertainty their standard deviation (sample, K - 1); printed and written to
// OUT/ensemble.json: each member's ranks, predicted cost, finish time and test MAE, the finish
// times' spread ((max - min) / mean), the ensemble's MAE, and the calibration of its uncertainty
// (the fraction of test errors within 2 standard deviations: about 0.95 for a calibrated
// Gaussian). Graph runs only (the data source "graphs"). docs/tune.md, "Ensembles".
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.h"
#include "cli_util.h"
#include "commands.h"
#include "core/error.h"
#include "core/log.h"
#include "data/atoms/graph_dataset.h"
#include "eval_graphs.h"
#include "plan/predict.h"
#include "plan/system.h"
#include "train/config.h"
#include "train/run_data.h"
#include "train/run_folder.h"
#include "train/trainer.h"
#include "tune/ensemble_groups.h"
#include "tune/model_search.h"

namespace weft {
namespace {

struct Member {
  tune::ModelTrial trial;
  RunConfig cfg;
  double cost = 0;        // predicted work: seconds on one rank (planner) or FLOPs
  int ranks = 0;
  int first_rank = 0;     // world rank of its group's rank 0
  double finish_s = 0;    // its group's training wall time (slowest rank)
  GraphErrors errors;     // its own test errors
};

// A member's predicted work on one rank: the planner's step time x steps with a system file,
// else its training FLOPs per step x steps (at the data's mean structure).
double member_cost(const RunConfig& cfg, const std::string& system_path, bool* priced) {
  ModelConfig mc = cfg.model_config();
  const int64_t seq = cfg.seq(mc);
  const std::unique_ptr<RunData> data = open_run_data(cfg, mc, seq);
  mc = mc.family->with_settings(mc, data->model_settings());
  if (!system_path.empty()) {
    const plan::System sys = plan::load_system(system_path);
    plan::Layout l;
    l.micro_batch = cfg.micro_batch;
    const plan::Options o = plan::Options::from_system(sys, parse_precision(cfg.precision), cfg.global_batch);
    *priced = true;
    return plan::predict(plan::ModelShape::from_config(mc, seq), sys, l, o).step_time_s * static_cast<double>(cfg.steps);
  }
  *priced = false;
  const auto d = mc.family->describe({.model = mc, .B = cfg.micro_batch, .T = seq});
  const double positions = d->mean_positions() / static_cast<double>(cfg.micro_batch) * static_cast<double>(cfg.global_batch);
  return d->train_flops_per_position() * positions * static_cast<double>(cfg.steps);
}

// Ranks per member (tune/ensemble_groups.h); returns the ranks no member takes.
int size_groups(std::vector<Member>& ms, int world, const std::string& mode) {
  std::vector<double> cost;
  for (const Member& m : ms) cost.push_back(m.cost);
  const auto fits = [&](int k, int n) {
    const RunConfig& c = ms[static_cast<size_t>(k)].cfg;
    return c.global_batch % (c.micro_batch * n) == 0;
  };
  const std::vector<int> n = tune::ensemble_group_sizes(cost, fits, world, mode == "equal");
  int used = 0;
  for (size_t k = 0; k < ms.size(); ++k) ms[k].ranks = n[k], used += n[k];
  return world - used;
}

struct EnsembleScores {
  GraphErrors ensemble;
  int64_t energies = 0, energies_within = 0, components = 0, components_within = 0;
};

// The members' mean and sample standard deviation per structure and force component, scored.
EnsembleScores combine(const GraphDataset& ds, const std::vector<std::vector<double>>& energy,
                       const std::vector<std::vector<float>>& forces) {
  EnsembleScores r;
  const size_t K = energy.size();
  size_t f0 = 0;
  std::vector<float> mean_f;
  for (size_t i = 0; i < ds.samples.size(); ++i) {
    const AtomStructure& s = ds.samples[i].s;
    const size_t nf = 3 * static_cast<size_t>(s.atoms());
    auto stats = [&](auto value) {
      double mean = 0, sq = 0;
      for (size_t k = 0; k < K; ++k) mean += value(k);
      mean /= static_cast<double>(K);
      for (size_t k = 0; k < K; ++k) sq += (value(k) - mean) * (value(k) - mean);
      return std::pair{mean, K > 1 ? std::sqrt(sq / static_cast<double>(K - 1)) : 0.0};
    };
    const auto [e, e_sd] = stats([&](size_t k) { return energy[k][i]; });
    mean_f.assign(nf, 0.0f);
    for (size_t c = 0; c < nf; ++c) {
      const auto [f, f_sd] = stats([&](size_t k) { return static_cast<double>(forces[k][f0 + c]); });
      mean_f[c] = static_cast<float>(f);
      if (s.has_forces()) {
        ++r.components;
        r.components_within += std::abs(f - s.forces[c]) <= 2 * f_sd;
      }
    }
    r.ensemble.add(s, e, mean_f.data());
    if (s.has_energy) {
      ++r.energies;
      r.energies_within += std::abs(e - s.energy) <= 2 * e_sd;
    }
    f0 += nf;
  }
  return r;
}

struct EnsembleArgs {
  std::string config, from, out = "runs/ensemble", groups = "cost", split = "test", system;
  int top = 3;
  bool evaluate = false, overwrite = false;
  std::vector<std::string> sets;
};

// The members: the search's best `top` successful trials, with their configs and costs.
std::vector<Member> read_members(const EnsembleArgs& a, const RunConfig& base, int world, bool* priced) {
  std::string objective;
  const std::vector<tune::ModelTrial> trials = tune::read_model_trials(a.from + "/models.json", &objective);
  if (a.top < 1 || a.top > static_cast<int>(trials.size())) {
    throw_input("--top {}: {} holds {} successful trials", a.top, a.from + "/models.json", trials.size());
  }
  if (a.top > world) throw_input("--top {} members need at least {} ranks; this world has {}", a.top, a.top, world);
  std::vector<Member> ms;
  for (int k = 0; k < a.top; ++k) {
    Member m;
    m.trial = trials[static_cast<size_t>(k)];
    m.cfg = tune::trial_run_config(base, m.trial.values);
    m.cfg.out = fmt::format("{}/member-{}", a.out, k);
    // Each member starts from its own random weights and batch order (a deep ensemble's
    // diversity, Lakshminarayanan et al. 2017), unless the search chose the seed.
    if (!m.trial.values.count("seed")) m.cfg.seed = base.seed + k;
    if (m.cfg.data != base.data) {
      throw_input("member {} reads {}, not {}: an ensemble's members are scored on the same structures", k, m.cfg.data,
                  base.data);
    }
    m.cost = member_cost(m.cfg, a.system, priced);
    ms.push_back(std::move(m));
  }
  return ms;
}

// Trains (or, with --evaluate, takes the trial's checkpoint of) this rank's member on its group,
// predicts the split, and returns its checkpoint's predictions; the finish time into `finish`.
GraphPredictions run_member(const EnsembleArgs& a, Member& m, Communicator& group, double* finish) {
  std::string ckpt;
  const auto t0 = std::chrono::steady_clock::now();
  if (a.evaluate) {
    ckpt = find_latest_checkpoint(m.trial.out);
    if (ckpt.empty()) throw_input("--evaluate: trial {} has no checkpoint in {}", m.trial.id, m.trial.out);
  } else {
    RunConfig cfg = m.cfg;
    cfg.dp = group.size();
    cfg.dp_shard = 0;
    TrainOptions opt;
    opt.overwrite = a.overwrite;
    ckpt = train(cfg, opt, group).last_checkpoint;
  }
  *finish = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  GraphEvalOptions o;
  o.data = m.cfg.data;
  o.split = a.split;
  return predict_graph_split(ckpt, load_checkpoint_config(ckpt), o, group);
}

void report(const EnsembleArgs& a, const std::vector<Member>& ms, const EnsembleScores& s, bool priced, int idle) {
  double lo = 1e300, hi = 0, sum = 0;
  for (const Member& m : ms) lo = std::min(lo, m.finish_s), hi = std::max(hi, m.finish_s), sum += m.finish_s;
  const double mean = sum / static_cast<double>(ms.size());
  fmt::print("weft ensemble: {} members of {} ({} groups{}), split '{}'\n", ms.size(), a.from, a.groups,
             idle > 0 ? fmt::format(", {} rank(s) idle", idle) : "", a.split);
  fmt::print("{:>3} {:<44} {:>5} {:>12} {:>9} {:>13} {:>13}\n", "#", "values", "ranks", priced ? "cost s" : "cost GFLOP",
             "finish s", "energy MAE", "force MAE");
  nlohmann::ordered_json members = nlohmann::ordered_json::array();
  for (size_t k = 0; k < ms.size(); ++k) {
    const Member& m = ms[k];
    std::string vals;
    for (const auto& [key, v] : m.trial.values) vals += fmt::format("{}{}={}", vals.empty() ? "" : " ", key, v);
    fmt::print("{:>3} {:<44} {:>5} {:>12.4g} {:>9.2f} {:>13.6g} {:>13.6g}\n", k, vals, m.ranks,
               priced ? m.cost : m.cost / 1e9, m.finish_s, m.errors.energy_mae(), m.errors.force_mae());
    members.push_back({{"trial", m.trial.id}, {"values", m.trial.values}, {"ranks", m.ranks}, {"cost", m.cost},
                       {"finish_s", m.finish_s}, {"energy_mae", m.errors.energy_mae()}, {"force_mae", m.errors.force_mae()},
                       {"out", m.cfg.out}});
  }
  const double e_cal = s.energies ? static_cast<double>(s.energies_within) / static_cast<double>(s.energies) : 0.0;
  const double f_cal = s.components ? static_cast<double>(s.components_within) / static_cast<double>(s.components) : 0.0;
  fmt::print("ensemble (mean of the members): energy MAE per atom {:.6g}, force MAE {:.6g}\n", s.ensemble.energy_mae(),
             s.ensemble.force_mae());
  fmt::print("uncertainty (members' standard deviation): {:.1f}% of energies and {:.1f}% of force components within 2 sd "
             "(a calibrated Gaussian: 95%)\n", 100 * e_cal, 100 * f_cal);
  fmt::print("finish times: {:.2f} - {:.2f} s, spread (max - min) / mean {:.1f}%\n", lo, hi, 100 * (hi - lo) / mean);
  const nlohmann::ordered_json j = {
      {"from", a.from}, {"groups", a.groups}, {"split", a.split}, {"cost_unit", priced ? "seconds" : "flops"},
      {"idle_ranks", idle}, {"members", members},
      {"ensemble", {{"energy_mae", s.ensemble.energy_mae()}, {"energy_rmse", s.ensemble.energy_rmse()},
                    {"force_mae", s.ensemble.force_mae()}, {"force_rmse", s.ensemble.force_rmse()}}},
      {"calibration", {{"energy_within_2sd", e_cal}, {"force_within_2sd", f_cal}}},
      {"finish", {{"min_s", lo}, {"max_s", hi}, {"spread", (hi - lo) / mean}}}};
  std::ofstream f(a.out + "/ensemble.json");
  if (!(f << j.dump(2) << "\n")) throw_input("{}/ensemble.json: cannot write", a.out);
}

int run_ensemble(const EnsembleArgs& a, Communicator& world) {
  std::vector<std::pair<std::string, std::string>> overrides;
  for (const std::string& s : a.sets) overrides.push_back(parse_set(s));
  const RunConfig base = load_run_config(a.config, overrides);
  if (std::string_view(base.model_config().capabilities().data_source) != "graphs") {
    throw_input("weft ensemble scores graph networks (model '{}' is a {} model)", base.model,
                base.model_config().capabilities().family);
  }
  if (a.groups != "cost" && a.groups != "equal") throw_input("--groups {}: expected cost or equal", a.groups);
  std::error_code ec;
  if (std::filesystem::exists(a.out + "/ensemble.json", ec) && !a.overwrite) {
    throw_input("--out {} already holds an ensemble; pass --overwrite to replace it, or give another --out", a.out);
  }
  bool priced = false;
  EnsembleArgs args = a;
  if (args.system.empty()) args.system = !base.system.empty() ? base.system : plan::implicit_system_path();
  std::vector<Member> ms = read_members(args, base, world.size(), &priced);
  const int idle = size_groups(ms, world.size(), a.groups);
  int color = static_cast<int>(ms.size()), first = 0;
  for (size_t k = 0; k < ms.size(); ++k) {
    ms[k].first_rank = first;
    if (world.rank() >= first && world.rank() < first + ms[k].ranks) color = static_cast<int>(k);
    first += ms[k].ranks;
  }
  if (world.rank() == 0) std::filesystem::create_directories(a.out);
  const std::unique_ptr<Communicator> group = world.split(color, world.rank(), "ensemble");
  const size_t K = ms.size();
  std::vector<double> finish(K, 0.0);
  GraphPredictions mine;
  if (color < static_cast<int>(K)) mine = run_member(a, ms[static_cast<size_t>(color)], *group, &finish[static_cast<size_t>(color)]);
  world.all_reduce(finish.data(), static_cast<int64_t>(K), CommDType::kF64, ReduceOp::kMax);
  for (size_t k = 0; k < K; ++k) ms[k].finish_s = finish[k];
  // The members' predictions to world rank 0 (the rank 0 of member 0's group): every member
  // predicted the same structures, so rank 0's own predictions give the sizes.
  std::vector<std::vector<double>> energy(K);
  std::vector<std::vector<float>> forces(K);
  for (size_t k = 0; k < K; ++k) {
    const int src = ms[k].first_rank;
    if (world.rank() == src && src == 0) {
      energy[k] = mine.energy, forces[k] = mine.forces;
    } else if (world.rank() == src) {
      world.send(mine.energy.data(), static_cast<int64_t>(mine.energy.size()), CommDType::kF64, 0, 100);
      world.send(mine.forces.data(), static_cast<int64_t>(mine.forces.size()), CommDType::kF32, 0, 101);
    } else if (world.rank() == 0) {
      energy[k].resize(mine.energy.size());
      forces[k].resize(mine.forces.size());
      world.recv(energy[k].data(), static_cast<int64_t>(energy[k].size()), CommDType::kF64, src, 100);
      world.recv(forces[k].data(), static_cast<int64_t>(forces[k].size()), CommDType::kF32, src, 101);
    }
  }
  if (world.rank() != 0) return 0;
  const GraphDataset ds = GraphDataset::open(base.data, a.split);
  for (size_t k = 0; k < K; ++k) {
    const float* f = forces[k].data();
    for (size_t i = 0; i < ds.samples.size(); ++i) {
      ms[k].errors.add(ds.samples[i].s, energy[k][i], f);
      f += 3 * ds.samples[i].s.atoms();
    }
  }
  report(a, ms, combine(ds, energy, forces), priced, idle);
  return 0;
}

}  // namespace

int cmd_ensemble(CLI::App& app, int argc, char** argv, Communicator& world) {
  EnsembleArgs a;
  app.add_option("config", a.config, "the run's config (the search's base: data, steps, batch)")->required();
  app.add_option("--from", a.from, "a model search's folder (weft tune CONFIG --space ... --out DIR)")->required();
  app.add_option("--top", a.top, "members: the search's best K trials (default 3)");
  app.add_option("--groups", a.groups, "ranks per member: cost (by predicted work, default) or equal (world / K)");
  app.add_option("--out", a.out, "folder for the members' runs and ensemble.json (default runs/ensemble)");
  app.add_option("--split", a.split, "the split scored (default test)");
  app.add_option("--system", a.system, "system file that prices the members (default: the config's, else $WEFT_SYSTEM, else systems/local.toml; none: their FLOPs)");
  app.add_flag("--evaluate", a.evaluate, "do not train: the members are the search's trained trials");
  app.add_flag("--overwrite", a.overwrite, "replace the ensemble that --out holds");
  app.add_option("--set", a.sets, "config override KEY=VALUE (repeatable)");
  app.parse(argc - 1, argv + 1);
  if (!std::filesystem::exists(a.config)) throw_input("config file {} does not exist", a.config);
  set_log_rank(world.rank());
  return run_ensemble(a, world);
}

}  // namespace weft
