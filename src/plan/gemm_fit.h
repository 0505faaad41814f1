// Calibrating a GPU's per-shape product model (plan/kernel_model.h) from a measured GEMM
// sweep: `weft bench --gemm-sweep FILE` (CUDA build) times cuBLASLt over shapes that exercise
// waves, small inner dimensions and thin products; `weft calibrate --gemm-sweep FILE --system
// BASE.toml --out OUT.toml` fits the device's matmul_efficiency and gemm_k_overhead to it.
//
// Sweep file (CSV; docs/planner.md): comment lines `# device: NAME` and `# date: YYYY-MM-DD`,
// a header `m,n,k,batch,dtype,seconds`, then one product per line: sizes (positive whole
// numbers), dtype bf16 | fp16 | fp32, the best time of one product in seconds.
#pragma once
#include <string>
#include <vector>

#include "plan/kernel_model.h"
#include "plan/system.h"

namespace weft::plan {

struct GemmSample {
  GemmShape shape;
  Precision precision = Precision::kBf16;
  double seconds = 0;
};

struct GemmSweep {
  std::string device, date;  // from the comment lines ("" when absent)
  std::vector<GemmSample> samples;
};

// The products `weft bench --gemm-sweep` times (batch 1): squares 512..16384; a layer's four
// products (QKV, projection, MLP up and down) for 2048 and 8192 tokens, hidden 1024, 4096 and
// 12288, tp 1 and 8 (waves and small inner dimensions); attention-head shapes with k = 64 and
// 128; thin products of 16 and 128 rows (the memory roof). Duplicates removed.
std::vector<GemmShape> gemm_sweep_shapes();

// Reads a sweep file. InputError naming the file, line and column for a missing file, a
// wrong header, a bad number or dtype, or no samples.
GemmSweep read_gemm_sweep(const std::string& path);
// The CSV text of a sweep (what `weft bench --gemm-sweep` writes).
std::string gemm_sweep_csv(const GemmSweep& s);

struct GemmFit {
  Device device;                // `base` with matmul_efficiency and gemm_k_overhead fitted
  std::vector<double> errors;   // per sample: predicted / measured - 1
  double mean_abs_error = 0, worst_abs_error = 0;
};

// Fits matmul_efficiency (0, 1] and gemm_k_overhead [0, 1024] of a device with compute units
// to the samples, minimising the mean squared log error of kernel_model's gemm_time.
// InputError when the device has no compute_units or there are no samples.
GemmFit fit_gemm_model(const Device& base, const std::vector<GemmSample>& samples);

}  // namespace weft::plan
