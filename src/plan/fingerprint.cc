#include "plan/fingerprint.h"

#include <cblas.h>
#include <fmt/format.h>

#include <fstream>
#include <thread>

#include "backend/cpu/blas_kernels.h"
#include "backend/cpu/onednn_gemm.h"

namespace weft::plan {

namespace {

std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon == std::string::npos) break;
      size_t b = line.find_first_not_of(" \t", colon + 1);
      return b == std::string::npos ? std::string() : line.substr(b);
    }
  }
  return "unknown CPU";
}

// "OpenBLAS 0.3.21 ..." -> the version word of openblas_get_config().
std::string openblas_version() {
  const char* c = openblas_get_config();
  std::string s = c != nullptr ? c : "";
  const size_t sp = s.find(' ');
  if (s.rfind("OpenBLAS ", 0) == 0 && sp != std::string::npos) {
    const size_t end = s.find(' ', sp + 1);
    return s.substr(sp + 1, end == std::string::npos ? std::string::npos : end - sp - 1);
  }
  return "?";
}

}  // namespace

MachineFingerprint this_machine(int ranks, int threads) {
  MachineFingerprint m;
  m.cpu = cpu_model_name();
  m.hardware_threads = static_cast<int>(std::thread::hardware_concurrency());
  m.ranks = ranks;
  m.threads = threads;
  m.blas = fmt::format("OpenBLAS {} {}", openblas_version(), blas_kernels().core);
  m.onednn = fmt::format("oneDNN {} {}", OnednnGemm::version(), OnednnGemm::cpu_isa());
  return m;
}

std::vector<std::string> fingerprint_differences(const MachineFingerprint& was, const MachineFingerprint& now,
                                                 bool layout) {
  std::vector<std::string> d;
  if (was.empty()) return d;
  if (was.cpu != now.cpu) d.push_back(fmt::format("CPU '{}' -> '{}'", was.cpu, now.cpu));
  if (was.hardware_threads != now.hardware_threads) {
    d.push_back(fmt::format("hardware threads {} -> {}", was.hardware_threads, now.hardware_threads));
  }
  if (layout && was.ranks != now.ranks) d.push_back(fmt::format("ranks {} -> {}", was.ranks, now.ranks));
  if (layout && was.threads != now.threads) d.push_back(fmt::format("threads per rank {} -> {}", was.threads, now.threads));
  if (was.blas != now.blas) d.push_back(fmt::format("{} -> {}", was.blas, now.blas));
  if (was.onednn != now.onednn) d.push_back(fmt::format("{} -> {}", was.onednn, now.onednn));
  return d;
}

}  // namespace weft::plan
