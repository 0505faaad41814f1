// `weft prepare --synthetic-lj DIR` and `weft prepare --xyz FILE... --out DIR` (issue 33): labelled
// atomic structures -> graph shards (graph_shard.h) in train/val/test splits + manifest.json with
// the graph settings, the counts, the species, and the training split's normalisation
// statistics (energy per atom mean and std, force component RMS, atoms and edges per structure,
// the receivers' in-degree histogram that PNA's scalers need). docs/formats-graphs.md.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/atoms/lennard_jones.h"
#include "data/atoms/radius_graph.h"

namespace weft {

struct GraphPrepareOptions {
  std::string out_dir;                   // created if missing
  std::vector<std::string> xyz_inputs;   // extended XYZ files, or empty with synthetic_lj
  bool synthetic_lj = false;
  LjSetOptions lj;                       // the LJ set (synthetic_lj)
  RadiusGraphOptions graph;              // the model's graph
  double val_fraction = 0.15, test_fraction = 0.15;  // HydraGNN's LJ example: 70/15/15
  uint64_t seed = 1337;                  // the split
  int64_t shard_structures = 10000;      // structures per shard file
  bool overwrite = false;                // replace an earlier preparation in out_dir
};

struct GraphPrepareResult {
  int64_t structures[3] = {0, 0, 0};  // train, val, test
  int64_t atoms = 0, edges = 0;
  std::vector<std::string> files;     // shards written
  std::string manifest;
  double seconds = 0.0;
};

GraphPrepareResult prepare_graphs(const GraphPrepareOptions& o);

}  // namespace weft
