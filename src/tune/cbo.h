// The tuner's Bayesian search: DeepHyper's CBO (centralized Bayesian optimisation, the 2023
// flavour of deephyper/search/hps/_cbo.py that Dash et al. (ISC 2024) used; research brief
// comm-vit-tuner.md, section 3.2) over a finite set of candidate configurations supplied by
// the caller.
//
//  - The caller samples valid configurations (layouts that divide, fit, ...) and hands them
//    over as candidates: an id of its choosing and the encoded knobs. The search never
//    proposes anything else, so it never proposes an invalid layout. (DeepHyper samples
//    n_points = 10,000 configurations per ask and maximises over them; here the set is fixed
//    for the whole search, and evaluated and pending ids are removed from it, like
//    DeepHyper's filter_duplicated.)
//  - The objective is maximised (weft: measured throughput).
//  - First: the seed ids (DeepHyper's initial_points), in the order given (the planner's top
//    picks; one observed before it was proposed is skipped), then uniformly random
//    candidates until n_initial configurations are observed or pending. A seed id counts
//    towards n_initial.
//  - Then each point is the argmax over the remaining candidates of the upper confidence bound
//    UCB(x) = mean(x) + kappa * sqrt(variance(x)) of a random-forest surrogate (tune/forest.h)
//    fitted to the observations (kappa = 1.96: DeepHyper's default). Ties go to the earlier
//    candidate. The objective is not rescaled (DeepHyper's objective_scaler): with
//    min_variance 0, a tree's splits, and hence the argmax of UCB, are unchanged by a positive
//    affine map of the objective.
//  - Several points per round by constant liar: every pending point (proposed, not yet
//    observed: those of this batch and of earlier unanswered batches) enters the fit with a
//    lie, one value for all of them: the mean, the worst (min) or the best (max) observed
//    objective. After each pick the forest is refitted with that point added at the lie, so
//    the next pick sees it as measured (its variance collapses there). DeepHyper's
//    "cl_max" (its 2023 default, skopt's "cl_min" on the negated objective) is LieKind::kMax
//    here; kMean is the default, a middle ground between that optimistic lie (the next pick
//    stays near the last) and the pessimistic kMin (it moves away).
//  - Failed trials (out of memory, a crash, a layout the engine refused): the caller records
//    them with observe_failure. A failure is never proposed again, and it enters every fit
//    with the worst successful objective observed so far (DeepHyper's filter_failures="min";
//    its default "mean" would tell the surrogate that an out-of-memory region is average,
//    which in weft it is not: such regions are the worst). Failures are left out of the fit
//    while nothing has succeeded, and until something succeeds points are chosen at random.
//  - Determinism: the random initial points are Philox draws of (seed, kTuneStreamInitial,
//    counter) and the surrogate fitted on r rows uses forest seed mix_seed(seed, r)
//    (tune/draws.h), so a fixed seed and the same sequence of calls give the same proposals;
//    on any machine, as forest.cc and cbo.cc build without FMA contraction (CMakeLists.txt).
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "tune/draws.h"
#include "tune/forest.h"

namespace weft::tune {

// One configuration the search may propose.
struct Candidate {
  int64_t id = 0;         // the caller's name for it; unique within a search
  std::vector<double> x;  // its knobs, encoded as numbers (categoricals as codes)
};

enum class LieKind {
  kMean,  // the mean observed objective (DeepHyper's cl_mean)
  kMin,   // the worst observed objective (cl_min)
  kMax,   // the best observed objective (cl_max)
};

struct CboOptions {
  double kappa = 1.96;       // UCB exploration weight, >= 0
  int n_initial = 10;        // random (or seed) points before the surrogate is used, >= 1
  LieKind lie = LieKind::kMean;
  ForestOptions forest;      // the surrogate's options; its seed is replaced per fit (above)
  uint64_t seed = 0;
};

// UCB of a prediction: mean + kappa * sqrt(variance).
double upper_confidence_bound(const Prediction& p, double kappa);

// One evaluated configuration.
struct Observation {
  int64_t id = 0;
  double objective = 0;  // meaningless when failed
  bool failed = false;
};

// The rows a surrogate is fitted on, in the order of observation.
struct TrainingSet {
  std::vector<int64_t> ids;
  std::vector<std::vector<double>> x;
  std::vector<double> y;
};

class Cbo {
 public:
  // InputError for no candidates, a repeated id, rows of different lengths or with a
  // non-finite feature, a seed id that is
  // not a candidate or is repeated, or options out of range (each message names the values).
  Cbo(std::vector<Candidate> candidates, const CboOptions& opt, std::vector<int64_t> seed_ids = {});

  // Up to q (>= 1) ids to evaluate next, all distinct and neither observed nor pending; they
  // are pending until observed. Fewer than q when the candidates run out (none left: empty).
  std::vector<int64_t> propose(int q);

  // Records the measured objective (finite) of a candidate, pending or not (a candidate never
  // proposed, e.g. measured by an earlier run, is accepted). InputError for an unknown id,
  // an id observed before, or a non-finite objective (record that as a failure).
  void observe(int64_t id, double objective);
  // Records that evaluating the candidate failed (see above). Same checks as observe.
  void observe_failure(int64_t id);

  // The observations, with failures given the worst successful objective (left out while
  // there is none). What the surrogate is fitted on, before lies.
  TrainingSet training_set() const;
  // The surrogate fitted on training_set() (for the sensitivity analysis). InputError when
  // it is empty.
  Forest fit_surrogate() const;

  // The best successful observation (the earliest among equals); none before a success.
  std::optional<Observation> best() const;
  const std::vector<Observation>& observations() const { return observations_; }
  int n_pending() const { return static_cast<int>(pending_.size()); }
  const Candidate& candidate(int64_t id) const;

 private:
  enum class State { kFree, kPending, kObserved };

  size_t index_of(int64_t id) const;
  void record(int64_t id, double objective, bool failed);
  bool any_success() const;
  double lie_value() const;
  Forest fit_forest(const TrainingSet& t) const;  // forest seed mix_seed(seed, rows)
  std::optional<size_t> next_seed_point();
  std::optional<size_t> random_free_point();
  std::optional<size_t> best_ucb_point();

  std::vector<Candidate> candidates_;
  std::map<int64_t, size_t> index_;  // id -> position in candidates_
  std::vector<State> state_;
  int n_free_ = 0;
  CboOptions opt_;
  std::vector<int64_t> seed_ids_;
  size_t next_seed_ = 0;
  Draws initial_draws_;
  std::vector<Observation> observations_;
  std::vector<size_t> pending_;  // in the order proposed
};

}  // namespace weft::tune
