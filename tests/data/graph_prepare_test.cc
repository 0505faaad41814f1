// data/atoms/graph_prepare.h and graph_shard.h: the synthetic LJ set and extended XYZ files
// become shards whose structures, labels and graphs equal the generator's and the radius
// graph's bitwise, split by a seeded draw, with the manifest's counts and statistics; damaged
// shards and bad settings are one line; `weft prepare` runs both modes and refuses mixed ones.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/atoms/extxyz.h"
#include "data/atoms/graph_prepare.h"
#include "data/atoms/graph_shard.h"
#include "test_util.h"

namespace weft {
namespace {

namespace fs = std::filesystem;

std::vector<GraphSample> read_split(const std::string& dir, const nlohmann::json& m, const char* split) {
  std::vector<GraphSample> all;
  for (const auto& f : m["splits"][split]["files"]) {
    std::vector<GraphSample> part = read_graph_shard((fs::path(dir) / f["file"].get<std::string>()).string());
    EXPECT_EQ(static_cast<int64_t>(part.size()), f["structures"].get<int64_t>());
    for (GraphSample& g : part) all.push_back(std::move(g));
  }
  return all;
}

void expect_same(const GraphSample& g, const AtomStructure& s, const RadiusGraphOptions& o) {
  EXPECT_EQ(g.s.species, s.species);
  EXPECT_EQ(g.s.pos, s.pos);
  EXPECT_EQ(g.s.forces, s.forces);
  EXPECT_EQ(g.s.energy, s.energy);
  EXPECT_EQ(g.s.cell.lattice, s.cell.lattice);
  EXPECT_EQ(g.s.cell.pbc, s.cell.pbc);
  const RadiusGraph r = radius_graph(s.pos.data(), s.atoms(), s.cell, o);
  EXPECT_EQ(g.source, r.source);
  EXPECT_EQ(g.receiver, r.receiver);
  EXPECT_EQ(g.shift, r.shift);
}

TEST(GraphPrepare, SyntheticSetRoundTripsThroughShards) {
  test::TempDir tmp("graph_prepare_lj");
  GraphPrepareOptions o;
  o.out_dir = tmp / "lj";
  o.synthetic_lj = true;
  o.lj.structures = 120;
  o.shard_structures = 25;  // several shards per split
  const GraphPrepareResult r = prepare_graphs(o);
  EXPECT_EQ(r.structures[0] + r.structures[1] + r.structures[2], 120);
  EXPECT_GT(r.structures[1], 5);
  EXPECT_GT(r.structures[2], 5);
  const nlohmann::json m = nlohmann::json::parse(test::read_text(r.manifest));
  EXPECT_EQ(m["format"], "weft-graphs");
  EXPECT_EQ(m["graph"]["cutoff"], 5.0);
  // Every structure in the split the draw puts it in, in index order, equal to the generator's.
  std::vector<std::vector<GraphSample>> split = {read_split(o.out_dir, m, "train"), read_split(o.out_dir, m, "val"),
                                                 read_split(o.out_dir, m, "test")};
  size_t at[3] = {0, 0, 0};
  int64_t edges = 0;
  for (int64_t i = 0; i < 120; ++i) {
    const AtomStructure s = lj_structure(o.lj, i);
    bool found = false;
    for (int k = 0; k < 3 && !found; ++k) {
      if (at[k] < split[static_cast<size_t>(k)].size() && split[static_cast<size_t>(k)][at[k]].s.pos == s.pos) {
        expect_same(split[static_cast<size_t>(k)][at[k]], s, o.graph);
        edges += split[static_cast<size_t>(k)][at[k]].edges();
        ++at[k];
        found = true;
      }
    }
    EXPECT_TRUE(found) << "structure " << i;
  }
  EXPECT_EQ(edges, r.edges);
  const auto& st = m["splits"]["train"]["stats"];
  EXPECT_EQ(st["structures"], r.structures[0]);
  double epa = 0.0;
  for (const GraphSample& g : split[0]) epa += g.s.energy / static_cast<double>(g.s.atoms());
  EXPECT_NEAR(st["energy_per_atom"]["mean"].get<double>(), epa / static_cast<double>(split[0].size()), 1e-12);
  // A second run into the same folder is refused; with overwrite it replaces the shards.
  EXPECT_NE(test::input_error_message([&] { prepare_graphs(o); }).find("--overwrite"), std::string::npos);
  o.overwrite = true;
  o.lj.structures = 30;
  o.shard_structures = 1000;
  prepare_graphs(o);
  int wgs = 0;
  for (const auto& e : fs::directory_iterator(o.out_dir)) wgs += e.path().extension() == ".wgs";
  EXPECT_EQ(wgs, 3);
}

TEST(GraphPrepare, ExtendedXyzFilesBecomeShards) {
  test::TempDir tmp("graph_prepare_xyz");
  LjSetOptions lj;
  lj.structures = 12;
  std::vector<AtomStructure> frames;
  for (int64_t i = 0; i < 12; ++i) frames.push_back(lj_structure(lj, i));
  write_extxyz(tmp / "a.xyz", std::vector<AtomStructure>(frames.begin(), frames.begin() + 5));
  write_extxyz(tmp / "b.xyz", std::vector<AtomStructure>(frames.begin() + 5, frames.end()));
  GraphPrepareOptions o;
  o.out_dir = tmp / "out";
  o.xyz_inputs = {tmp / "a.xyz", tmp / "b.xyz"};
  o.graph.cutoff = 4.5;
  o.graph.max_neighbours = 4;
  o.val_fraction = o.test_fraction = 0.0;
  const GraphPrepareResult r = prepare_graphs(o);
  EXPECT_EQ(r.structures[0], 12);
  const nlohmann::json m = nlohmann::json::parse(test::read_text(r.manifest));
  const std::vector<GraphSample> train = read_split(o.out_dir, m, "train");
  ASSERT_EQ(train.size(), 12u);
  for (size_t i = 0; i < 12; ++i) expect_same(train[i], frames[i], o.graph);
  EXPECT_EQ(m["splits"]["train"]["stats"]["in_degree_histogram"].back(), r.atoms);  // every atom has 4
}

TEST(GraphShard, DamageIsOneLineNamingTheFile) {
  test::TempDir tmp("graph_shard_bad");
  LjSetOptions lj;
  lj.structures = 3;
  std::vector<GraphSample> s;
  for (int64_t i = 0; i < 3; ++i) s.push_back(make_graph_sample(lj_structure(lj, i), RadiusGraphOptions{}));
  const std::string p = tmp / "x.wgs";
  write_graph_shard(p, s);
  std::string bytes = test::read_text(p);
  const auto rewrite = [&](const std::string& b) { std::ofstream(p, std::ios::binary | std::ios::trunc) << b; };
  std::string flipped = bytes;
  flipped[200] ^= 1;
  rewrite(flipped);
  EXPECT_NE(test::input_error_message([&] { read_graph_shard(p); }).find("checksum"), std::string::npos);
  rewrite(bytes.substr(0, 40));
  EXPECT_NE(test::input_error_message([&] { read_graph_shard(p); }).find("header"), std::string::npos);
  std::string magic = bytes;
  magic[0] = 'X';
  rewrite(magic);
  EXPECT_NE(test::input_error_message([&] { read_graph_shard(p); }).find("not a weft graph shard"), std::string::npos);
  s[1].s.forces.clear();
  EXPECT_NE(test::input_error_message([&] { write_graph_shard(p, s); }).find("forces"), std::string::npos);
  // An empty shard (empty sections: the fuzzer's first finding) reads back empty.
  write_graph_shard(p, {});
  EXPECT_TRUE(read_graph_shard(p).empty());
}

TEST(GraphPrepare, CommandLine) {
  test::TempDir tmp("graph_prepare_cli");
  const test::RunResult ok = test::run_weft("prepare --synthetic-lj " + (tmp / "h") + " --hydragnn --structures 20", tmp / "c1");
  EXPECT_EQ(ok.code, 0) << ok.err;
  const nlohmann::json m = nlohmann::json::parse(test::read_text(tmp / "h/manifest.json"));
  EXPECT_EQ(m["source"], "synthetic-lj hydragnn");
  EXPECT_EQ(m["graph"]["max_neighbours"], 5);
  const test::RunResult ka = test::run_weft("prepare --synthetic-lj " + (tmp / "k") + " --species 2 --structures 10", tmp / "c3");
  EXPECT_EQ(ka.code, 0) << ka.err;
  const nlohmann::json mk = nlohmann::json::parse(test::read_text(tmp / "k/manifest.json"));
  EXPECT_EQ(mk["lennard_jones"]["mixture"], "kob-andersen");
  EXPECT_EQ(mk["lennard_jones"]["pairs"].size(), 3u);
  EXPECT_EQ(mk["splits"]["train"]["stats"]["species_atoms"].size(), 2u);
  for (const auto& [args, want] : std::vector<std::pair<std::string, std::string>>{
           {"--synthetic-lj " + (tmp / "g") + " --species 3", "species 3"},
           {"--synthetic-lj " + (tmp / "g2") + " --species 2 --hydragnn", "one species"},
           {"--xyz x.xyz --out " + (tmp / "g3") + " --species 2", "--species is an option of --synthetic-lj"},
           {"--synthetic-lj " + (tmp / "a") + " --xyz x.xyz", "give one"},
           {"--xyz x.xyz", "--xyz needs --out"},
           {"--xyz x.xyz --out " + (tmp / "b") + " --hydragnn", "--hydragnn is an option of --synthetic-lj"},
           {"--input README.md --out " + (tmp / "c") + " --cutoff 3", "--cutoff is an option of graph data"},
           {"--synthetic-lj " + (tmp / "d") + " --grid 8x16", "--grid is an option of --synthetic-weather"},
           {"--xyz /nonexistent.xyz --out " + (tmp / "e"), "/nonexistent.xyz"},
           {"--synthetic-lj " + (tmp / "f") + " --val-fraction 0.6 --test-fraction 0.5", "leave a training split"}}) {
    const test::RunResult r = test::run_weft("prepare " + args, tmp / "c2");
    EXPECT_EQ(r.code, 2) << args << ": " << r.err;
    EXPECT_NE(r.err.find(want), std::string::npos) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
  }
}

}  // namespace
}  // namespace weft
