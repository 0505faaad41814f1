// A micro-batch of graphs: the graph-network family's HostBatch (issue 33, item 4). The
// structures a rank trains on in one micro-batch (graph_batching.h decides which) are packed
// into one disjoint graph, as PyTorch Geometric's Batch and HydraGNN pack theirs: the atoms of
// graph g are nodes [node_offset(g), node_offset(g + 1)), its edges [edge_offset(g),
// edge_offset(g + 1)), and every edge index is a node of the batch. Fixed-capacity: a budget of
// nodes, edges and graphs (HydraGNN's node-budget batching, with the edges budgeted too: they
// carry the message passing's cost); a graph that would pass it is refused, naming the numbers.
//
// Per node: species (atomic number), position (Angstrom, fp32), the graph it belongs to, and
// with force labels its force (3). Per edge: source, receiver (batch node indices) and the
// Cartesian offset of the source's periodic image, shift L (3, fp32), so that the edge vector
// is pos[source] + shift_vec - pos[receiver] whatever the positions become (a layer that moves
// the coordinates, as EGNN's, recomputes it). Edges are ordered by receiver over the whole batch
// (each graph's are, and the graphs follow one another), which the segment operations of the
// device contract need for deterministic sums. Per graph: its energy label where there is one.
//
// Losses: the forces average over atoms and the energy over graphs, each normalised by the
// count over the whole global batch (the engine sums them over the data-parallel ranks), so that
// any number of ranks gives the one-rank loss. weight() is the atom count, samples() the graph
// count.
#pragma once
#include <cstdint>
#include <vector>

#include "data/atoms/graph_batching.h"
#include "data/atoms/graph_shard.h"
#include "data/batch.h"

namespace weft {

class GraphBatch final : public HostBatch {
 public:
  // budget: the most nodes, edges and graphs it may hold (0: no limit on that count).
  explicit GraphBatch(const GraphBudget& budget = {});
  const char* kind() const override { return "graphs"; }
  void clear() override;
  int64_t samples() const override { return graphs(); }
  int64_t weight() const override { return nodes(); }
  // Two loss terms: the forces' (over atoms) and the energy's (over graphs).
  std::vector<int64_t> term_weights() const override { return {nodes(), graphs()}; }
  // A balanced sampler gives ranks different numbers of graphs (graph_batching.h).
  bool variable_samples() const override { return true; }

  // Appends one structure with its graph. InputError (naming the counts and the budget) when it
  // would pass the budget, when its labels differ from the graphs already held (energies,
  // forces: all or none), or when its edges are not ordered by receiver or name atoms it does
  // not have; the batch is unchanged then.
  void append(const GraphSample& g);

  const GraphBudget& budget() const { return budget_; }
  int64_t graphs() const { return static_cast<int64_t>(node_offsets_.size()) - 1; }
  int64_t nodes() const { return static_cast<int64_t>(species_.size()); }
  int64_t edges() const { return static_cast<int64_t>(source_.size()); }
  bool has_energy() const { return has_energy_; }
  bool has_forces() const { return has_forces_; }

  const std::vector<int32_t>& species() const { return species_; }      // N
  const std::vector<float>& pos() const { return pos_; }                // 3N
  const std::vector<int32_t>& node_graph() const { return node_graph_; }  // N: the graph of each node
  const std::vector<float>& forces() const { return forces_; }          // 3N (with force labels)
  const std::vector<int32_t>& source() const { return source_; }        // E
  const std::vector<int32_t>& receiver() const { return receiver_; }    // E, non-decreasing
  const std::vector<float>& shift_vec() const { return shift_vec_; }    // 3E: shift L
  const std::vector<double>& energy() const { return energy_; }         // G (with energy labels)
  const std::vector<int64_t>& node_offsets() const { return node_offsets_; }  // G + 1
  const std::vector<int64_t>& edge_offsets() const { return edge_offsets_; }  // G + 1

 private:
  void check_fits(const GraphSample& g) const;
  GraphBudget budget_;
  bool has_energy_ = false, has_forces_ = false;
  std::vector<int32_t> species_, node_graph_, source_, receiver_;
  std::vector<float> pos_, forces_, shift_vec_;
  std::vector<double> energy_;
  std::vector<int64_t> node_offsets_{0}, edge_offsets_{0};
};

}  // namespace weft
