// Synthetic atomistic data with exact labels (issue 33): Lennard-Jones structures, in two sets.
//
//  - HydraGNN's example (examples/LennardJones/LJ_data.py), construction and labels as it makes
//    them, so that results compare with HydraGNN's: a simple-cubic 3 x 3 x 3 supercell (its
//    randint(3, 4) is always 3: 27 atoms) of lattice constant 3.8 A, each coordinate displaced
//    uniformly by up to +-5% of it, a periodic cube of 11.4 A, one species (type 1);
//    V(r) = 4 eps ((sigma/r)^12 - (sigma/r)^6), eps 1, sigma 3.4, no shift. Labels on the
//    model's graph (LJ.json: radius 5, max_neighbours 5; HydraGNN's RadiusGraphPBC keeps each
//    receiver's 5 nearest sources): the energy is the sum of V over its directed edges (135:
//    not symmetric, so not the pair sum) and the forces -dE/dx of that sum (its autograd).
//  - The working set: shifted-force LJ, V_sf(r) = V(r) - V(r_c) - (r - r_c) V'(r_c) below r_c
//    (energy and force continuous at the cutoff), the energy the sum over unordered pairs
//    (periodic images included) and the forces exactly -dE/dx; periodic simple-cubic supercells
//    of n_a x n_b x n_c cells, n in [2, 6] drawn with P(n) ~ 1/n^2 (8 to 216 atoms, mostly small:
//    the skew that makes ranks unequal), a random lattice constant (3.8 A x [0.98, 1.04]) and
//    each coordinate displaced by up to +-5% of it; argon (Z 18). With species = 2, the Kob-Andersen
//    binary mixture (Kob and Andersen, Phys. Rev. E 51, 4626, 1995): each site A (labelled Z 18)
//    or, with probability 0.2, B (labelled Z 10); eps_AB = 1.5, sigma_AB = 0.8, eps_BB = 0.5,
//    sigma_BB = 0.88 (in eps_AA = 1, sigma_AA = 3.4 A), each pair shifted at its own 2.5 sigma.
// Both are deterministic functions of (seed, structure index).
#pragma once
#include <cstdint>
#include <vector>

#include "data/atoms/structure.h"

namespace weft {


struct LennardJones {
  double epsilon = 1.0, sigma = 3.4;
  double cutoff = 8.5;          // r_c, Angstrom (2.5 sigma)
  bool shifted_force = true;    // V_sf; false: V cut at r_c (HydraGNN's)
  double pair(double r) const;  // the pair energy at r < r_c
  double slope(double r) const; // its derivative dV/dr
};

// Sets s.energy and s.forces: the sum over unordered pairs within the cutoff and -dE/dx.
void label_lennard_jones(AtomStructure& s, const LennardJones& lj);

// A mixture: the potential of each pair of species (symmetric; each with its own cutoff).
struct LjMixture {
  std::vector<int32_t> species;     // the atomic numbers of the types
  std::vector<LennardJones> pairs;  // types x types
  const LennardJones& pair(int32_t zi, int32_t zj) const;
  double max_cutoff() const;
};
LjMixture kob_andersen_mixture(const LennardJones& aa);
// The same over a mixture: each pair by its species, within its own cutoff. InputError for a
// species the mixture does not hold.
void label_lennard_jones(AtomStructure& s, const LjMixture& mix);
// HydraGNN's labels (above): the sum of V over the edges of the radius graph that keeps
// max_neighbours sources per receiver, and -dE/dx of it.
void label_lennard_jones_hydragnn(AtomStructure& s, const LennardJones& lj, int64_t max_neighbours);
inline constexpr int64_t kHydraGnnLjNeighbours = 5;  // examples/LennardJones/LJ.json

struct LjSetOptions {
  bool hydragnn = false;   // HydraGNN's example, else the working set
  int64_t structures = 300;
  uint64_t seed = 1337;
  int64_t min_cells = 2, max_cells = 6;  // the working set's cells per direction
  int64_t species = 1;                   // the working set: 1 argon, 2 the Kob-Andersen mixture
};
// InputError naming the value for options no set can be drawn with.
void check_lj_options(const LjSetOptions& o);
// The LJ potential each set labels with (HydraGNN's: cutoff 5, unshifted).
LennardJones lj_potential(const LjSetOptions& o);
// Structure i of the set, labelled.
AtomStructure lj_structure(const LjSetOptions& o, int64_t i);

}  // namespace weft
