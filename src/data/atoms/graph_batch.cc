#include "data/atoms/graph_batch.h"

#include <array>
#include <limits>

#include "core/error.h"

namespace weft {

GraphBatch::GraphBatch(const GraphBudget& budget) : budget_(budget) {
  if (budget.max_nodes < 0 || budget.max_edges < 0 || budget.max_graphs < 0) {
    throw_input("graph batch budget: nodes {}, edges {}, graphs {} must be >= 0 (0: no limit)", budget.max_nodes,
                budget.max_edges, budget.max_graphs);
  }
}

void GraphBatch::clear() {
  has_energy_ = has_forces_ = false;
  for (auto* v : {&species_, &node_graph_, &source_, &receiver_}) v->clear();
  for (auto* v : {&pos_, &forces_, &shift_vec_}) v->clear();
  energy_.clear();
  node_offsets_.assign(1, 0);
  edge_offsets_.assign(1, 0);
}

void GraphBatch::check_fits(const GraphSample& g) const {
  const AtomStructure& s = g.s;
  const int64_t n = s.atoms(), e = g.edges(), k = graphs();
  const auto over = [](int64_t have, int64_t add, int64_t most) { return most > 0 && have + add > most; };
  if (over(nodes(), n, budget_.max_nodes) || over(edges(), e, budget_.max_edges) || over(k, 1, budget_.max_graphs)) {
    throw_input("graph batch: a structure of {} atoms and {} edges does not fit beside {} graphs of {} atoms and {} "
                "edges (budget: {} atoms, {} edges, {} graphs; 0 is no limit)",
                n, e, k, nodes(), edges(), budget_.max_nodes, budget_.max_edges, budget_.max_graphs);
  }
  if (nodes() + n > std::numeric_limits<int32_t>::max() || edges() + e > std::numeric_limits<int32_t>::max()) {
    throw_input("graph batch: {} atoms and {} edges pass the int32 indices of a batch", nodes() + n, edges() + e);
  }
  if (static_cast<int64_t>(s.pos.size()) != 3 * n || (s.has_forces() && static_cast<int64_t>(s.forces.size()) != 3 * n) ||
      static_cast<int64_t>(g.receiver.size()) != e || static_cast<int64_t>(g.shift.size()) != 3 * e) {
    throw_input("graph batch: structure {} has {} atoms with {} coordinates and {} force values, {} sources, {} "
                "receivers and {} shift values",
                k, n, s.pos.size(), s.forces.size(), e, g.receiver.size(), g.shift.size());
  }
  if (k > 0 && (s.has_energy != has_energy_ || s.has_forces() != has_forces_)) {
    const auto yn = [](bool b) { return b ? "yes" : "no"; };
    throw_input("graph batch: structure {} has energy {}, forces {}; the batch's graphs energy {}, forces {} (a "
                "batch's labels are all or none)",
                k, yn(s.has_energy), yn(s.has_forces()), yn(has_energy_), yn(has_forces_));
  }
  for (int64_t i = 0; i < e; ++i) {
    const int32_t a = g.source[static_cast<size_t>(i)], b = g.receiver[static_cast<size_t>(i)];
    if (a < 0 || a >= n || b < 0 || b >= n) {
      throw_input("graph batch: structure {} edge {} joins atoms {} and {} of {}", k, i, a, b, n);
    }
    if (i > 0 && b < g.receiver[static_cast<size_t>(i - 1)]) {
      throw_input("graph batch: structure {} edge {} has receiver {} after {}: edges must be ordered by receiver", k, i,
                  b, g.receiver[static_cast<size_t>(i - 1)]);
    }
  }
}

void GraphBatch::append(const GraphSample& g) {
  check_fits(g);
  const AtomStructure& s = g.s;
  const int64_t n = s.atoms(), e = g.edges(), base = nodes(), k = graphs();
  has_energy_ = s.has_energy;
  has_forces_ = s.has_forces();
  species_.insert(species_.end(), s.species.begin(), s.species.end());
  node_graph_.insert(node_graph_.end(), static_cast<size_t>(n), static_cast<int32_t>(k));
  for (double x : s.pos) pos_.push_back(static_cast<float>(x));
  for (double f : s.forces) forces_.push_back(static_cast<float>(f));
  const std::array<double, 9>& L = s.cell.lattice;
  for (int64_t i = 0; i < e; ++i) {
    const size_t u = static_cast<size_t>(i);
    source_.push_back(static_cast<int32_t>(base + g.source[u]));
    receiver_.push_back(static_cast<int32_t>(base + g.receiver[u]));
    const int32_t* sh = &g.shift[3 * u];
    for (int c = 0; c < 3; ++c) {  // shift L: s_a a + s_b b + s_c c, the rows of L
      shift_vec_.push_back(static_cast<float>(sh[0] * L[static_cast<size_t>(c)] + sh[1] * L[static_cast<size_t>(3 + c)] +
                                              sh[2] * L[static_cast<size_t>(6 + c)]));
    }
  }
  if (s.has_energy) energy_.push_back(s.energy);
  node_offsets_.push_back(base + n);
  edge_offsets_.push_back(edges());
}

}  // namespace weft
