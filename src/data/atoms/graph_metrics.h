// Scores of energy and force predictions of atomic structures (issue 33, item 6), as the
// literature reports them: the energy's mean absolute error per atom, the forces' per component,
// in the data's units, beside two baselines: a per-species linear fit of the energy (the
// "composition" model E = sum_s n_s e_s fitted by least squares on the training split, the
// reference energies models are judged against) and zero forces.
#pragma once
#include <cstdint>
#include <map>
#include <vector>

#include "data/atoms/graph_shard.h"

namespace weft {

// E ~ sum over atoms of e[species], least squares over the structures given (with energies).
// Species that never occur get 0. InputError when no structure has an energy.
struct SpeciesEnergyFit {
  std::map<int32_t, double> per_species;
  static SpeciesEnergyFit fit(const std::vector<GraphSample>& train);
  double predict(const AtomStructure& s) const;
};

// Running sums of the errors of predictions against labels.
struct GraphErrors {
  int64_t structures = 0, atoms = 0, components = 0;
  double energy_abs = 0.0, energy_sq = 0.0;   // of the energy per atom
  double force_abs = 0.0, force_sq = 0.0;     // per force component
  // One structure: its predicted energy (total) and forces (3 per atom, or empty to skip them).
  void add(const AtomStructure& s, double energy, const float* forces);
  double energy_mae() const { return structures ? energy_abs / static_cast<double>(structures) : 0.0; }
  double energy_rmse() const;
  double force_mae() const { return components ? force_abs / static_cast<double>(components) : 0.0; }
  double force_rmse() const;
};

}  // namespace weft
