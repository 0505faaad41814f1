// data/atoms/graph_batching.h: on the skewed Lennard-Jones working set, dealing a step's graphs
// by predicted cost balances 4 ranks far better than equal graph counts; every plan covers
// the epoch's graphs once, keeps each step's global batch whatever the number of ranks (layout
// invariance), respects the budgets and is a function of (seed, epoch); bad settings refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <set>

#include "core/error.h"
#include "data/atoms/graph_batching.h"
#include "data/atoms/lennard_jones.h"
#include "test_util.h"

namespace weft {
namespace {

std::vector<GraphSize> lj_sizes(int64_t n) {
  LjSetOptions o;
  o.structures = n;
  RadiusGraphOptions g;  // cutoff 5, every neighbour
  std::vector<GraphSize> out;
  for (int64_t i = 0; i < n; ++i) {
    const AtomStructure s = lj_structure(o, i);
    out.push_back({s.atoms(), radius_graph(s.pos.data(), s.atoms(), s.cell, g).edges()});
  }
  return out;
}

TEST(GraphBatching, CostDealingBalancesTheSkewedSet) {
  const std::vector<GraphSize> sizes = lj_sizes(400);
  const GraphCostModel cost;  // nodes + edges
  const GraphEpochPlan eq = plan_graph_epoch(sizes, 4, 32, GraphBalance::kEqualCounts, {}, cost, 1, 0);
  const GraphEpochPlan bal = plan_graph_epoch(sizes, 4, 32, GraphBalance::kCost, {}, cost, 1, 0);
  std::printf("LJ working set, 400 graphs, 4 ranks, 32 graphs a step: busiest/mean cost per step: equal counts mean "
              "%.3f max %.3f, by cost mean %.3f max %.3f; peak micro-batch %lld/%lld atoms, %lld/%lld edges\n",
              eq.mean_imbalance, eq.max_imbalance, bal.mean_imbalance, bal.max_imbalance,
              static_cast<long long>(eq.peak.nodes), static_cast<long long>(bal.peak.nodes),
              static_cast<long long>(eq.peak.edges), static_cast<long long>(bal.peak.edges));
  ASSERT_EQ(eq.steps.size(), 12u);
  EXPECT_GT(eq.mean_imbalance, 1.2);  // the skew: equal counts leave one rank far busier (1.296)
  EXPECT_LT(bal.mean_imbalance, 1.05);  // 1.016
  EXPECT_LT(bal.peak.edges, eq.peak.edges);
}

TEST(GraphBatching, StepsKeepTheirGlobalBatchWhateverTheRanks) {
  const std::vector<GraphSize> sizes = lj_sizes(150);
  const GraphCostModel cost;
  std::vector<std::vector<std::multiset<int64_t>>> batches;
  for (int ranks : {1, 2, 3, 4}) {
    for (GraphBalance m : {GraphBalance::kEqualCounts, GraphBalance::kCost}) {
      const GraphEpochPlan p = plan_graph_epoch(sizes, ranks, 12, m, {}, cost, 9, 3);
      std::vector<std::multiset<int64_t>> steps;
      std::set<int64_t> seen;
      for (const GraphStep& s : p.steps) {
        std::multiset<int64_t> all;
        for (const auto& r : s.rank_graphs) {
          EXPECT_FALSE(r.empty());
          for (int64_t g : r) {
            all.insert(g);
            EXPECT_TRUE(seen.insert(g).second) << "graph " << g << " twice";
          }
        }
        EXPECT_EQ(all.size(), 12u);
        steps.push_back(all);
      }
      EXPECT_EQ(seen.size(), 144u);  // 12 steps of 12; the last 6 graphs wait for the next epoch
      batches.push_back(steps);
    }
  }
  for (const auto& b : batches) EXPECT_EQ(b, batches[0]);
  // A function of (seed, epoch).
  const GraphEpochPlan a = plan_graph_epoch(sizes, 4, 12, GraphBalance::kCost, {}, cost, 9, 3);
  const GraphEpochPlan b = plan_graph_epoch(sizes, 4, 12, GraphBalance::kCost, {}, cost, 9, 3);
  const GraphEpochPlan c = plan_graph_epoch(sizes, 4, 12, GraphBalance::kCost, {}, cost, 9, 4);
  EXPECT_EQ(a.steps[0].rank_graphs, b.steps[0].rank_graphs);
  EXPECT_NE(a.steps[0].rank_graphs, c.steps[0].rank_graphs);
}

TEST(GraphBatching, BudgetsAreRespectedOrRefused) {
  const std::vector<GraphSize> sizes = lj_sizes(120);
  const GraphCostModel cost;
  int64_t biggest = 0;
  for (const GraphSize& g : sizes) biggest = std::max(biggest, g.edges);
  GraphBudget b;
  b.max_edges = biggest + 2000;
  b.max_graphs = 6;
  const GraphEpochPlan p = plan_graph_epoch(sizes, 4, 16, GraphBalance::kCost, b, cost, 2, 0);
  for (const GraphStep& s : p.steps) {
    for (const auto& r : s.rank_graphs) {
      int64_t e = 0;
      for (int64_t g : r) e += sizes[static_cast<size_t>(g)].edges;
      EXPECT_LE(e, b.max_edges);
      EXPECT_LE(static_cast<int64_t>(r.size()), b.max_graphs);
    }
  }
  GraphBudget small;
  small.max_edges = biggest - 1;
  EXPECT_NE(test::input_error_message([&] { plan_graph_epoch(sizes, 4, 16, GraphBalance::kCost, small, cost, 2, 0); })
                .find("larger than a micro-batch's budget"),
            std::string::npos);
  GraphBudget tight;
  tight.max_graphs = 3;  // 4 ranks x 3 < 16 graphs a step
  EXPECT_NE(test::input_error_message([&] { plan_graph_epoch(sizes, 4, 16, GraphBalance::kCost, tight, cost, 2, 0); })
                .find("fits no rank's budget"),
            std::string::npos);
  EXPECT_NE(test::input_error_message([&] { plan_graph_epoch(sizes, 4, 3, GraphBalance::kCost, {}, cost, 2, 0); })
                .find("3 graphs per step"),
            std::string::npos);
}

}  // namespace
}  // namespace weft
