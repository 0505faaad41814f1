#include "plan/scale_model.h"

#include <cmath>
#include <mutex>
#include <unordered_map>

#include "plan/kernel_model.h"

namespace weft::plan {

namespace {

double integrate_expected_max(int64_t n) {
  // E[M_n] = integral of x n phi(x) Phi(x)^(n-1) dx. The density of the maximum lies within
  // [-8, 9] for every n up to 1e9 (its mode is near sqrt(2 ln n) < 6.5); Simpson's rule on
  // 4000 intervals is exact to ~1e-9 there.
  const double lo = -8, hi = 9;
  const int steps = 4000;
  const double dx = (hi - lo) / steps, nn = static_cast<double>(n);
  auto f = [&](double x) {
    const double phi = std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
    const double Phi = 0.5 * std::erfc(-x / std::sqrt(2.0));
    if (Phi <= 0) return 0.0;
    return x * nn * phi * std::exp((nn - 1) * std::log(Phi));
  };
  double sum = f(lo) + f(hi);
  for (int i = 1; i < steps; ++i) sum += (i % 2 ? 4 : 2) * f(lo + i * dx);
  return sum * dx / 3;
}

}  // namespace

double expected_max_normal(int64_t n) {
  if (n <= 1) return 0;
  static std::mutex mu;
  static std::unordered_map<int64_t, double> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(n);
  if (it != cache.end()) return it->second;
  const double v = integrate_expected_max(n);
  cache.emplace(n, v);
  return v;
}

double straggler_time(double busy, double jitter, int64_t devices) {
  if (jitter <= 0 || busy <= 0) return 0;
  return busy * jitter * expected_max_normal(devices);
}

double sync_wait(const std::vector<std::pair<double, double>>& curve, double segment, int64_t devices) {
  if (curve.empty() || segment <= 0 || devices <= 1) return 0;
  return interpolate_curve(curve, segment, false) * segment * expected_max_normal(devices);
}

std::vector<std::pair<double, double>> non_increasing_fit(const std::vector<std::pair<double, double>>& points,
                                                          const std::vector<double>& weights) {
  struct Block {
    double sum = 0, weight = 0;
    size_t count = 0;
    double value() const { return sum / weight; }
  };
  std::vector<Block> blocks;
  for (size_t i = 0; i < points.size(); ++i) {
    const double w = i < weights.size() && weights[i] > 0 ? weights[i] : 1.0;
    blocks.push_back({points[i].second * w, w, 1});
    while (blocks.size() > 1 && blocks[blocks.size() - 2].value() < blocks.back().value()) {
      const Block b = blocks.back();
      blocks.pop_back();
      blocks.back().sum += b.sum;
      blocks.back().weight += b.weight;
      blocks.back().count += b.count;
    }
  }
  std::vector<std::pair<double, double>> out;
  size_t i = 0;
  for (const Block& b : blocks) {
    for (size_t k = 0; k < b.count; ++k, ++i) out.emplace_back(points[i].first, b.value());
  }
  return out;
}

}  // namespace weft::plan
