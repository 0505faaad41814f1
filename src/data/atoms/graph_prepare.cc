#include "data/atoms/graph_prepare.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/rng.h"
#include "data/atoms/extxyz.h"
#include "data/atoms/graph_shard.h"
#include "data/text_util.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
constexpr const char* kSplits[3] = {"train", "val", "test"};

void check_options(const GraphPrepareOptions& o) {
  if (o.out_dir.empty()) throw_input("prepare: graph data needs an output folder");
  if (o.synthetic_lj == !o.xyz_inputs.empty()) {
    throw_input("prepare: give --synthetic-lj DIR or --xyz FILE... --out DIR, not {}", o.synthetic_lj ? "both" : "neither");
  }
  const auto fraction = [](double f) { return f >= 0.0 && f < 1.0 && std::isfinite(f); };
  if (!fraction(o.val_fraction) || !fraction(o.test_fraction) || o.val_fraction + o.test_fraction >= 1.0) {
    throw_input("prepare: --val-fraction {} and --test-fraction {} must be in [0, 1) and leave a training split",
                o.val_fraction, o.test_fraction);
  }
  if (o.shard_structures < 1) throw_input("prepare: {} structures per shard", o.shard_structures);
  if (o.synthetic_lj) check_lj_options(o.lj);
  if (o.synthetic_lj && (o.lj.structures < 1 || o.lj.structures > (int64_t{1} << 31))) {
    throw_input("prepare: --structures {} (1 to 2^31)", o.lj.structures);
  }
}

// Which split structure i goes to: a seeded draw, the same whatever else is in the set.
int split_of(uint64_t seed, int64_t i, double val, double test) {
  const double u = Philox::uniform(seed, kRngStreamData + 0x6772, static_cast<uint64_t>(i));  // (0, 1]
  return u <= test ? 2 : u <= test + val ? 1 : 0;
}

struct Stats {
  int64_t structures = 0, atoms = 0, edges = 0, atoms_min = 0, atoms_max = 0, edges_min = 0, edges_max = 0;
  double e_sum = 0.0, e_sq = 0.0, f_sq = 0.0;
  int64_t e_n = 0, f_n = 0;
  std::map<int32_t, int64_t> species;
  std::vector<int64_t> in_degree;  // histogram of the receivers' in-degrees
  void add(const GraphSample& g) {
    const int64_t n = g.s.atoms(), e = g.edges();
    atoms_min = structures ? std::min(atoms_min, n) : n, atoms_max = std::max(atoms_max, n);
    edges_min = structures ? std::min(edges_min, e) : e, edges_max = std::max(edges_max, e);
    ++structures, atoms += n, edges += e;
    if (g.s.has_energy) {
      const double epa = g.s.energy / static_cast<double>(n);
      e_sum += epa, e_sq += epa * epa, ++e_n;
    }
    for (double f : g.s.forces) f_sq += f * f, ++f_n;
    for (int32_t z : g.s.species) ++species[z];
    std::vector<int64_t> deg(static_cast<size_t>(n), 0);
    for (int32_t r : g.receiver) ++deg[static_cast<size_t>(r)];
    for (int64_t d : deg) {
      if (d >= static_cast<int64_t>(in_degree.size())) in_degree.resize(static_cast<size_t>(d + 1), 0);
      ++in_degree[static_cast<size_t>(d)];
    }
  }
  nlohmann::json json() const {
    const double em = e_n ? e_sum / static_cast<double>(e_n) : 0.0;
    const double ev = e_n ? std::max(0.0, e_sq / static_cast<double>(e_n) - em * em) : 0.0;
    nlohmann::json sp = nlohmann::json::object();
    for (const auto& [z, c] : species) sp[std::to_string(z)] = c;
    return {{"structures", structures},
            {"atoms", atoms},
            {"edges", edges},
            {"atoms_per_structure", {{"min", atoms_min}, {"max", atoms_max}, {"mean", structures ? static_cast<double>(atoms) / static_cast<double>(structures) : 0.0}}},
            {"edges_per_structure", {{"min", edges_min}, {"max", edges_max}, {"mean", structures ? static_cast<double>(edges) / static_cast<double>(structures) : 0.0}}},
            {"energy_per_atom", e_n ? nlohmann::json{{"mean", em}, {"std", std::sqrt(ev)}} : nlohmann::json(nullptr)},
            {"force_rms", f_n ? nlohmann::json(std::sqrt(f_sq / static_cast<double>(f_n))) : nlohmann::json(nullptr)},
            {"species_atoms", sp},
            {"in_degree_histogram", in_degree}};
  }
};

void check_out_dir(const GraphPrepareOptions& o) {
  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  if (ec || !fs::is_directory(o.out_dir)) throw_input("prepare: cannot create the output folder {}: {}", o.out_dir, ec.message());
  if (fs::exists(fs::path(o.out_dir) / "manifest.json")) {
    if (!o.overwrite) {
      throw_input("prepare: {} already holds a graph dataset (manifest.json); give --overwrite to replace it", o.out_dir);
    }
    // The earlier run's shards go (a smaller set would leave some behind); nothing else is touched.
    for (const auto& e : fs::directory_iterator(o.out_dir)) {
      const std::string n = e.path().filename().string();
      for (const char* split : kSplits) {
        if (n.rfind(std::string(split) + "_", 0) == 0 && e.path().extension() == ".wgs") fs::remove(e.path());
      }
    }
  }
}

}  // namespace

GraphPrepareResult prepare_graphs(const GraphPrepareOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  check_options(o);
  // Every input is read (and checked) and the splits are known before anything is written: an
  // XYZ error leaves the folder as it was. Then the structures stream through, a shard of
  // each split at a time in memory.
  int64_t total = o.synthetic_lj ? o.lj.structures : 0;
  for (const std::string& f : o.xyz_inputs) total += static_cast<int64_t>(read_extxyz(f).size());
  int64_t train = 0;
  for (int64_t i = 0; i < total; ++i) train += split_of(o.seed, i, o.val_fraction, o.test_fraction) == 0;
  if (train == 0) throw_input("prepare: none of the {} structures would go to the training split", total);
  check_out_dir(o);
  GraphPrepareResult r;
  Stats stats[3];
  std::vector<GraphSample> pending[3];
  int part[3] = {0, 0, 0};
  std::vector<nlohmann::json> files[3];
  const auto flush = [&](int k) {
    if (pending[k].empty()) return;
    const std::string name = fmt::format("{}_{:04d}.wgs", kSplits[k], part[k]++);
    const std::string path = (fs::path(o.out_dir) / name).string();
    write_graph_shard(path, pending[k]);
    r.files.push_back(path);
    files[k].push_back({{"file", name}, {"structures", pending[k].size()}});
    pending[k].clear();
  };
  int64_t i = 0;
  const auto take = [&](AtomStructure s) {
    const int k = split_of(o.seed, i++, o.val_fraction, o.test_fraction);
    GraphSample g = make_graph_sample(std::move(s), o.graph);
    stats[k].add(g);
    r.atoms += g.s.atoms(), r.edges += g.edges();
    ++r.structures[k];
    pending[k].push_back(std::move(g));
    if (static_cast<int64_t>(pending[k].size()) >= o.shard_structures) flush(k);
  };
  if (o.synthetic_lj) {
    for (int64_t j = 0; j < o.lj.structures; ++j) take(lj_structure(o.lj, j));
  }
  for (const std::string& f : o.xyz_inputs) {
    for (AtomStructure& s : read_extxyz(f)) take(std::move(s));
  }
  for (int k = 0; k < 3; ++k) flush(k);
  nlohmann::json m = {{"format", "weft-graphs"},
                      {"version", 1},
                      {"source", o.synthetic_lj ? (o.lj.hydragnn ? "synthetic-lj hydragnn" : "synthetic-lj") : "xyz"},
                      {"graph", {{"cutoff", o.graph.cutoff}, {"max_neighbours", o.graph.max_neighbours}}},
                      {"seed", o.seed},
                      {"val_fraction", o.val_fraction},
                      {"test_fraction", o.test_fraction}};
  if (o.synthetic_lj) {
    const LennardJones lj = lj_potential(o.lj);
    m["lennard_jones"] = {{"epsilon", lj.epsilon}, {"sigma", lj.sigma}, {"cutoff", lj.cutoff},
                          {"shifted_force", lj.shifted_force}, {"structures", o.lj.structures}, {"seed", o.lj.seed},
                          {"species", o.lj.species}};
    if (o.lj.species == 2) {
      const LjMixture mix = kob_andersen_mixture(lj);
      nlohmann::json pairs = nlohmann::json::array();
      for (size_t a = 0; a < mix.species.size(); ++a) {
        for (size_t b = a; b < mix.species.size(); ++b) {
          const LennardJones& p = mix.pairs[a * mix.species.size() + b];
          pairs.push_back({{"species", {mix.species[a], mix.species[b]}}, {"epsilon", p.epsilon}, {"sigma", p.sigma},
                           {"cutoff", p.cutoff}});
        }
      }
      m["lennard_jones"]["mixture"] = "kob-andersen";
      m["lennard_jones"]["pairs"] = pairs;
    }
  } else {
    m["inputs"] = o.xyz_inputs;
  }
  for (int k = 0; k < 3; ++k) m["splits"][kSplits[k]] = {{"files", files[k]}, {"stats", stats[k].json()}};
  r.manifest = (fs::path(o.out_dir) / "manifest.json").string();
  write_file_atomic(r.manifest, m.dump(2) + "\n");
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace weft
