// Radius graphs of atomic structures (issue 33, the graph-network family's data): every ordered
// pair of atoms, periodic images included, closer than a cutoff, as HydraGNN builds them
// (preprocess/graph_samples_checks_and_updates.py RadiusGraphPBC: every periodic image, also
// of a cell shorter than twice the cutoff, shifts stored per edge, no self-loops, the
// max_neighbours nearest sources kept per receiver, deterministically).
//
// Conventions: the cell's rows are the lattice vectors a, b, c (Angstrom); an atom's image
// under the integer shift s = (s_a, s_b, s_c) is x + s_a a + s_b b + s_c c. Edge e carries a
// message from source[e] to receiver[e]; its vector is x_source + shift L - x_receiver and its
// distance that vector's length (the positions as given, not wrapped into the cell). Edges
// are ordered by receiver, then by (distance, source, shift): the segment operations of the
// family reduce them in this order (bitwise reproducible). Along a non-periodic direction no
// image is taken and the lattice vector may be zero (a molecule: all three zero).
#pragma once
#include <array>
#include <cstdint>
#include <vector>

namespace weft {

struct AtomCell {
  std::array<double, 9> lattice{};  // rows a, b, c
  std::array<bool, 3> pbc{};
};

struct RadiusGraphOptions {
  double cutoff = 5.0;         // Angstrom: pairs strictly closer are edges
  int64_t max_neighbours = 0;  // the nearest sources kept per receiver; 0: every one within the cutoff
};

struct RadiusGraph {
  int64_t nodes = 0;
  std::vector<int32_t> source, receiver;
  std::vector<int32_t> shift;  // 3 per edge
  std::vector<double> vec;     // 3 per edge: x_source + shift L - x_receiver
  std::vector<double> dist;    // per edge
  int64_t edges() const { return static_cast<int64_t>(source.size()); }
};

// The radius graph of n atoms at pos (n x 3). InputError, naming the value, for a cutoff that is
// not positive and finite, a non-finite position, a periodic cell whose lattice vectors are not
// independent, or a search that would visit more than 2^31 - 1 edges.
RadiusGraph radius_graph(const double* pos, int64_t n, const AtomCell& cell, const RadiusGraphOptions& o);

// The perpendicular heights of the cell (its volume over the area of each pair of the other two
// lattice vectors): the distance between the planes of neighbouring images along a, b, c.
std::array<double, 3> cell_heights(const AtomCell& cell);

}  // namespace weft
