#include "tune/shapley.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <optional>

#include "core/error.h"

namespace weft::tune {
namespace {

// K, after checking the shapes of the points and the background.
int check_shapes(const std::vector<std::vector<double>>& points, const std::vector<std::vector<double>>& background) {
  if (points.empty()) throw_input("shapley: no points to explain");
  if (background.empty()) throw_input("shapley: no background rows");
  const size_t k = points[0].size();
  if (k < 1) throw_input("shapley: points have no features");
  if (k > static_cast<size_t>(kMaxShapleyFeatures))
    throw_input("shapley: K = {} features is more than the {} that exact enumeration supports (2^{} = {} coalitions "
                "x {} background rows x {} points model calls); explain fewer knobs",
                k, kMaxShapleyFeatures, k, uint64_t{1} << std::min<size_t>(k, 63), background.size(), points.size());
  for (size_t i = 0; i < points.size(); ++i) {
    if (points[i].size() != k) throw_input("shapley: point {} has {} features, point 0 has {}", i, points[i].size(), k);
  }
  for (size_t i = 0; i < background.size(); ++i) {
    if (background[i].size() != k)
      throw_input("shapley: background row {} has {} features, the points have {}", i, background[i].size(), k);
  }
  return static_cast<int>(k);
}

void check_validity(const Validity& valid, const std::vector<std::vector<double>>& points,
                    const std::vector<std::vector<double>>& background) {
  if (!valid) return;
  for (size_t i = 0; i < points.size(); ++i) {
    if (!valid(points[i])) throw_input("shapley: point {} is not a valid configuration", i);
  }
  for (size_t i = 0; i < background.size(); ++i) {
    if (!valid(background[i])) throw_input("shapley: background row {} is not a valid configuration", i);
  }
}

// v(S) for one coalition: the mean of f over the valid hybrids (x on S, b elsewhere); none
// when no background row gives a valid one.
std::optional<double> coalition_value(const Model& f, const Validity& valid, const std::vector<double>& x,
                                      const std::vector<std::vector<double>>& background, uint32_t mask) {
  std::vector<double> z(x.size());
  double sum = 0;
  int n = 0;
  for (const std::vector<double>& b : background) {
    for (size_t j = 0; j < x.size(); ++j) z[j] = (mask >> j) & 1u ? x[j] : b[j];
    if (valid && !valid(z)) continue;
    sum += f(z);
    ++n;
  }
  if (n == 0) return std::nullopt;
  return sum / n;
}

// v(S) for every coalition S (bit j of the index: feature j in S), the ones without a valid
// hybrid filled from their one-larger extensions (see shapley.h). Masks are visited from the
// full coalition down, so every extension S | (1 << j) > S is final when S is filled.
std::vector<double> coalition_values(const Model& f, const Validity& valid, const std::vector<double>& x,
                                     const std::vector<std::vector<double>>& background) {
  const int k = static_cast<int>(x.size());
  const uint32_t full = (1u << k) - 1;
  std::vector<double> v(size_t{full} + 1);
  v[full] = f(x);  // every hybrid of the full coalition is x
  for (uint32_t mask = full; mask-- > 0;) {
    if (const std::optional<double> m = coalition_value(f, valid, x, background, mask)) {
      v[mask] = *m;
      continue;
    }
    // The full coalition is filled, so a mask here misses at least one feature.
    double sum = 0;
    int n = 0;
    for (int j = 0; j < k; ++j) {
      if (!((mask >> j) & 1u)) {
        sum += v[mask | (1u << j)];
        ++n;
      }
    }
    v[mask] = sum / n;
  }
  return v;
}

// phi_i = sum over S without i of w(|S|) (v(S u {i}) - v(S)), w(s) = s! (K - s - 1)! / K!
// = 1 / (K * C(K - 1, s)).
std::vector<double> shapley_from_values(const std::vector<double>& v, int k) {
  std::vector<double> w(static_cast<size_t>(k));
  double binom = 1;  // C(K - 1, s)
  for (int s = 0; s < k; ++s) {
    w[static_cast<size_t>(s)] = 1.0 / (k * binom);
    binom = binom * (k - 1 - s) / (s + 1);
  }
  std::vector<double> phi(static_cast<size_t>(k), 0.0);
  const uint32_t n_masks = 1u << k;
  for (uint32_t mask = 0; mask < n_masks; ++mask) {
    const int size = std::popcount(mask);
    for (int i = 0; i < k; ++i) {
      if ((mask >> i) & 1u) continue;
      phi[static_cast<size_t>(i)] += w[static_cast<size_t>(size)] * (v[mask | (1u << i)] - v[mask]);
    }
  }
  return phi;
}

}  // namespace

ShapleyValues shapley_values(const Model& f, const std::vector<std::vector<double>>& points,
                             const std::vector<std::vector<double>>& background, const Validity& valid) {
  const int k = check_shapes(points, background);
  check_validity(valid, points, background);
  ShapleyValues out;
  for (const std::vector<double>& b : background) out.base += f(b);
  out.base /= static_cast<double>(background.size());
  for (const std::vector<double>& x : points) {
    const std::vector<double> v = coalition_values(f, valid, x, background);
    out.phi.push_back(shapley_from_values(v, k));
    out.value.push_back(v.back());
  }
  return out;
}

std::vector<FeatureImportance> rank_by_mean_abs(const ShapleyValues& s) {
  if (s.phi.empty()) throw_input("shapley: no explained points to rank features by");
  const size_t k = s.phi[0].size();
  std::vector<FeatureImportance> out(k);
  for (size_t j = 0; j < k; ++j) {
    out[j].feature = static_cast<int>(j);
    for (const std::vector<double>& p : s.phi) out[j].mean_abs_phi += std::abs(p[j]);
    out[j].mean_abs_phi /= static_cast<double>(s.phi.size());
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const FeatureImportance& a, const FeatureImportance& b) { return a.mean_abs_phi > b.mean_abs_phi; });
  return out;
}

}  // namespace weft::tune
