#include "plan/kernel_model.h"

#include <algorithm>
#include <cmath>

namespace weft::plan {

double interpolate_curve(const std::vector<std::pair<double, double>>& c, double x, bool log_y) {
  if (x <= c.front().first) return c.front().second;
  if (x >= c.back().first) return c.back().second;
  size_t i = 1;
  while (x > c[i].first) ++i;
  const double w = (std::log(x) - std::log(c[i - 1].first)) / (std::log(c[i].first) - std::log(c[i - 1].first));
  if (!log_y) return c[i - 1].second + w * (c[i].second - c[i - 1].second);
  return std::exp(std::log(c[i - 1].second) + w * (std::log(c[i].second) - std::log(c[i - 1].second)));
}

double matmul_curve_fraction(const Device& d, double flops) {
  return d.matmul_curve.empty() ? d.matmul_efficiency : interpolate_curve(d.matmul_curve, flops, false);
}

namespace {

bool aligned(double v, int64_t align) {
  if (align <= 1) return true;
  return std::fmod(v, static_cast<double>(align)) == 0;
}

// Fraction of peak of one tile shape on this product: the tile's own fraction x the filled
// share of its waves; both orientations of the tile are tried (the library transposes).
double tile_fraction(const Device& d, const GemmTile& t, const GemmShape& g) {
  auto waves = [&](double tm, double tn) {
    const double tiles = std::ceil(g.m / tm) * std::ceil(g.n / tn) * g.batch;
    // Edge tiles that are mostly padding do work for the padding: the useful share of the
    // tiled output (m n over the tiled area) scales the rate as well.
    const double useful = (g.m * g.n) / (std::ceil(g.m / tm) * tm * std::ceil(g.n / tn) * tn);
    return wave_fraction(tiles, d.compute_units) * useful;
  };
  return t.fraction * std::max(waves(t.m, t.n), waves(t.n, t.m));
}

}  // namespace

double wave_fraction(double tiles, int64_t units) {
  if (tiles <= 0 || units <= 0) return 1.0;
  const double u = static_cast<double>(units);
  return tiles / (std::ceil(tiles / u) * u);
}

double gemm_fraction(const Device& d, const GemmShape& g) {
  // The table's own rate at this shape, as a fraction of the fp32 peak (a 16-bit product on a
  // native bf16 CPU: the fp32 table's shape at the 16-bit peak). A table measured while another
  // process held a core is not kept (`weft calibrate` drops it and the square curve prices).
  if (!d.gemm_table.empty() && d.peak_flops_32 > 0) return d.gemm_table.rate(g.trans, g.m, g.n, g.k) / d.peak_flops_32;
  if (d.compute_units <= 0 || d.gemm_tiles.empty()) return matmul_curve_fraction(d, g.flops());
  double best = 0;
  for (const GemmTile& t : d.gemm_tiles) best = std::max(best, tile_fraction(d, t, g));
  const double k_eff = g.k / (g.k + d.gemm_k_overhead);
  const bool ok = aligned(g.m, d.gemm_align) && aligned(g.n, d.gemm_align) && aligned(g.k, d.gemm_align);
  return d.matmul_efficiency * best * k_eff * (ok ? 1.0 : d.gemm_misaligned_fraction);
}

double roofline_time(const Device& d, Precision p, double flops, double bytes, double fraction) {
  return std::max(flops / (d.peak_flops(p) * fraction), bytes / d.memory_bandwidth) + d.kernel_latency;
}

double gemm_time(const Device& d, Precision p, const GemmShape& g, double e) {
  if (g.flops() <= 0) return 0;
  return roofline_time(d, p, g.flops(), g.bytes(e), gemm_fraction(d, g));
}

double memory_bandwidth_at(const Device& d, double bytes) {
  return d.memory_curve.empty() ? d.memory_bandwidth : interpolate_curve(d.memory_curve, bytes, true);
}

double memory_time(const Device& d, double bytes) {
  if (bytes <= 0) return 0;
  return bytes / (memory_bandwidth_at(d, bytes) * d.memory_efficiency) + d.kernel_latency;
}

double elementwise_time(const Device& d, double bytes, const std::string& function, double elements) {
  const double t = memory_time(d, bytes);
  const auto it = function.empty() ? d.function_rates.end() : d.function_rates.find(function);
  if (elements <= 0 || it == d.function_rates.end()) return t;
  return std::max(t, elements / it->second + d.kernel_latency);
}

double flash_attention_time(const Device& d, Precision p, double noncausal_flops, bool backward, bool causal) {
  const double factor = backward ? 2.5 : 1.0;
  if (d.attention_efficiency <= 0) {
    // No measured attention kernel (a CPU): the non-causal FLOPs at the product curve.
    return factor * (noncausal_flops / (d.peak_flops(p) * matmul_curve_fraction(d, noncausal_flops)) + d.kernel_latency);
  }
  const double frac = backward ? d.attention_bwd_efficiency : d.attention_efficiency;
  // Causal: the masked half of the score blocks is skipped; bidirectional: every block runs.
  return (causal ? 0.5 : 1.0) * factor * noncausal_flops / (d.peak_flops(p) * frac) + d.kernel_latency;
}

}  // namespace weft::plan
