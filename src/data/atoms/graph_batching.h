// Which graphs each rank trains on at each step (issue 33, item 5: load balance across ranks).
// Every rank computes the same plan from the same inputs (no communication).
//
// A step takes the next `graphs_per_step` graphs of the epoch's shuffled order: the global batch
// is the same set whatever the number of ranks, so the loss, normalised by the global counts of
// graphs and atoms, is layout invariant. The step's graphs are then dealt to the ranks:
//  - kEqualCounts: consecutive equal shares of graphs (HydraGNN's default DistributedSampler:
//    equal graph counts whatever their sizes);
//  - kCost: by predicted cost (a node term, an edge term and a graph term: the message passing's
//    work goes with the edges), largest first, each to the rank with the least cost so far that
//    still has room in the node, edge and graph budget (longest-processing-time-first: at most
//    4/3 of the optimum's busiest rank).
// imbalance of a step: the busiest rank's cost over the mean (1 is perfect balance).
#pragma once
#include <cstdint>
#include <vector>

namespace weft {

struct GraphSize {
  int64_t nodes = 0, edges = 0;
};

struct GraphBudget {
  int64_t max_nodes = 0, max_edges = 0, max_graphs = 0;  // a rank's micro-batch; 0: no limit
};

struct GraphCostModel {
  double per_node = 1.0, per_edge = 1.0, per_graph = 0.0;
  double of(const GraphSize& g) const {
    return per_node * static_cast<double>(g.nodes) + per_edge * static_cast<double>(g.edges) + per_graph;
  }
};

enum class GraphBalance { kEqualCounts, kCost };

struct GraphStep {
  std::vector<std::vector<int64_t>> rank_graphs;  // per rank, graph indices
  std::vector<double> rank_cost;
  double imbalance = 1.0;
};

struct GraphEpochPlan {
  std::vector<GraphStep> steps;
  double mean_imbalance = 1.0, max_imbalance = 1.0;
  GraphSize peak;  // the largest micro-batch (nodes, edges) any rank received: the capacity it needs
};

// One step's graphs `ids` (indices into `graphs`) dealt to `bins` ranks (or micro-batch slots),
// each within `budget`: kEqualCounts consecutive equal shares, kCost largest first to the least
// loaded bin with room. InputError naming the numbers when a graph fits no bin.
GraphStep plan_graph_step(const std::vector<GraphSize>& graphs, const std::vector<int64_t>& ids, int bins,
                          GraphBalance mode, const GraphBudget& budget, const GraphCostModel& cost, int64_t step);

// The shuffled order of `n` graphs in epoch `epoch` (a Philox Fisher-Yates shuffle of (seed, epoch)):
// what plan_graph_epoch and the training data source walk through.
std::vector<int64_t> graph_epoch_order(int64_t n, uint64_t seed, int64_t epoch);

// The plan of one epoch: floor(graphs / graphs_per_step) steps (the rest of the shuffled order
// waits for the next epoch, as a dropped last batch). InputError, naming the numbers, for
// ranks < 1, graphs_per_step < ranks, a graph larger than the budget, or (kCost) a step whose
// graphs do not fit the ranks' budgets together.
GraphEpochPlan plan_graph_epoch(const std::vector<GraphSize>& graphs, int ranks, int64_t graphs_per_step,
                                GraphBalance mode, const GraphBudget& budget, const GraphCostModel& cost,
                                uint64_t seed, int64_t epoch);

}  // namespace weft
