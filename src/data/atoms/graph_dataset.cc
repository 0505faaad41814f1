#include "data/atoms/graph_dataset.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace fs = std::filesystem;

namespace weft {
namespace {

nlohmann::json read_manifest(const std::string& dir) {
  const fs::path path = fs::path(dir) / "manifest.json";
  std::ifstream in(path);
  if (!in) {
    throw_input("{}: no graph dataset here (manifest.json is missing; make one with weft prepare --synthetic-lj {} "
                "or --xyz FILE --out {})",
                dir, dir, dir);
  }
  nlohmann::json m;
  try {
    m = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw_input("{}: not valid JSON: {}", path.string(), e.what());
  }
  if (!m.is_object() || m.value("format", "") != "weft-graphs") {
    throw_input("{}: not a weft graph dataset (format is not \"weft-graphs\")", path.string());
  }
  return m;
}

const nlohmann::json& at(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key)) throw_input("{}: key '{}' is missing", where, key);
  return j.at(key);
}
double number(const nlohmann::json& j, const char* key, const std::string& where) {
  const auto& v = at(j, key, where);
  if (!v.is_number()) throw_input("{}: key '{}' must be a number", where, key);
  return v.get<double>();
}
int64_t count(const nlohmann::json& j, const char* key, const std::string& where) {
  const auto& v = at(j, key, where);
  if (!v.is_number_integer() || v.get<int64_t>() < 0) throw_input("{}: key '{}' must be a count", where, key);
  return v.get<int64_t>();
}

GraphSplitStats stats_of(const nlohmann::json& m, const std::string& split, const std::string& where) {
  const auto& sp = at(at(m, "splits", where), split.c_str(), where + ": splits");
  const std::string w = where + ": splits." + split + ".stats";
  const auto& st = at(sp, "stats", where);
  GraphSplitStats s;
  s.structures = count(st, "structures", w);
  s.atoms = count(st, "atoms", w);
  s.edges = count(st, "edges", w);
  if (s.structures > 0) {
    s.max_atoms = count(at(st, "atoms_per_structure", w), "max", w + ".atoms_per_structure");
    s.max_edges = count(at(st, "edges_per_structure", w), "max", w + ".edges_per_structure");
    if (st.contains("energy_per_atom")) {
      s.energy_per_atom_mean = number(st.at("energy_per_atom"), "mean", w + ".energy_per_atom");
      s.energy_per_atom_std = number(st.at("energy_per_atom"), "std", w + ".energy_per_atom");
    }
    if (st.contains("force_rms")) s.force_rms = number(st, "force_rms", w);
  }
  if (st.contains("in_degree_histogram")) {
    for (const auto& v : st.at("in_degree_histogram")) {
      if (!v.is_number_integer()) throw_input("{}: in_degree_histogram holds a non-integer", w);
      s.in_degree_histogram.push_back(v.get<int64_t>());
    }
  }
  return s;
}

}  // namespace

int64_t GraphSplitStats::max_in_degree() const {
  for (size_t d = in_degree_histogram.size(); d > 0; --d) {
    if (in_degree_histogram[d - 1] > 0) return static_cast<int64_t>(d - 1);
  }
  return 0;
}

GraphSplitStats GraphDataset::split_stats(const std::string& dir, const std::string& split) {
  return stats_of(read_manifest(dir), split, (fs::path(dir) / "manifest.json").string());
}

GraphDataset GraphDataset::open(const std::string& dir, const std::string& split) {
  const nlohmann::json m = read_manifest(dir);
  const std::string where = (fs::path(dir) / "manifest.json").string();
  GraphDataset d;
  d.dir = dir;
  const auto& g = at(m, "graph", where);
  d.cutoff = number(g, "cutoff", where + ": graph");
  d.max_neighbours = count(g, "max_neighbours", where + ": graph");
  d.stats = stats_of(m, split, where);
  const auto& files = at(at(at(m, "splits", where), split.c_str(), where), "files", where + ": splits." + split);
  for (const auto& f : files) {
    const std::string name = at(f, "file", where).get<std::string>();
    if (name.find('/') != std::string::npos || name.find("..") != std::string::npos) {
      throw_input("{}: shard name '{}' must be a file in the dataset's folder", where, name);
    }
    std::vector<GraphSample> part = read_graph_shard((fs::path(dir) / name).string());
    const int64_t expect = count(f, "structures", where);
    if (static_cast<int64_t>(part.size()) != expect) {
      throw_input("{}: shard {} holds {} structures, the manifest says {}", where, name, part.size(), expect);
    }
    for (GraphSample& s : part) d.samples.push_back(std::move(s));
  }
  if (static_cast<int64_t>(d.samples.size()) != d.stats.structures) {
    throw_input("{}: split '{}' lists {} structures in its shards, its stats say {}", where, split, d.samples.size(),
                d.stats.structures);
  }
  return d;
}

}  // namespace weft
