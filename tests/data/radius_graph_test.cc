// data/atoms/radius_graph.h against a direct O(N^2 x images) search on random cells: triclinic,
// shorter than the cutoff and than twice it, atoms outside the cell, every mix of periodic
// directions, a molecule without a cell, max_neighbours; bitwise the same edges, order, shifts,
// vectors and distances.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <tuple>

#include "core/error.h"
#include "data/atoms/radius_graph.h"

namespace weft {
namespace {

// Every image within reach of every atom, the same arithmetic as the search's final test.
RadiusGraph direct_search(const std::vector<double>& pos, const AtomCell& cell, const RadiusGraphOptions& o) {
  const int64_t n = static_cast<int64_t>(pos.size() / 3);
  const std::array<double, 3> h = cell_heights(cell);
  const bool spans = h[0] > 0 && std::isfinite(h[0]);
  int R[3];
  // The atoms lie up to 3 cells apart (fractional coordinates in [-1, 2)): 3 more images.
  for (int a = 0; a < 3; ++a) R[a] = cell.pbc[a] ? static_cast<int>(std::ceil(o.cutoff / h[a])) + 4 : 0;
  const double* L = cell.lattice.data();
  struct E {
    double d;
    int32_t j;
    std::array<int32_t, 3> s;
    std::array<double, 3> v;
  };
  RadiusGraph g;
  g.nodes = n;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<E> es;
    for (int32_t s0 = -R[0]; s0 <= R[0]; ++s0) {
      for (int32_t s1 = -R[1]; s1 <= R[1]; ++s1) {
        for (int32_t s2 = -R[2]; s2 <= R[2]; ++s2) {
          for (int64_t j = 0; j < n; ++j) {
            if (j == i && s0 == 0 && s1 == 0 && s2 == 0) continue;
            std::array<double, 3> e;
            for (int c = 0; c < 3; ++c) {
              const double img = spans ? s0 * L[c] + s1 * L[3 + c] + s2 * L[6 + c] : 0.0;
              e[c] = pos[3 * j + c] + img - pos[3 * i + c];
            }
            const double r2 = e[0] * e[0] + e[1] * e[1] + e[2] * e[2];
            if (r2 < o.cutoff * o.cutoff) es.push_back({std::sqrt(r2), static_cast<int32_t>(j), {s0, s1, s2}, e});
          }
        }
      }
    }
    std::sort(es.begin(), es.end(), [](const E& x, const E& y) { return std::tie(x.d, x.j, x.s) < std::tie(y.d, y.j, y.s); });
    if (o.max_neighbours > 0 && static_cast<int64_t>(es.size()) > o.max_neighbours) es.resize(static_cast<size_t>(o.max_neighbours));
    for (const E& e : es) {
      g.source.push_back(e.j);
      g.receiver.push_back(static_cast<int32_t>(i));
      g.shift.insert(g.shift.end(), e.s.begin(), e.s.end());
      g.vec.insert(g.vec.end(), e.v.begin(), e.v.end());
      g.dist.push_back(e.d);
    }
  }
  return g;
}

void expect_same(const RadiusGraph& got, const RadiusGraph& want, const std::string& what) {
  ASSERT_EQ(got.edges(), want.edges()) << what;
  EXPECT_EQ(got.source, want.source) << what;
  EXPECT_EQ(got.receiver, want.receiver) << what;
  EXPECT_EQ(got.shift, want.shift) << what;
  EXPECT_EQ(got.vec, want.vec) << what;
  EXPECT_EQ(got.dist, want.dist) << what;
}

TEST(RadiusGraph, EqualsTheDirectSearchOnRandomCells) {
  std::mt19937_64 rng(20261205);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  int64_t total_edges = 0, with_far_images = 0;
  for (int trial = 0; trial < 300; ++trial) {
    AtomCell cell;
    const double size[3] = {1.5 + 10.0 * u(rng), 1.5 + 10.0 * u(rng), 1.5 + 10.0 * u(rng)};
    for (int a = 0; a < 3; ++a) {
      for (int c = 0; c < 3; ++c) cell.lattice[3 * a + c] = a == c ? size[a] : 0.4 * size[a] * (u(rng) - 0.5);
      cell.pbc[a] = u(rng) < 0.7;
    }
    RadiusGraphOptions o;
    o.cutoff = 2.0 + 3.0 * u(rng);
    o.max_neighbours = u(rng) < 0.4 ? 1 + static_cast<int64_t>(12 * u(rng)) : 0;
    const int64_t n = 1 + static_cast<int64_t>(30 * u(rng));
    std::vector<double> pos(static_cast<size_t>(3 * n));
    for (int64_t i = 0; i < n; ++i) {
      double f[3];
      for (double& x : f) x = -1.0 + 3.0 * u(rng);  // atoms outside the cell too
      for (int c = 0; c < 3; ++c) {
        pos[static_cast<size_t>(3 * i + c)] = f[0] * cell.lattice[c] + f[1] * cell.lattice[3 + c] + f[2] * cell.lattice[6 + c];
      }
    }
    const RadiusGraph got = radius_graph(pos.data(), n, cell, o);
    expect_same(got, direct_search(pos, cell, o), "trial " + std::to_string(trial));
    total_edges += got.edges();
    for (int64_t e = 0; e < got.edges(); ++e) {
      if (std::abs(got.shift[static_cast<size_t>(3 * e)]) > 1 || std::abs(got.shift[static_cast<size_t>(3 * e + 1)]) > 1 ||
          std::abs(got.shift[static_cast<size_t>(3 * e + 2)]) > 1) {
        ++with_far_images;
      }
    }
  }
  EXPECT_GT(total_edges, 10000);   // the trials are not empty
  EXPECT_GT(with_far_images, 100);  // and reach images beyond the neighbouring cells
}

TEST(RadiusGraph, MoleculeWithoutACell) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(-4.0, 4.0);
  std::vector<double> pos(3 * 25);
  for (double& x : pos) x = u(rng);
  const AtomCell none;  // zero lattice, no periodic direction
  for (int64_t k : {0, 3}) {
    RadiusGraphOptions o;
    o.cutoff = 3.0;
    o.max_neighbours = k;
    expect_same(radius_graph(pos.data(), 25, none, o), direct_search(pos, none, o), "max_neighbours " + std::to_string(k));
  }
}

TEST(RadiusGraph, OneAtomInASmallCellSeesItsImages) {
  // Simple cubic, a = 1, cutoff 1.5: 6 images at 1 and 12 at sqrt(2), none of itself unshifted.
  AtomCell cell;
  cell.lattice = {1, 0, 0, 0, 1, 0, 0, 0, 1};
  cell.pbc = {true, true, true};
  const double x[3] = {0.25, 0.5, 0.75};
  RadiusGraphOptions o;
  o.cutoff = 1.5;
  const RadiusGraph g = radius_graph(x, 1, cell, o);
  ASSERT_EQ(g.edges(), 18);
  for (int e = 0; e < 6; ++e) EXPECT_DOUBLE_EQ(g.dist[static_cast<size_t>(e)], 1.0);
  for (int e = 6; e < 18; ++e) EXPECT_NEAR(g.dist[static_cast<size_t>(e)], std::sqrt(2.0), 1e-15);
  o.max_neighbours = 4;
  EXPECT_EQ(radius_graph(x, 1, cell, o).edges(), 4);
}

TEST(RadiusGraph, BadInputIsRefusedNamingTheValue) {
  AtomCell cell;
  cell.lattice = {3, 0, 0, 0, 3, 0, 6, 0, 0};  // c parallel to a
  cell.pbc = {true, true, true};
  const double x[6] = {0, 0, 0, 1, 1, 1};
  RadiusGraphOptions o;
  try {
    radius_graph(x, 2, cell, o);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("independent lattice vectors"), std::string::npos) << e.what();
  }
  cell.lattice = {3, 0, 0, 0, 3, 0, 0, 0, 3};
  o.cutoff = 0.0;
  EXPECT_THROW(radius_graph(x, 2, cell, o), InputError);
  o.cutoff = 2.0;
  const double bad[6] = {0, 0, 0, 1, std::nan(""), 1};
  try {
    radius_graph(bad, 2, cell, o);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("atom 1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace weft
