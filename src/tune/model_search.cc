#include "tune/model_search.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"
#include "tune/cbo.h"

namespace weft::tune {
namespace {

constexpr int64_t kMaxPoints = 100000;

std::vector<std::string> split_values(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t comma = s.find(',', start);
    out.push_back(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

std::optional<double> number_of(const std::string& s) {
  try {
    size_t used = 0;
    const double v = std::stod(s, &used);
    if (used == s.size() && std::isfinite(v)) return v;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

// A dimension's values as the surrogate sees them: numbers (log10 when all are positive: sizes
// and learning rates act multiplicatively), else their index (a categorical code).
std::vector<double> encode_dim(const SearchDim& d) {
  std::vector<double> nums;
  for (const std::string& v : d.values) {
    const std::optional<double> x = number_of(v);
    if (!x) {
      nums.clear();
      for (size_t i = 0; i < d.values.size(); ++i) nums.push_back(static_cast<double>(i));
      return nums;
    }
    nums.push_back(*x);
  }
  if (std::all_of(nums.begin(), nums.end(), [](double x) { return x > 0; })) {
    for (double& x : nums) x = std::log10(x);
  }
  return nums;
}

int64_t space_size(const std::vector<SearchDim>& space) {
  int64_t n = 1;
  for (const SearchDim& d : space) {
    n *= static_cast<int64_t>(d.values.size());
    if (n > kMaxPoints) {
      throw_input("--space: {} keys of {} values make more than {} points; give fewer values", space.size(),
                  d.values.size(), kMaxPoints);
    }
  }
  return n;
}

// Point `id` (row-major over the keys, the last fastest): its value index per key.
std::vector<size_t> point_of(const std::vector<SearchDim>& space, int64_t id) {
  std::vector<size_t> idx(space.size());
  for (size_t k = space.size(); k-- > 0;) {
    const int64_t n = static_cast<int64_t>(space[k].values.size());
    idx[k] = static_cast<size_t>(id % n);
    id /= n;
  }
  return idx;
}

std::map<std::string, std::string> values_of(const std::vector<SearchDim>& space, int64_t id) {
  std::map<std::string, std::string> v;
  const std::vector<size_t> idx = point_of(space, id);
  for (size_t k = 0; k < space.size(); ++k) v[space[k].key] = space[k].values[idx[k]];
  return v;
}

nlohmann::ordered_json trial_json(const ModelTrial& t) {
  nlohmann::ordered_json j = {{"id", t.id}, {"values", t.values}, {"out", t.out}, {"seconds", t.seconds}};
  if (t.failed) {
    j["failed"] = t.reason;
  } else {
    j["objective"] = t.objective;
    j["metrics"] = t.metrics;
  }
  return j;
}

void write_trials(const ModelSearchOptions& o, const ModelSearchResult& r) {
  nlohmann::ordered_json space = nlohmann::ordered_json::object();
  for (const SearchDim& d : o.space) space[d.key] = d.values;
  nlohmann::ordered_json trials = nlohmann::ordered_json::array();
  for (const ModelTrial& t : r.trials) trials.push_back(trial_json(t));
  const nlohmann::ordered_json j = {{"kind", "weft model search"}, {"objective", r.objective}, {"space", space},
                                    {"best", r.best >= 0 ? nlohmann::ordered_json(r.trials[static_cast<size_t>(r.best)].id)
                                                         : nlohmann::ordered_json()},
                                    {"trials", trials}};
  const std::string path = o.out + "/models.json", tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    if (!(f << j.dump(2) << "\n")) throw_input("{}: cannot write", tmp);
  }
  std::filesystem::rename(tmp, path);
}

// Trains and scores one point on every rank; a failure (a config the engine refuses, a model
// that does not fit) is agreed over the ranks and recorded, and the search goes on.
ModelTrial run_point(const RunConfig& base, const ModelSearchOptions& o, int64_t id, Communicator& world,
                     const TrialScorer& score) {
  ModelTrial t;
  t.id = id;
  t.values = values_of(o.space, id);
  t.out = fmt::format("{}/trial-{:03d}", o.out, id);
  const auto t0 = std::chrono::steady_clock::now();
  int failed = 0;
  try {
    RunConfig cfg = trial_run_config(base, t.values);
    cfg.out = t.out;
    TrainOptions opt;
    opt.overwrite = o.overwrite;
    const TrainResult r = train(cfg, opt, world);
    t.metrics = score(cfg, r, world);
  } catch (const std::exception& e) {
    failed = 1;
    t.reason = e.what();
  }
  world.all_reduce(&failed, 1, CommDType::kI32, ReduceOp::kMax);
  t.failed = failed != 0;
  if (t.failed && t.reason.empty()) t.reason = "failed on another rank";
  t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return t;
}

}  // namespace

SearchDim parse_search_dim(const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size()) {
    throw_input("--space {}: expected KEY=V1,V2,... (e.g. --space model.layer=schnet,egnn --space lr=1e-3,3e-3)", text);
  }
  SearchDim d;
  d.key = text.substr(0, eq);
  std::replace(d.key.begin(), d.key.end(), '-', '_');
  d.values = split_values(text.substr(eq + 1));
  for (const std::string& v : d.values) {
    if (v.empty()) throw_input("--space {}: an empty value", text);
  }
  return d;
}

RunConfig trial_run_config(const RunConfig& base, const std::map<std::string, std::string>& values) {
  RunConfig cfg = base;
  for (const auto& [key, value] : values) set_run_config_key(cfg, key, value);
  return cfg;
}

ModelSearchResult model_search(const RunConfig& base, const ModelSearchOptions& o, Communicator& world,
                               const TrialScorer& score) {
  if (o.space.empty()) throw_input("--space: give at least one KEY=V1,V2,...");
  if (o.trials < 1) throw_input("--trials must be >= 1, got {}", o.trials);
  const int64_t n = space_size(o.space);
  // Every value of every key is set on the config once before anything trains: a key the run
  // does not take, or a value it refuses, fails now, naming it.
  for (const SearchDim& d : o.space) {
    for (const std::string& v : d.values) {
      RunConfig c = trial_run_config(base, {{d.key, v}});
      (void)c.model_config();
      c.validate();
    }
  }
  std::vector<std::vector<double>> codes;
  for (const SearchDim& d : o.space) codes.push_back(encode_dim(d));
  std::vector<Candidate> candidates;
  for (int64_t id = 0; id < n; ++id) {
    Candidate c{id, {}};
    const std::vector<size_t> idx = point_of(o.space, id);
    for (size_t k = 0; k < idx.size(); ++k) c.x.push_back(codes[k][idx[k]]);
    candidates.push_back(std::move(c));
  }
  CboOptions co;
  co.kappa = o.kappa;
  co.n_initial = std::max(1, o.n_initial);
  co.seed = o.seed;
  Cbo cbo(std::move(candidates), co);
  ModelSearchResult r;
  r.objective = o.objective;
  if (world.rank() == 0) std::filesystem::create_directories(o.out);
  for (int i = 0; i < o.trials; ++i) {
    const std::vector<int64_t> next = cbo.propose(1);
    if (next.empty()) break;  // the space is exhausted
    ModelTrial t = run_point(base, o, next[0], world, score);
    if (!t.failed) {
      if (r.objective.empty()) r.objective = t.metrics.count("val_mae") ? "val_mae" : "val_loss";
      const auto it = t.metrics.find(r.objective);
      if (it == t.metrics.end() || !std::isfinite(it->second)) {
        std::string known;
        for (const auto& [k, v] : t.metrics) known += (known.empty() ? "" : ", ") + k;
        throw_input("--objective {}: the trials report {} (validation runs: [eval] val_every > 0)", r.objective,
                    known.empty() ? "nothing" : known);
      }
      t.objective = it->second;
      cbo.observe(t.id, -t.objective);  // the search maximises
    } else {
      cbo.observe_failure(t.id);
    }
    r.trials.push_back(std::move(t));
    const ModelTrial& last = r.trials.back();
    if (!last.failed && (r.best < 0 || last.objective < r.trials[static_cast<size_t>(r.best)].objective)) {
      r.best = static_cast<int>(r.trials.size()) - 1;
    }
    if (world.rank() == 0) {
      std::string vals;
      for (const auto& [k, v] : last.values) vals += fmt::format(" {}={}", k, v);
      if (last.failed) {
        log_info("model search: trial {} of {} ({}) failed: {}", i + 1, o.trials, vals, last.reason);
      } else {
        log_info("model search: trial {} of {} ({}): {} {:.6g} in {:.1f} s", i + 1, o.trials, vals, r.objective,
                 last.objective, last.seconds);
      }
      write_trials(o, r);
    }
  }
  if (world.rank() == 0 && r.best >= 0) {
    const ModelTrial& b = r.trials[static_cast<size_t>(r.best)];
    std::ofstream f(o.out + "/best.toml");
    if (!(f << trial_run_config(base, b.values).to_toml())) throw_input("{}/best.toml: cannot write", o.out);
  }
  return r;
}

std::vector<ModelTrial> read_model_trials(const std::string& path, std::string* objective) {
  std::ifstream in(path);
  if (!in) throw_input("{}: no model search here (weft tune CONFIG --space ... --out DIR writes DIR/models.json)", path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
    if (j.at("kind") != "weft model search") throw std::runtime_error("not a model search");
    std::vector<ModelTrial> out;
    for (const auto& t : j.at("trials")) {
      if (t.contains("failed")) continue;
      ModelTrial m;
      m.id = t.at("id").get<int64_t>();
      m.values = t.at("values").get<std::map<std::string, std::string>>();
      m.metrics = t.at("metrics").get<std::map<std::string, double>>();
      m.objective = t.at("objective").get<double>();
      m.seconds = t.at("seconds").get<double>();
      m.out = t.at("out").get<std::string>();
      out.push_back(std::move(m));
    }
    std::stable_sort(out.begin(), out.end(), [](const ModelTrial& a, const ModelTrial& b) { return a.objective < b.objective; });
    if (objective) *objective = j.at("objective").get<std::string>();
    return out;
  } catch (const std::exception& e) {
    throw_input("{}: not a weft model search ({})", path, e.what());
  }
}

}  // namespace weft::tune
