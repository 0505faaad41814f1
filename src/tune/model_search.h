// `weft tune CONFIG --space KEY=V1,V2,...`: a search over the run's own keys (the model family's
// settings `model.NAME`, its shape `n_layer`/`n_embd`, the optimizer's `lr`, the `global_batch`,
// ...) for the best validation metric, as HydraGNN's DeepHyper searches (seed 003): each trial
// trains the run with one point of the space on every rank of the world (in-process, to its own
// folder OUT/trial-NNN), then the caller's scorer measures its final checkpoint (a graph run: the
// validation split's energy and force MAE); a Bayesian search (tune/cbo.h: a random-forest
// surrogate, UCB) picks the next point after the first random ones. Every metric is lower-better.
//
// Output (rank 0): OUT/models.json after every trial (the space, the objective, each trial's
// values, metrics, seconds and folder: what `weft ensemble --from OUT` reads) and OUT/best.toml
// (the best trial's whole config). docs/tune.md, "Model search".
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "train/config.h"
#include "train/trainer.h"

namespace weft::tune {

// One key of the space and the values it takes, as the command line gives them.
struct SearchDim {
  std::string key;
  std::vector<std::string> values;
};
// "KEY=V1,V2,..." (at least one value, none empty); InputError naming the text otherwise.
SearchDim parse_search_dim(const std::string& text);

struct ModelSearchOptions {
  std::vector<SearchDim> space;
  int trials = 8;        // trials at most (fewer when the space is smaller)
  int n_initial = 4;     // random points before the surrogate picks
  double kappa = 1.96;   // UCB exploration weight
  uint64_t seed = 0;
  std::string objective; // a metric of the scorer's; "": val_mae when reported, else val_loss
  std::string out = "runs/tune";
  bool overwrite = false;  // the trials' run folders start afresh (weft tune --overwrite)
};

// A trained trial's metrics (name -> value, lower is better); collective over `world`.
using TrialScorer =
    std::function<std::map<std::string, double>(const RunConfig& cfg, const TrainResult& r, Communicator& world)>;

struct ModelTrial {
  int64_t id = 0;  // the point's index in the space (row-major over the keys)
  std::map<std::string, std::string> values;
  std::map<std::string, double> metrics;
  double objective = 0;
  bool failed = false;
  std::string reason;   // why it failed
  double seconds = 0;   // training and scoring wall time
  std::string out;      // its run folder
};

struct ModelSearchResult {
  std::vector<ModelTrial> trials;  // in the order they ran
  int best = -1;                   // index into trials; -1 when none succeeded
  std::string objective;
};

// `base` with the trial's values set as `weft train --KEY VALUE` sets them.
RunConfig trial_run_config(const RunConfig& base, const std::map<std::string, std::string>& values);

// Runs the search on every rank of `world` (collective). InputError for an empty space, a key
// the config does not take (found before any training), trials < 1 or an objective the scorer
// does not report.
ModelSearchResult model_search(const RunConfig& base, const ModelSearchOptions& o, Communicator& world,
                               const TrialScorer& score);

// OUT/models.json read back: the successful trials, best first (lowest objective; ties by run
// order). InputError naming the file for one that is missing or not a search's.
std::vector<ModelTrial> read_model_trials(const std::string& path, std::string* objective = nullptr);

}  // namespace weft::tune
