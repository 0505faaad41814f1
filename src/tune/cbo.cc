#include "tune/cbo.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace weft::tune {
namespace {

void check_options(const CboOptions& opt) {
  if (!(opt.kappa >= 0 && std::isfinite(opt.kappa))) throw_input("cbo: kappa = {} must be finite and >= 0", opt.kappa);
  if (opt.n_initial < 1) throw_input("cbo: n_initial = {} must be at least 1", opt.n_initial);
}

void check_candidates(const std::vector<Candidate>& candidates) {
  if (candidates.empty()) throw_input("cbo: no candidate configurations");
  const size_t d = candidates[0].x.size();
  if (d == 0) throw_input("cbo: candidate {} has no features", candidates[0].id);
  for (const Candidate& c : candidates) {
    if (c.x.size() != d)
      throw_input("cbo: candidate {} has {} features, candidate {} has {}", c.id, c.x.size(), candidates[0].id, d);
    for (size_t j = 0; j < d; ++j) {
      if (!std::isfinite(c.x[j])) throw_input("cbo: candidate {} feature {} is {}", c.id, j, c.x[j]);
    }
  }
}

}  // namespace

double upper_confidence_bound(const Prediction& p, double kappa) { return p.mean + kappa * std::sqrt(p.variance); }

Cbo::Cbo(std::vector<Candidate> candidates, const CboOptions& opt, std::vector<int64_t> seed_ids)
    : candidates_(std::move(candidates)),
      opt_(opt),
      seed_ids_(std::move(seed_ids)),
      initial_draws_(opt.seed, kTuneStreamInitial) {
  check_options(opt_);
  check_candidates(candidates_);
  for (size_t i = 0; i < candidates_.size(); ++i) {
    if (!index_.emplace(candidates_[i].id, i).second)
      throw_input("cbo: candidate id {} appears twice (positions {} and {})", candidates_[i].id,
                  index_.at(candidates_[i].id), i);
  }
  state_.assign(candidates_.size(), State::kFree);
  n_free_ = static_cast<int>(candidates_.size());
  for (size_t i = 0; i < seed_ids_.size(); ++i) {
    if (!index_.contains(seed_ids_[i])) throw_input("cbo: seed id {} is not a candidate", seed_ids_[i]);
    if (std::find(seed_ids_.begin(), seed_ids_.begin() + static_cast<std::ptrdiff_t>(i), seed_ids_[i]) !=
        seed_ids_.begin() + static_cast<std::ptrdiff_t>(i))
      throw_input("cbo: seed id {} is given twice", seed_ids_[i]);
  }
}

size_t Cbo::index_of(int64_t id) const {
  const auto it = index_.find(id);
  if (it == index_.end()) throw_input("cbo: id {} is not one of the {} candidates", id, candidates_.size());
  return it->second;
}

const Candidate& Cbo::candidate(int64_t id) const { return candidates_[index_of(id)]; }

std::vector<int64_t> Cbo::propose(int q) {
  if (q < 1) throw_input("cbo: asked for {} points; ask for at least 1", q);
  std::vector<int64_t> out;
  for (int k = 0; k < q; ++k) {
    std::optional<size_t> pick = next_seed_point();
    const bool initial = observations_.size() + pending_.size() < static_cast<size_t>(opt_.n_initial);
    if (!pick) pick = (initial || !any_success()) ? random_free_point() : best_ucb_point();
    if (!pick) break;  // every candidate is observed or pending
    state_[*pick] = State::kPending;
    --n_free_;
    pending_.push_back(*pick);
    out.push_back(candidates_[*pick].id);
  }
  return out;
}

void Cbo::observe(int64_t id, double objective) {
  if (!std::isfinite(objective))
    throw_input("cbo: objective {} for id {} is not finite; record a failed trial with observe_failure", objective, id);
  record(id, objective, false);
}

void Cbo::observe_failure(int64_t id) { record(id, 0, true); }

void Cbo::record(int64_t id, double objective, bool failed) {
  const size_t i = index_of(id);
  if (state_[i] == State::kObserved) throw_input("cbo: id {} is observed twice", id);
  if (state_[i] == State::kPending) {
    pending_.erase(std::find(pending_.begin(), pending_.end(), i));
  } else {
    --n_free_;
  }
  state_[i] = State::kObserved;
  observations_.push_back({id, objective, failed});
}

bool Cbo::any_success() const {
  return std::any_of(observations_.begin(), observations_.end(), [](const Observation& o) { return !o.failed; });
}

std::optional<Observation> Cbo::best() const {
  std::optional<Observation> best;
  for (const Observation& o : observations_) {
    if (!o.failed && (!best || o.objective > best->objective)) best = o;
  }
  return best;
}

TrainingSet Cbo::training_set() const {
  std::optional<double> worst;
  for (const Observation& o : observations_) {
    if (!o.failed) worst = worst ? std::min(*worst, o.objective) : o.objective;
  }
  TrainingSet t;
  for (const Observation& o : observations_) {
    if (o.failed && !worst) continue;
    t.ids.push_back(o.id);
    t.x.push_back(candidates_[index_.at(o.id)].x);
    t.y.push_back(o.failed ? *worst : o.objective);
  }
  return t;
}

Forest Cbo::fit_surrogate() const {
  const TrainingSet t = training_set();
  if (t.y.empty()) throw_input("cbo: no successful observation to fit a surrogate to ({} failed)", observations_.size());
  return fit_forest(t);
}

Forest Cbo::fit_forest(const TrainingSet& t) const {
  ForestOptions fo = opt_.forest;
  fo.seed = mix_seed(opt_.seed, t.y.size());
  return Forest::fit(t.x, t.y, fo);
}

// One value for every pending point, from the successful observations (there is one: the
// caller checked).
double Cbo::lie_value() const {
  double sum = 0, lo = 0, hi = 0;
  int n = 0;
  for (const Observation& o : observations_) {
    if (o.failed) continue;
    sum += o.objective;
    lo = n == 0 ? o.objective : std::min(lo, o.objective);
    hi = n == 0 ? o.objective : std::max(hi, o.objective);
    ++n;
  }
  switch (opt_.lie) {
    case LieKind::kMean: return sum / n;
    case LieKind::kMin: return lo;
    case LieKind::kMax: return hi;
  }
  throw_runtime("cbo: unknown LieKind {}", static_cast<int>(opt_.lie));
}

std::optional<size_t> Cbo::next_seed_point() {
  while (next_seed_ < seed_ids_.size()) {
    const size_t i = index_.at(seed_ids_[next_seed_++]);
    if (state_[i] == State::kFree) return i;  // a seed observed before it was proposed is skipped
  }
  return std::nullopt;
}

// A uniformly random free candidate: the r-th free one in candidate order.
std::optional<size_t> Cbo::random_free_point() {
  if (n_free_ == 0) return std::nullopt;
  uint64_t r = initial_draws_.below(static_cast<uint64_t>(n_free_));
  for (size_t i = 0; i < candidates_.size(); ++i) {
    if (state_[i] == State::kFree && r-- == 0) return i;
  }
  throw_runtime("cbo: internal error: {} free candidates counted but none found", n_free_);
}

// The free candidate of largest UCB under the surrogate fitted to the observations and the
// pending points' lie.
std::optional<size_t> Cbo::best_ucb_point() {
  if (n_free_ == 0) return std::nullopt;
  TrainingSet t = training_set();
  const double lie = lie_value();
  for (size_t i : pending_) {
    t.x.push_back(candidates_[i].x);
    t.y.push_back(lie);
  }
  const Forest surrogate = fit_forest(t);
  std::optional<size_t> best;
  double best_ucb = 0;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    if (state_[i] != State::kFree) continue;
    const double u = upper_confidence_bound(surrogate.predict(candidates_[i].x), opt_.kappa);
    if (!best || u > best_ucb) {
      best = i;
      best_ucb = u;
    }
  }
  return best;
}

}  // namespace weft::tune
