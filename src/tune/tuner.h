// `weft tune`: planner-guided Bayesian trials on the real machine (DeepHyper's CBO, as the
// Frontier team searched their layouts; docs/tune.md), with a SHAP sensitivity analysis of
// the knobs.
//
// The space is every valid layout of the run on the world's ranks (tune/space.h). The
// planner, when a system file is given, prices each one: its top picks are evaluated first
// (the first is "the planner's pick", measured in the same run as everything else) and its
// predicted step time is a feature of the surrogate. Then each round proposes `batch` layouts
// by UCB over a random-forest surrogate with constant liar (tune/cbo.h), runs them in-process
// (tune/trial.h) and feeds the measured tokens/s back. Every rank runs the same search on the
// same (all-reduced) measurements, so every rank proposes the same layouts without messages.
//
// Outputs in `out` (rank 0; docs/tune.md):
//   tune.csv     one row per trial (DeepHyper's results.csv convention: p:<knob> columns,
//                objective, job_id, m:<metadata>: step, predicted step, peak memory,
//                timestamps, how the point was chosen, the failure's reason)
//   best.toml    the best layout as config keys ready to paste
//   shap.json    Shapley values of every knob for every successful trial and their mean |phi|
//                ranking; shap.png (bar chart) and shap_beeswarm.png (one dot per trial)
//   summary.json the best trial, the planner's pick, the planner's error on the trials (and
//                after --recalibrate, with the corrected system written to that file)
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "train/config.h"
#include "train/run_layout.h"
#include "tune/recalibrate.h"
#include "tune/shapley.h"
#include "tune/space.h"
#include "tune/trial.h"

namespace weft::tune {

struct TuneOptions {
  int trials = 20;            // at most this many trials
  double budget_s = 0;        // stop proposing once this much wall time has passed (0: none)
  TrialSettings trial;        // warm-up and timed steps per trial
  uint64_t seed = 0;          // the search's draws: a fixed seed gives the same trials
  std::string out = "runs/tune";
  int planner_seeds = 3;      // the planner's top predictions evaluated first (with a system)
  int n_initial = 5;          // evaluated points (seeds included) before the surrogate picks
  int batch = 1;              // points proposed per round (constant liar)
  double kappa = 1.96;        // UCB exploration weight
  std::string system;         // system file for the planner ("": plan::implicit_system_path())
  std::string recalibrate;    // write the system corrected by the trials here (tune/recalibrate.h)
  // A tune.csv of earlier trials (e.g. an exhaustive sweep) to look the trials up in instead
  // of running them: replays a search in milliseconds (bench/tune_study.sh compares searches
  // that way). A layout it lacks is a failed trial.
  std::string oracle;
  // Continue the tune that `out` holds: the trials its tune.csv records (written after every
  // trial) are taken from it when the search proposes them again instead of being run, and
  // the search goes on from there (the same config, seed and ranks propose the same trials).
  bool resume = false;
  // Let the search try the layouts that change the numbers the model trains on: ZeRO++ and
  // lossy compressed collectives (tune/space.h).
  bool allow_lossy = false;
  // After the search: the `confirm` fastest successful trials and the planner's pick are run
  // twice more each, round by round (the second round in reverse order), and each one's step
  // becomes the median of its three measurements; the best is then the fastest of them. On a
  // shared machine a trial of a few steps varies by tens of percent with the same work, so the
  // fastest of many single trials is partly the luckiest one. 0: off. Not with --oracle.
  int confirm = 0;
};

struct TrialRecord {
  int index = 0;                // 0-based, in the order run
  size_t layout = 0;            // position in the space
  std::string source;           // "planner", "random" or "surrogate"
  TrialResult result;
  double predicted_s = 0;       // the planner's step time (0: no system)
  double submitted_s = 0, gathered_s = 0;  // since the search started
  int runs = 1;                 // trials behind result.step_s (--confirm: their median)
};

struct TuneResult {
  LayoutSpace space;
  std::vector<TrialRecord> trials;
  int best = -1;           // index into trials of the fastest successful trial (-1: none; --confirm: of the confirmed)
  int planner_pick = -1;   // index into trials of the planner's first choice (-1: no system)
  std::string system_path; // the system file used ("" none)
  // SHAP over the knobs (empty when fewer than 2 trials succeeded).
  ShapleyValues shap;
  std::vector<int> shap_trials;  // the trial each row of shap.phi explains
  std::vector<FeatureImportance> ranking;
  std::optional<Recalibration> recalibration;  // with TuneOptions::recalibrate
};

// Runs the search on the ranks of `world` (collective) for the run `cfg` (its model, data,
// batch, precision; its layout keys are what is searched) and writes the outputs (rank 0).
// InputError for bad options (naming them), a missing corpus, a bad system file.
TuneResult tune(const RunConfig& cfg, const TuneOptions& opt, Communicator& world);

// The config keys of a layout, ready to paste: layout_toml (train/run_layout.h).

}  // namespace weft::tune
