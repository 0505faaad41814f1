// One atomic structure with its labels: what the graph-network family's data holds per sample
// (issue 33), from a generator (lennard_jones.h) or a file (extxyz.h).
#pragma once
#include <cstdint>
#include <vector>

#include "data/atoms/radius_graph.h"

namespace weft {

struct AtomStructure {
  std::vector<double> pos;        // n x 3, Angstrom
  std::vector<int32_t> species;   // n: atomic numbers (HydraGNN's LJ example: type 1)
  AtomCell cell;
  double energy = 0.0;            // the structure's energy (eV, or eps for LJ)
  std::vector<double> forces;     // n x 3 (empty without forces)
  bool has_energy = false;
  int64_t atoms() const { return static_cast<int64_t>(species.size()); }
  bool has_forces() const { return !forces.empty(); }
};

}  // namespace weft
