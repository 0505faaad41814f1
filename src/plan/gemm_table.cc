#include "plan/gemm_table.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace weft::plan {

namespace {

// The grid cell holding x (log scale) and the weight of its upper end, clamped to the grid.
std::pair<size_t, double> locate(const std::vector<double>& axis, double x) {
  if (axis.size() == 1 || x <= axis.front()) return {0, 0.0};
  if (x >= axis.back()) return {axis.size() - 2, 1.0};
  size_t i = 0;
  while (i + 2 < axis.size() && x > axis[i + 1]) ++i;
  return {i, (std::log(x) - std::log(axis[i])) / (std::log(axis[i + 1]) - std::log(axis[i]))};
}

}  // namespace

double GemmTable::rate(GemmTrans t, double mm, double nn, double kk) const {
  const std::vector<double>& r = rates[static_cast<size_t>(t)].empty() ? rates[0] : rates[static_cast<size_t>(t)];
  const auto [i, wi] = locate(m, mm);
  const auto [j, wj] = locate(n, nn);
  const auto [l, wl] = locate(k, kk);
  const size_t N = n.size(), K = k.size();
  auto at = [&](size_t a, size_t b, size_t c) {
    a = std::min(a, m.size() - 1), b = std::min(b, N - 1), c = std::min(c, K - 1);
    return std::log(r[(a * N + b) * K + c]);
  };
  double v = 0;
  for (int da = 0; da < 2; ++da) {
    for (int db = 0; db < 2; ++db) {
      for (int dc = 0; dc < 2; ++dc) {
        const double w = (da ? wi : 1 - wi) * (db ? wj : 1 - wj) * (dc ? wl : 1 - wl);
        if (w > 0) v += w * at(i + da, j + db, l + dc);
      }
    }
  }
  return std::exp(v);
}

void GemmTable::validate(const std::string& where) const {
  if (empty()) return;
  for (const auto* axis : {&m, &n, &k}) {
    if (axis->empty()) throw_input("{}: gemm_grid axes must not be empty", where);
    for (size_t i = 0; i < axis->size(); ++i) {
      if (!((*axis)[i] > 0) || (i > 0 && !((*axis)[i] > (*axis)[i - 1]))) {
        throw_input("{}: gemm_grid sizes must be positive and increasing", where);
      }
    }
  }
  const size_t cells = m.size() * n.size() * k.size();
  for (size_t t = 0; t < rates.size(); ++t) {
    if (rates[t].empty() && t > 0) continue;
    if (rates[t].size() != cells) {
      throw_input("{}: gemm_rates_{} has {} values, the grid {} x {} x {} needs {}", where, kGemmTransNames[t],
                  rates[t].size(), m.size(), n.size(), k.size(), cells);
    }
    for (double v : rates[t]) {
      if (!(v > 0) || !std::isfinite(v)) throw_input("{}: gemm_rates_{} values must be positive FLOP/s, got {}", where, kGemmTransNames[t], v);
    }
  }
}

}  // namespace weft::plan
