#include "model/gnn/gnn_graph.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <numeric>

#include "core/error.h"

namespace weft {
namespace {

// CSR offsets of `keys` (each in [0, n)): offsets[k] = the count of keys below k.
std::vector<int32_t> offsets_of(const std::vector<int32_t>& keys, int64_t n) {
  std::vector<int32_t> off(static_cast<size_t>(n + 1), 0);
  for (int32_t k : keys) ++off[static_cast<size_t>(k) + 1];
  for (int64_t i = 0; i < n; ++i) off[static_cast<size_t>(i + 1)] += off[static_cast<size_t>(i)];
  return off;
}

// The positions 0..keys-1 ordered by key, stable (a counting sort).
std::vector<int32_t> stable_order(const std::vector<int32_t>& keys, const std::vector<int32_t>& offsets) {
  std::vector<int32_t> next(offsets.begin(), offsets.end() - 1), perm(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) perm[static_cast<size_t>(next[static_cast<size_t>(keys[i])]++)] = static_cast<int32_t>(i);
  return perm;
}

}  // namespace

std::vector<double> edge_vectors(const GraphBatch& b) {
  std::vector<double> v(static_cast<size_t>(3 * b.edges()));
  const auto& pos = b.pos();
  for (int64_t e = 0; e < b.edges(); ++e) {
    const auto s = static_cast<size_t>(b.source()[static_cast<size_t>(e)]), r = static_cast<size_t>(b.receiver()[static_cast<size_t>(e)]);
    for (size_t k = 0; k < 3; ++k) {
      v[3 * static_cast<size_t>(e) + k] =
          static_cast<double>(pos[3 * s + k]) + b.shift_vec()[3 * static_cast<size_t>(e) + k] - pos[3 * r + k];
    }
  }
  return v;
}

void schnet_features(double d, const GnnFields& f, float* rbf_row, float* cutoff) {
  const int G = f.num_gaussians;
  const double step = f.cutoff / (G - 1), coeff = -0.5 / (step * step);
  for (int k = 0; k < G; ++k) {
    const double x = d - step * k;
    // Below float's smallest normal the Gaussian is flushed to 0: subnormal operands slow every
    // product that reads them by an order of magnitude (x86's microcode assists) for values no
    // float sum can see (< 1.2e-38).
    const double v = std::exp(coeff * x * x);
    rbf_row[k] = v < std::numeric_limits<float>::min() ? 0.0f : static_cast<float>(v);
  }
  *cutoff = d < f.cutoff ? static_cast<float>(0.5 * (std::cos(std::numbers::pi * d / f.cutoff) + 1.0)) : 0.0f;
}

std::vector<float> pna_degree_scalers(const std::vector<int32_t>& recv_offsets, const GnnFields& f) {
  const size_t N = recv_offsets.empty() ? 0 : recv_offsets.size() - 1;
  std::vector<float> out(3 * N);
  for (size_t i = 0; i < N; ++i) {
    const double d = recv_offsets[i + 1] - recv_offsets[i];
    out[i] = static_cast<float>(std::log(d + 1.0) / f.pna_delta);
    out[N + i] = static_cast<float>(f.pna_delta / std::log(std::max(d, 1.0) + 1.0));
    out[2 * N + i] = static_cast<float>(d / f.pna_delta_lin);
  }
  return out;
}

GnnHostGraph build_host_graph(const GraphBatch& b, const GnnFields& f) {
  GnnHostGraph g;
  g.N = b.nodes(), g.E = b.edges(), g.G = b.graphs();
  g.species = b.species();
  g.source = b.source();
  g.receiver = b.receiver();
  g.recv_offsets = offsets_of(g.receiver, g.N);
  g.src_offsets = offsets_of(g.source, g.N);
  g.src_perm = stable_order(g.source, g.src_offsets);
  for (int32_t z : g.species) {
    if (z < 1 || z >= kGnnSpecies) throw_input("graph batch: atomic number {} is outside 1-{}", z, kGnnSpecies - 1);
  }
  g.species_offsets = offsets_of(g.species, kGnnSpecies);
  g.species_perm = stable_order(g.species, g.species_offsets);
  for (int64_t o : b.node_offsets()) g.graph_offsets.push_back(static_cast<int32_t>(o));
  for (int64_t k = 0; k < g.G; ++k) g.atoms.push_back(static_cast<float>(b.node_offsets()[static_cast<size_t>(k + 1)] - b.node_offsets()[static_cast<size_t>(k)]));

  const std::vector<double> vec = edge_vectors(b);
  std::vector<double> d(static_cast<size_t>(g.E));
  for (int64_t e = 0; e < g.E; ++e) {
    const double* v = vec.data() + 3 * e;
    d[static_cast<size_t>(e)] = std::sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
    if (!(d[static_cast<size_t>(e)] > 0.0)) {
      throw_input("graph batch: edge {} joins atoms {} and {} at distance 0 (overlapping atoms)", e,
                  g.source[static_cast<size_t>(e)], g.receiver[static_cast<size_t>(e)]);
    }
    g.dist.push_back(static_cast<float>(d[static_cast<size_t>(e)]));
    for (int k = 0; k < 3; ++k) g.unit.push_back(static_cast<float>(v[k] / d[static_cast<size_t>(e)]));
  }
  if (f.layer == GnnLayer::kSchnet || f.layer == GnnLayer::kPna) {  // PNA's edge features: the Gaussians
    g.rbf.resize(static_cast<size_t>(g.E * f.num_gaussians));
    g.cutoff.resize(static_cast<size_t>(g.E));
    // Independent per edge: threaded as the backend's pointwise ops are (the same bits).
#pragma omp parallel for schedule(static) if (g.E > 1024)
    for (int64_t e = 0; e < g.E; ++e) {
      schnet_features(d[static_cast<size_t>(e)], f, g.rbf.data() + e * f.num_gaussians, g.cutoff.data() + e);
    }
  } else {
    for (double v : d) g.dist2.push_back(static_cast<float>(v * v));
  }

  if (f.layer == GnnLayer::kPna) g.degree_scalers = pna_degree_scalers(g.recv_offsets, f);

  g.has_energy = b.has_energy(), g.has_forces = b.has_forces();
  if (g.has_energy) {
    for (int64_t k = 0; k < g.G; ++k) {
      const double per_atom = b.energy()[static_cast<size_t>(k)] / g.atoms[static_cast<size_t>(k)];
      g.energy.push_back(static_cast<float>((per_atom - f.energy_mean) / f.energy_std));
    }
  }
  if (g.has_forces) {
    for (float v : b.forces()) g.forces.push_back(static_cast<float>(v / f.force_scale));
  }
  return g;
}

}  // namespace weft
