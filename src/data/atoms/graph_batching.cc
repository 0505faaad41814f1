#include "data/atoms/graph_batching.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"

namespace weft {
namespace {

}  // namespace

std::vector<int64_t> graph_epoch_order(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  for (int64_t i = n - 1; i > 0; --i) {
    const auto b = Philox::draw(seed, kRngStreamData + 0x6261, static_cast<uint64_t>(epoch) << 32 | static_cast<uint64_t>(i));
    const uint64_t r = (static_cast<uint64_t>(b[0]) << 32 | b[1]) % static_cast<uint64_t>(i + 1);
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(r)]);
  }
  return order;
}

namespace {

bool fits(const GraphSize& used, int64_t graphs, const GraphSize& g, const GraphBudget& b) {
  return (b.max_nodes <= 0 || used.nodes + g.nodes <= b.max_nodes) &&
         (b.max_edges <= 0 || used.edges + g.edges <= b.max_edges) && (b.max_graphs <= 0 || graphs + 1 <= b.max_graphs);
}

void finish(GraphStep& s, const std::vector<GraphSize>& graphs, const GraphCostModel& cost, GraphSize& peak) {
  const size_t P = s.rank_graphs.size();
  s.rank_cost.assign(P, 0.0);
  double total = 0.0, busiest = 0.0;
  for (size_t r = 0; r < P; ++r) {
    GraphSize used;
    for (int64_t g : s.rank_graphs[r]) {
      const GraphSize& z = graphs[static_cast<size_t>(g)];
      s.rank_cost[r] += cost.of(z);
      used.nodes += z.nodes, used.edges += z.edges;
    }
    peak.nodes = std::max(peak.nodes, used.nodes), peak.edges = std::max(peak.edges, used.edges);
    total += s.rank_cost[r], busiest = std::max(busiest, s.rank_cost[r]);
  }
  s.imbalance = total > 0.0 ? busiest / (total / static_cast<double>(P)) : 1.0;
}

// Largest first, each to the least loaded rank with room (ties: the lower rank).
void deal_by_cost(GraphStep& s, const std::vector<int64_t>& ids, const std::vector<GraphSize>& graphs,
                  const GraphBudget& b, const GraphCostModel& cost, int64_t step) {
  const size_t P = s.rank_graphs.size();
  std::vector<int64_t> order = ids;
  std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
    return cost.of(graphs[static_cast<size_t>(x)]) > cost.of(graphs[static_cast<size_t>(y)]);
  });
  std::vector<double> load(P, 0.0);
  std::vector<GraphSize> used(P);
  for (int64_t g : order) {
    const GraphSize& z = graphs[static_cast<size_t>(g)];
    size_t best = P;
    for (size_t r = 0; r < P; ++r) {
      if (fits(used[r], static_cast<int64_t>(s.rank_graphs[r].size()), z, b) && (best == P || load[r] < load[best])) best = r;
    }
    if (best == P) {
      throw_input("graph batching: step {}: graph {} ({} atoms, {} edges) fits no rank's budget (nodes {}, edges {}, "
                  "graphs {}) beside the step's larger graphs; lower the graphs per step or raise the budget",
                  step, g, z.nodes, z.edges, b.max_nodes, b.max_edges, b.max_graphs);
    }
    s.rank_graphs[best].push_back(g);
    load[best] += cost.of(z);
    used[best].nodes += z.nodes, used[best].edges += z.edges;
  }
  for (auto& r : s.rank_graphs) std::sort(r.begin(), r.end());  // a rank's graphs in index order
}

}  // namespace

GraphStep plan_graph_step(const std::vector<GraphSize>& graphs, const std::vector<int64_t>& ids, int bins,
                          GraphBalance mode, const GraphBudget& budget, const GraphCostModel& cost, int64_t step) {
  GraphStep s;
  s.rank_graphs.resize(static_cast<size_t>(bins));
  const auto n = static_cast<int64_t>(ids.size());
  if (mode == GraphBalance::kEqualCounts) {
    for (int r = 0; r < bins; ++r) {
      const int64_t b = n * r / bins, e = n * (r + 1) / bins;
      s.rank_graphs[static_cast<size_t>(r)].assign(ids.begin() + b, ids.begin() + e);
    }
  } else {
    deal_by_cost(s, ids, graphs, budget, cost, step);
  }
  GraphSize unused;
  finish(s, graphs, cost, unused);
  return s;
}

GraphEpochPlan plan_graph_epoch(const std::vector<GraphSize>& graphs, int ranks, int64_t graphs_per_step,
                                GraphBalance mode, const GraphBudget& budget, const GraphCostModel& cost,
                                uint64_t seed, int64_t epoch) {
  if (ranks < 1) throw_input("graph batching: {} ranks", ranks);
  if (graphs_per_step < ranks) {
    throw_input("graph batching: {} graphs per step cannot give each of the {} ranks a graph", graphs_per_step, ranks);
  }
  for (size_t g = 0; g < graphs.size(); ++g) {
    const GraphSize& z = graphs[g];
    if (z.nodes < 1 || z.edges < 0) throw_input("graph batching: graph {} has {} atoms and {} edges", g, z.nodes, z.edges);
    if (!fits(GraphSize{}, 0, z, budget)) {
      throw_input("graph batching: graph {} ({} atoms, {} edges) is larger than a micro-batch's budget (nodes {}, "
                  "edges {})", g, z.nodes, z.edges, budget.max_nodes, budget.max_edges);
    }
  }
  const std::vector<int64_t> order = graph_epoch_order(static_cast<int64_t>(graphs.size()), seed, epoch);
  GraphEpochPlan plan;
  const int64_t steps = static_cast<int64_t>(graphs.size()) / graphs_per_step;
  double sum = 0.0;
  for (int64_t k = 0; k < steps; ++k) {
    const std::vector<int64_t> ids(order.begin() + k * graphs_per_step, order.begin() + (k + 1) * graphs_per_step);
    GraphStep s = plan_graph_step(graphs, ids, ranks, mode, budget, cost, k);
    for (const auto& r : s.rank_graphs) {
      GraphSize used;
      for (int64_t g : r) used.nodes += graphs[static_cast<size_t>(g)].nodes, used.edges += graphs[static_cast<size_t>(g)].edges;
      plan.peak.nodes = std::max(plan.peak.nodes, used.nodes), plan.peak.edges = std::max(plan.peak.edges, used.edges);
    }
    sum += s.imbalance;
    plan.max_imbalance = k == 0 ? s.imbalance : std::max(plan.max_imbalance, s.imbalance);
    plan.steps.push_back(std::move(s));
  }
  plan.mean_imbalance = steps > 0 ? sum / static_cast<double>(steps) : 1.0;
  return plan;
}

}  // namespace weft
