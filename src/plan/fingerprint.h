// The machine a system file was calibrated on (issue 35): what sets its figures besides the
// load of the moment: the CPU, its hardware threads, the ranks and threads per rank measured, and
// the product libraries with their kernel sets (OpenBLAS picks its kernels from the CPU model and
// OPENBLAS_CORETYPE; oneDNN from the ISA). `weft calibrate` writes it as the system file's
// [machine]; `weft train` and `weft plan` compare it with the machine they run on and say what
// differs, since a prediction made from another machine's figures does not hold here.
#pragma once
#include <string>
#include <vector>

namespace weft::plan {

struct MachineFingerprint {
  std::string cpu;           // /proc/cpuinfo's model name
  int hardware_threads = 0;  // what the operating system offers
  int ranks = 0;             // processes measured at once (each is a device)
  int threads = 0;           // threads per rank
  std::string blas;          // "OpenBLAS <version> <kernel set>"
  std::string onednn;        // "oneDNN <version> <isa>"
  // How the calibration went: the mean cores other processes used while it measured, and the
  // worst spread of its repeated samples (median over best, minus 1) after any re-measuring.
  double other_load = 0.0, spread = 0.0;
  bool empty() const { return cpu.empty() && hardware_threads == 0; }
};

// This machine, as a run of `ranks` processes of `threads` threads each would use it.
MachineFingerprint this_machine(int ranks, int threads);

// What differs between the machine a file was calibrated on and `now`, one phrase each
// ("threads per rank 2 -> 1", "OpenBLAS kernels Haswell -> Prescott"); with `layout` false the
// ranks and threads are left out (weft plan prices layouts of any size). Empty: the same
// machine, or a file without [machine].
std::vector<std::string> fingerprint_differences(const MachineFingerprint& calibrated, const MachineFingerprint& now,
                                                 bool layout = true);

}  // namespace weft::plan
