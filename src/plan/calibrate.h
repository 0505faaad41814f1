// `weft calibrate`: measures this machine and describes it as a planner system. A "device"
// on a CPU machine is one process (one MPI rank) with its threads; under mpirun every rank
// measures at the same time, so the figures are each rank's share of the shared machine.
//
// Measured:
// - matrix-product rates by shape (square n = 32 .. 2048, best of several runs) through the cpu
//   backend's two fp32 libraries, OpenBLAS's sgemm and oneDNN's matmul: the faster on the
//   model-sized products is the system's fp32_kernel (what `weft train` then runs), its best
//   rate peak_flops_32, its rates the matmul_curve (fraction of that peak by FLOPs per call);
//   peak_flops_16 is oneDNN's native bf16 product (`--matmul fast`) where the CPU has one
//   (AVX512-BF16, AMX), else peak_flops_32;
// - memory bandwidth: a STREAM-style triad a = b + s c over arrays far larger than the caches
//   (bytes read + written per second), best of several runs;
// - kernel latency: the time of an OpenMP parallel loop over a few elements (fork/join);
// - between ranks (under mpirun with >= 2 ranks): ping-pong between ranks 0 and 1 over
//   MPI, latency = half the round trip of 8 bytes, bandwidth from the round trip of 16 MiB;
//   without MPI the link level is an estimate from the memory bandwidth, marked so;
// - codecs of the compressed collectives (plan/compression.h), one core each, as the runtime
//   runs them (comm/codec.h on the cpu backend): bf16, fp16, int8, int4, zfp:4/8/16 (the
//   family "zfp" takes zfp:8's) and zstd (its measured ratio into zstd_ratio), encode and
//   decode in bytes of fp32 input per second, into the system's [codecs]
//   (Calibration::system.codecs: codec name -> speeds).
#pragma once
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "plan/system.h"

namespace weft::plan {

struct CalibrationOptions {
  int threads = 0;        // 0: as set (OMP_NUM_THREADS or all cores)
  bool quick = false;     // smaller sizes, fewer repetitions (tests)
  // With >= 2 ranks the variation of the ranks' times between synchronisations is measured and
  // noted; true: also kept as [defaults] sync_jitter, which the planner prices the waits from.
  // Off by default: on the VM it was measured on, it priced a tensor-parallel layout's waits
  // 1.2-2x what training's traces showed, and made 2 of 3 sweeps' absolute error worse
  // (docs/planner.md, "Stop 60").
  bool sync_jitter = false;
  std::string name = "local";
};

struct Calibration {
  System system;
  std::vector<std::string> notes;  // one line per measurement, written as comments
  bool link_measured = false;
  // Load detection: the mean cores other processes kept busy while it measured (/proc/stat less
  // the ranks' own CPU time), the worst spread of a measurement's repeated samples (median over
  // best, minus 1), and a warning naming both when the machine was busy (other load or the
  // hypervisor's steal > 0.25 cores, or a spread > 100%; "" otherwise). Each measurement is the best of many short samples, and a
  // product size whose samples spread more than 25% is measured again, so that a competing
  // process that holds a core part of the time leaves the figures close to an idle machine's.
  double other_load = 0.0, spread = 0.0;
  std::string warning;
};

// `weft calibrate --check`: a few of a system file's figures measured again (the fp32 products
// at 256^3 and 512^3 through its fp32_kernel, the STREAM triad, the fork/join latency, SiLU's
// rate), each beside the file's with their ratio, and whether the file still holds (every
// ratio within [1/1.25, 1.25], the bandwidth within 1.35, the latency within a factor 2), with the machine's differences.
struct CheckRow {
  std::string name;
  double file = 0, now = 0;
  bool ok = true;
};
struct CalibrationCheck {
  std::vector<CheckRow> rows;
  std::vector<std::string> differences;  // plan/fingerprint.h
  double other_load = 0.0;
  bool holds() const;
};
CalibrationCheck check_calibration(const System& sys, int threads, Communicator& world);

// Runs the measurements on every rank of `world` (collective: every rank must call it).
Calibration calibrate(const CalibrationOptions& o, Communicator& world);

}  // namespace weft::plan
