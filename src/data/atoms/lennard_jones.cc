#include "data/atoms/lennard_jones.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/rng.h"

namespace weft {
namespace {

double lj(double eps, double sigma, double r) {
  const double s6 = std::pow(sigma / r, 6);
  return 4.0 * eps * (s6 * s6 - s6);
}
double lj_slope(double eps, double sigma, double r) {
  const double s6 = std::pow(sigma / r, 6);
  return 4.0 * eps * (-12.0 * s6 * s6 + 6.0 * s6) / r;
}

// The set's draws: stream kRngStreamData + a tag, index (structure, draw).
double uniform(uint64_t seed, int64_t structure, int64_t k) {
  const auto b = Philox::draw(seed, kRngStreamData + 0x4c4a, static_cast<uint64_t>(structure) << 20 | static_cast<uint64_t>(k));
  return (static_cast<double>(b[0]) * 4294967296.0 + static_cast<double>(b[1])) / 18446744073709551616.0;  // [0, 1)
}

RadiusGraph neighbours(const AtomStructure& s, double cutoff, int64_t max_neighbours) {
  RadiusGraphOptions o;
  o.cutoff = cutoff;
  o.max_neighbours = max_neighbours;
  return radius_graph(s.pos.data(), s.atoms(), s.cell, o);
}

// Sets s.energy to the sum over unordered pairs within each pair's cutoff (the radius graph of
// the largest, every directed edge half a pair) and s.forces to -dE/dx. pair_of(zi, zj): the
// potential of a pair of species.
template <class PairOf>
void label_pairs(AtomStructure& s, double cutoff, PairOf&& pair_of) {
  const RadiusGraph g = neighbours(s, cutoff, 0);
  s.has_energy = true;
  s.energy = 0.0;
  s.forces.assign(static_cast<size_t>(3 * s.atoms()), 0.0);
  for (int64_t e = 0; e < g.edges(); ++e) {
    const int32_t i = g.receiver[static_cast<size_t>(e)], j = g.source[static_cast<size_t>(e)];
    const LennardJones& p = pair_of(s.species[static_cast<size_t>(i)], s.species[static_cast<size_t>(j)]);
    const double r = g.dist[static_cast<size_t>(e)];
    if (r >= p.cutoff) continue;
    s.energy += 0.5 * p.pair(r);
    // vec = x_j + shift L - x_i: dr/dx_i = -vec / r, so -dE/dx_i gains V'(r) vec / r (both
    // halves of the pair depend on x_i).
    const double k = p.slope(r) / r;
    for (int c = 0; c < 3; ++c) s.forces[static_cast<size_t>(3 * i + c)] += k * g.vec[static_cast<size_t>(3 * e + c)];
  }
}

}  // namespace

double LennardJones::pair(double r) const {
  if (!shifted_force) return lj(epsilon, sigma, r);
  return lj(epsilon, sigma, r) - lj(epsilon, sigma, cutoff) - (r - cutoff) * lj_slope(epsilon, sigma, cutoff);
}

double LennardJones::slope(double r) const {
  return shifted_force ? lj_slope(epsilon, sigma, r) - lj_slope(epsilon, sigma, cutoff) : lj_slope(epsilon, sigma, r);
}

void label_lennard_jones(AtomStructure& s, const LennardJones& lj) {
  label_pairs(s, lj.cutoff, [&lj](int32_t, int32_t) -> const LennardJones& { return lj; });
}

void label_lennard_jones_hydragnn(AtomStructure& s, const LennardJones& lj, int64_t max_neighbours) {
  const RadiusGraph g = neighbours(s, lj.cutoff, max_neighbours);
  s.has_energy = true;
  s.energy = 0.0;
  s.forces.assign(static_cast<size_t>(3 * s.atoms()), 0.0);
  for (int64_t e = 0; e < g.edges(); ++e) {
    const double r = g.dist[static_cast<size_t>(e)];
    s.energy += lj.pair(r);  // V on each directed edge
    // -dE/dx: the receiver gains V'(r) vec / r, the source loses it.
    const double k = lj.slope(r) / r;
    for (int c = 0; c < 3; ++c) {
      const double f = k * g.vec[static_cast<size_t>(3 * e + c)];
      s.forces[static_cast<size_t>(3 * g.receiver[static_cast<size_t>(e)] + c)] += f;
      s.forces[static_cast<size_t>(3 * g.source[static_cast<size_t>(e)] + c)] -= f;
    }
  }
}

const LennardJones& LjMixture::pair(int32_t zi, int32_t zj) const {
  const auto type = [this](int32_t z) -> size_t {
    for (size_t t = 0; t < species.size(); ++t) {
      if (species[t] == z) return t;
    }
    throw_input("Lennard-Jones mixture: species {} is not one of its {} types", z, species.size());
  };
  return pairs[type(zi) * species.size() + type(zj)];
}

double LjMixture::max_cutoff() const {
  double c = 0.0;
  for (const LennardJones& p : pairs) c = std::max(c, p.cutoff);
  return c;
}

LjMixture kob_andersen_mixture(const LennardJones& aa) {
  LjMixture m;
  m.species = {18, 10};
  const auto pair = [&aa](double eps, double sigma) {
    LennardJones p = aa;
    p.epsilon = eps * aa.epsilon;
    p.sigma = sigma * aa.sigma;
    p.cutoff = 2.5 * p.sigma;
    return p;
  };
  const LennardJones ab = pair(1.5, 0.8);
  m.pairs = {pair(1.0, 1.0), ab, ab, pair(0.5, 0.88)};
  return m;
}

void label_lennard_jones(AtomStructure& s, const LjMixture& mix) {
  label_pairs(s, mix.max_cutoff(), [&](int32_t zi, int32_t zj) -> const LennardJones& { return mix.pair(zi, zj); });
}

LennardJones lj_potential(const LjSetOptions& o) {
  LennardJones lj;
  if (o.hydragnn) {
    lj.cutoff = 5.0;
    lj.shifted_force = false;
  }
  return lj;
}

void check_lj_options(const LjSetOptions& o) {
  if (o.species != 1 && o.species != 2) throw_input("LJ set: species {} (1: argon, 2: the Kob-Andersen mixture)", o.species);
  if (o.hydragnn && o.species != 1) throw_input("LJ set: HydraGNN's example has one species, not {}", o.species);
  if (o.min_cells < 1 || o.max_cells < o.min_cells || o.max_cells > 64) {
    throw_input("LJ set: cells per direction [{}, {}] must satisfy 1 <= min <= max <= 64", o.min_cells, o.max_cells);
  }
}

AtomStructure lj_structure(const LjSetOptions& o, int64_t i) {
  if (i < 0 || i >= o.structures) throw_input("LJ set: structure {} of {}", i, o.structures);
  check_lj_options(o);
  int64_t k = 0;  // draw counter
  const auto draw = [&] { return uniform(o.seed, i, k++); };
  int64_t n[3] = {3, 3, 3};
  double a = 3.8;
  if (!o.hydragnn) {
    // P(n) ~ 1 / n^2 over [min_cells, max_cells].
    double total = 0.0;
    for (int64_t m = o.min_cells; m <= o.max_cells; ++m) total += 1.0 / static_cast<double>(m * m);
    for (int64_t& m : n) {
      double u = draw() * total;
      m = o.min_cells;
      while (m < o.max_cells && (u -= 1.0 / static_cast<double>(m * m)) >= 0.0) ++m;
    }
    a *= 0.98 + 0.06 * draw();
  }
  AtomStructure s;
  s.cell.pbc = {true, true, true};
  for (int d = 0; d < 3; ++d) s.cell.lattice[static_cast<size_t>(4 * d)] = a * static_cast<double>(n[d]);
  for (int64_t x = 0; x < n[0]; ++x) {
    for (int64_t y = 0; y < n[1]; ++y) {
      for (int64_t z = 0; z < n[2]; ++z) {
        const int64_t site[3] = {x, y, z};
        for (int64_t c : site) s.pos.push_back((static_cast<double>(c) + 0.1 * (draw() - 0.5)) * a);
        s.species.push_back(o.hydragnn ? 1 : 18);
      }
    }
  }
  const LennardJones lj = lj_potential(o);
  if (o.species == 2) {
    for (int32_t& z : s.species) z = draw() < 0.2 ? 10 : 18;  // B with probability 0.2
    label_lennard_jones(s, kob_andersen_mixture(lj));
  } else if (o.hydragnn) {
    label_lennard_jones_hydragnn(s, lj, kHydraGnnLjNeighbours);
  } else {
    label_lennard_jones(s, lj);
  }
  return s;
}

}  // namespace weft
