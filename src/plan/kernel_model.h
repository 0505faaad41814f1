// The time of one kernel on one device, from its shape: the planner's compute model.
//
// Matrix products (m x k) @ (k x n), `batch` of them: a GPU library tiles the m x n output
// into tiles of tile_m x tile_n, one per streaming multiprocessor (compute unit) at a time,
// each tile walking the whole k dimension. Its time is the larger of
//   compute:  2 m n k batch / (peak x efficiency x tile fraction x waves x k-efficiency)
//   memory:   the operands and result once over the memory bandwidth (thin products)
// plus the fixed kernel latency, where
//   waves        = tiles / (ceil(tiles / units) x units): the last wave runs partly empty
//                  (wave quantisation; NVIDIA, "Matrix Multiplication Background User's
//                  Guide", sec. "Wave Quantization");
//   k-efficiency = k / (k + k_overhead): each tile's pipeline fill and epilogue cost as much
//                  as k_overhead more elements of k (small-k products, e.g. high tp or an
//                  attention head, run below peak);
//   alignment    = dimensions that are not multiples of `gemm_align` elements cannot use the
//                  tensor cores' vector loads (ibid., "Tensor Core Requirements").
// The library picks the candidate tile that finishes first (cuBLAS's heuristics), so small
// outputs run on small tiles at their lower fraction instead of leaving units idle.
// A device without `compute_units` (a CPU, `weft calibrate`) keeps the measured fraction-of-
// peak curve by FLOPs per call (or the constant efficiency): there is no tile to count.
//
// Fused attention (FlashAttention, Dao 2023): causal attention skips the masked half of the
// score blocks, so it runs half the non-causal FLOPs at the kernel's own fraction of peak
// (forward and backward measured separately; the backward does 2.5x the forward's FLOPs).
#pragma once
#include <cstdint>

#include "plan/gemm_table.h"
#include "plan/system.h"

namespace weft::plan {

struct GemmShape {
  double m = 0, n = 0, k = 0, batch = 1;
  GemmTrans trans = GemmTrans::kNN;  // the operand layout, for a measured GemmTable
  double flops() const { return 2 * m * n * k * batch; }
  double bytes(double e) const { return e * batch * (m * k + k * n + m * n); }
};

// Fraction of the full last wave's slots that `tiles` tiles fill on `units` compute units:
// tiles / (ceil(tiles / units) x units). 1 when tiles is a multiple of units.
double wave_fraction(double tiles, int64_t units);

// The measured curve's fraction of peak at `flops` per call (log-linear interpolation,
// clamped at its ends), or the constant efficiency without a curve.
double matmul_curve_fraction(const Device& d, double flops);

// Fraction of the device's peak one product reaches: per-shape on a device with compute units
// (the best candidate tile), else the measured curve or constant by FLOPs.
double gemm_fraction(const Device& d, const GemmShape& g);

// The roofline (Williams et al. 2009): max(flops / (peak x fraction), bytes / bandwidth) +
// kernel latency. gemm_time and predict.h's matmul_time are this with their fractions.
double roofline_time(const Device& d, Precision p, double flops, double bytes, double fraction);

// Seconds of one product (all `batch` of it) in elements of `e` bytes.
double gemm_time(const Device& d, Precision p, const GemmShape& g, double e);

// A measured curve of (x, y) points, x increasing, at x: interpolated in log x (y linearly, or in
// log y with log_y), clamped at its ends. c must not be empty.
double interpolate_curve(const std::vector<std::pair<double, double>>& c, double x, bool log_y);

// The bandwidth a memory-bound kernel moving `bytes` reaches: the measured memory_curve
// (log-log interpolation, clamped at its ends: arrays that stay in a CPU's caches stream
// faster than the triad over memory), or memory_bandwidth without one.
double memory_bandwidth_at(const Device& d, double bytes);

// Seconds of a memory-bound kernel moving `bytes` (read + written).
double memory_time(const Device& d, double bytes);
// An elementwise kernel of `bytes` that evaluates the named `function` on `elements`: the longer
// of its bytes and its elements at the device's rate for the function (none measured: its bytes).
double elementwise_time(const Device& d, double bytes, const std::string& function, double elements);

// Seconds of a fused causal attention kernel of `noncausal_flops` (4 b a s^2 d_head, the
// FLOPs Megatron's formula counts for the forward); backward = the 2.5x-FLOPs backward.
// causal false (a Vision Transformer's bidirectional attention): every score block is computed.
double flash_attention_time(const Device& d, Precision p, double noncausal_flops, bool backward, bool causal = true);

}  // namespace weft::plan
