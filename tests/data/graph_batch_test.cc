// data/atoms/graph_batch.h: Lennard-Jones structures packed into one disjoint graph (node and
// edge ranges per graph, batch-wide indices, edges ordered by receiver, every edge vector
// rebuilt from the positions and the shift's Cartesian offset at the radius graph's distance),
// the budget and bad graphs refused with the batch unchanged, clear() back to empty.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/atoms/graph_batch.h"
#include "data/atoms/lennard_jones.h"

namespace weft {
namespace {

std::vector<GraphSample> lj_graphs(int64_t n) {
  LjSetOptions o;
  o.structures = n;
  std::vector<GraphSample> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(make_graph_sample(lj_structure(o, i), RadiusGraphOptions{}));
  return out;
}

void expect_refused(const std::function<void()>& f, const std::vector<std::string>& fragments) {
  try {
    f();
    ADD_FAILURE() << "not refused";
  } catch (const InputError& e) {
    for (const std::string& s : fragments) EXPECT_NE(std::string(e.what()).find(s), std::string::npos) << e.what();
  }
}

TEST(GraphBatch, PacksStructuresIntoOneDisjointGraph) {
  const std::vector<GraphSample> gs = lj_graphs(4);
  GraphBatch b;
  for (const GraphSample& g : gs) b.append(g);
  ASSERT_EQ(b.graphs(), 4);
  EXPECT_EQ(b.samples(), 4);
  EXPECT_TRUE(b.has_energy());
  EXPECT_TRUE(b.has_forces());
  int64_t atoms = 0, edges = 0;
  for (int64_t k = 0; k < 4; ++k) {
    const GraphSample& g = gs[static_cast<size_t>(k)];
    const RadiusGraph ref = radius_graph(g.s.pos.data(), g.s.atoms(), g.s.cell, RadiusGraphOptions{});
    ASSERT_EQ(ref.edges(), g.edges());
    EXPECT_EQ(b.node_offsets()[static_cast<size_t>(k)], atoms);
    EXPECT_EQ(b.edge_offsets()[static_cast<size_t>(k)], edges);
    EXPECT_EQ(b.energy()[static_cast<size_t>(k)], g.s.energy);
    for (int64_t i = 0; i < g.s.atoms(); ++i) {
      const size_t u = static_cast<size_t>(atoms + i);
      EXPECT_EQ(b.node_graph()[u], k);
      EXPECT_EQ(b.species()[u], g.s.species[static_cast<size_t>(i)]);
      for (int c = 0; c < 3; ++c) {
        EXPECT_EQ(b.pos()[3 * u + c], static_cast<float>(g.s.pos[static_cast<size_t>(3 * i + c)]));
        EXPECT_EQ(b.forces()[3 * u + c], static_cast<float>(g.s.forces[static_cast<size_t>(3 * i + c)]));
      }
    }
    for (int64_t e = 0; e < g.edges(); ++e) {
      const size_t u = static_cast<size_t>(edges + e);
      const int32_t s = b.source()[u], r = b.receiver()[u];
      EXPECT_EQ(s, atoms + g.source[static_cast<size_t>(e)]);
      EXPECT_EQ(r, atoms + g.receiver[static_cast<size_t>(e)]);
      if (u > 0) EXPECT_LE(b.receiver()[u - 1], r) << "edge " << u;
      // pos[source] + shift L - pos[receiver]: the radius graph's vector (fp32 positions).
      double d2 = 0;
      for (int c = 0; c < 3; ++c) {
        const double v = static_cast<double>(b.pos()[3 * static_cast<size_t>(s) + c]) + b.shift_vec()[3 * u + c] -
                         b.pos()[3 * static_cast<size_t>(r) + c];
        EXPECT_NEAR(v, ref.vec[3 * static_cast<size_t>(e) + c], 1e-4) << "graph " << k << " edge " << e;
        d2 += v * v;
      }
      EXPECT_NEAR(std::sqrt(d2), ref.dist[static_cast<size_t>(e)], 1e-4);
    }
    atoms += g.s.atoms();
    edges += g.edges();
  }
  int64_t periodic = 0;  // edges to another image of the cell: the shifts were exercised
  for (float x : b.shift_vec()) periodic += x != 0.0f ? 1 : 0;
  EXPECT_GT(periodic, 0);
  EXPECT_EQ(b.nodes(), atoms);
  EXPECT_EQ(b.weight(), atoms);
  EXPECT_EQ(b.edges(), edges);
  EXPECT_EQ(b.node_offsets().back(), atoms);
  EXPECT_EQ(b.edge_offsets().back(), edges);
  // clear(): empty, and the same batch again when refilled.
  const std::vector<int32_t> src = b.source();
  b.clear();
  EXPECT_EQ(b.graphs(), 0);
  EXPECT_EQ(b.nodes(), 0);
  EXPECT_EQ(b.edges(), 0);
  EXPECT_EQ(b.node_offsets(), std::vector<int64_t>{0});
  for (const GraphSample& g : gs) b.append(g);
  EXPECT_EQ(b.source(), src);
}

TEST(GraphBatch, TheBudgetRefusesAGraphAndLeavesTheBatchAsItWas) {
  const std::vector<GraphSample> gs = lj_graphs(3);
  const int64_t n01 = gs[0].s.atoms() + gs[1].s.atoms(), e01 = gs[0].edges() + gs[1].edges();
  for (const GraphBudget& budget : {GraphBudget{n01, 0, 0}, GraphBudget{0, e01, 0}, GraphBudget{0, 0, 2}}) {
    GraphBatch b(budget);
    b.append(gs[0]);
    b.append(gs[1]);
    expect_refused([&] { b.append(gs[2]); },
                   {std::to_string(gs[2].s.atoms()) + " atoms", std::to_string(gs[2].edges()) + " edges",
                    "beside 2 graphs of " + std::to_string(n01) + " atoms"});
    EXPECT_EQ(b.graphs(), 2);
    EXPECT_EQ(b.nodes(), n01);
    EXPECT_EQ(b.edges(), e01);
    EXPECT_EQ(b.node_offsets().size(), 3u);
  }
  expect_refused([] { GraphBatch b(GraphBudget{-1, 0, 0}); }, {"nodes -1"});
}

TEST(GraphBatch, BadGraphsAreRefused) {
  const std::vector<GraphSample> gs = lj_graphs(2);
  GraphBatch b;
  b.append(gs[0]);
  GraphSample no_forces = gs[1];
  no_forces.s.forces.clear();
  expect_refused([&] { b.append(no_forces); }, {"structure 1 has energy yes, forces no", "energy yes, forces yes"});
  GraphSample bad = gs[1];
  ASSERT_GT(bad.edges(), 2);
  std::swap(bad.receiver.front(), bad.receiver.back());
  if (bad.receiver.front() != bad.receiver.back()) {
    expect_refused([&] { b.append(bad); }, {"structure 1 edge", "ordered by receiver"});
  }
  bad = gs[1];
  bad.source[0] = static_cast<int32_t>(bad.s.atoms());
  expect_refused([&] { b.append(bad); }, {"structure 1 edge 0 joins atoms " + std::to_string(bad.s.atoms())});
  bad = gs[1];
  bad.shift.pop_back();
  expect_refused([&] { b.append(bad); }, {"shift values"});
  EXPECT_EQ(b.graphs(), 1);
  EXPECT_EQ(b.nodes(), gs[0].s.atoms());
}

}  // namespace
}  // namespace weft
