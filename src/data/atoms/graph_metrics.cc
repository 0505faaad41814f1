#include "data/atoms/graph_metrics.h"

#include <cmath>

#include "core/error.h"

namespace weft {

SpeciesEnergyFit SpeciesEnergyFit::fit(const std::vector<GraphSample>& train) {
  // The normal equations A^T A e = A^T E over the species present, A[k][s] = atoms of species s
  // in structure k; solved by Gaussian elimination with partial pivoting (a handful of species).
  std::map<int32_t, size_t> col;
  for (const GraphSample& g : train) {
    if (!g.s.has_energy) continue;
    for (int32_t z : g.s.species) col.emplace(z, 0);
  }
  if (col.empty()) throw_input("a per-species energy fit needs structures with energies; none has one");
  size_t k = 0;
  for (auto& [z, c] : col) c = k++;
  const size_t S = col.size();
  std::vector<double> ata(S * S, 0.0), atb(S, 0.0), counts(S);
  for (const GraphSample& g : train) {
    if (!g.s.has_energy) continue;
    std::fill(counts.begin(), counts.end(), 0.0);
    for (int32_t z : g.s.species) counts[col.at(z)] += 1.0;
    for (size_t a = 0; a < S; ++a) {
      atb[a] += counts[a] * g.s.energy;
      for (size_t b = 0; b < S; ++b) ata[a * S + b] += counts[a] * counts[b];
    }
  }
  for (size_t p = 0; p < S; ++p) {
    size_t best = p;
    for (size_t r = p + 1; r < S; ++r) {
      if (std::abs(ata[r * S + p]) > std::abs(ata[best * S + p])) best = r;
    }
    for (size_t c = 0; c < S; ++c) std::swap(ata[p * S + c], ata[best * S + c]);
    std::swap(atb[p], atb[best]);
    const double piv = ata[p * S + p];
    // Collinear compositions (every structure with the same ratio): the later species take 0.
    if (std::abs(piv) < 1e-12) continue;
    for (size_t r = p + 1; r < S; ++r) {
      const double f = ata[r * S + p] / piv;
      for (size_t c = p; c < S; ++c) ata[r * S + c] -= f * ata[p * S + c];
      atb[r] -= f * atb[p];
    }
  }
  std::vector<double> e(S, 0.0);
  for (size_t p = S; p-- > 0;) {
    const double piv = ata[p * S + p];
    if (std::abs(piv) < 1e-12) continue;
    double v = atb[p];
    for (size_t c = p + 1; c < S; ++c) v -= ata[p * S + c] * e[c];
    e[p] = v / piv;
  }
  SpeciesEnergyFit out;
  for (const auto& [z, c] : col) out.per_species[z] = e[c];
  return out;
}

double SpeciesEnergyFit::predict(const AtomStructure& s) const {
  double e = 0.0;
  for (int32_t z : s.species) {
    const auto it = per_species.find(z);
    if (it != per_species.end()) e += it->second;
  }
  return e;
}

void GraphErrors::add(const AtomStructure& s, double energy, const float* forces) {
  const double n = static_cast<double>(s.atoms());
  if (s.has_energy) {
    const double d = (energy - s.energy) / n;
    energy_abs += std::abs(d), energy_sq += d * d;
    ++structures;
  }
  atoms += s.atoms();
  if (forces != nullptr && s.has_forces()) {
    for (size_t i = 0; i < s.forces.size(); ++i) {
      const double d = static_cast<double>(forces[i]) - s.forces[i];
      force_abs += std::abs(d), force_sq += d * d;
    }
    components += static_cast<int64_t>(s.forces.size());
  }
}

double GraphErrors::energy_rmse() const {
  return structures ? std::sqrt(energy_sq / static_cast<double>(structures)) : 0.0;
}
double GraphErrors::force_rmse() const {
  return components ? std::sqrt(force_sq / static_cast<double>(components)) : 0.0;
}

}  // namespace weft
