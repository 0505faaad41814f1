// A prepared graph dataset (`weft prepare --synthetic-lj` / `--xyz`, graph_prepare.h): its
// manifest.json and the structures of one split, read whole into memory (the datasets this
// family trains on locally hold thousands of structures). docs/formats-graphs.md.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/atoms/graph_shard.h"

namespace weft {

// A split's statistics as manifest.json records them (the training split's normalise a model).
struct GraphSplitStats {
  int64_t structures = 0, atoms = 0, edges = 0;
  int64_t max_atoms = 0, max_edges = 0;      // per structure
  double energy_per_atom_mean = 0.0, energy_per_atom_std = 0.0, force_rms = 0.0;
  std::vector<int64_t> in_degree_histogram;  // [d]: receivers with d in-edges
  int64_t max_in_degree() const;
};

struct GraphDataset {
  std::string dir;
  double cutoff = 0.0;           // the graphs' radius (Angstrom)
  int64_t max_neighbours = 0;    // 0: every neighbour within the cutoff
  GraphSplitStats stats;         // of the split read
  std::vector<GraphSample> samples;

  // DIR/manifest.json and split `split` ("train", "val", "test") of it: every shard it lists,
  // checked against the manifest's counts. InputError naming the file and the value.
  static GraphDataset open(const std::string& dir, const std::string& split);
  // Only the manifest's statistics of a split (no shard is read).
  static GraphSplitStats split_stats(const std::string& dir, const std::string& split);
};

}  // namespace weft
