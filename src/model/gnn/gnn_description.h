// The graph network's counts (model/description.h) for a micro-batch of B graphs at the
// family's capacity (max_atoms nodes a graph, max_neighbours in-edges a node): its parameters,
// the buffers GnnModel::reserve allocates, and its FLOPs per node and per edge.
#pragma once
#include <cstdint>

#include "model/config.h"
#include "model/description.h"

namespace weft {

// Forward FLOPs of the products per node, per edge and per graph (a training step: 3 times).
struct GnnFlops {
  double per_node = 0, per_edge = 0, per_graph = 0;
};
GnnFlops gnn_forward_flops(const ModelConfig& cfg);

// The micro-batch capacity of B graphs: nodes, edges, and graphs (up to one per node).
struct GnnCapacity {
  int64_t N = 0, E = 0, G = 0;
};
GnnCapacity gnn_capacity(const ModelConfig& cfg, int64_t graphs);

std::unique_ptr<ModelDescription> describe_gnn(const RunSpec& spec);

}  // namespace weft
