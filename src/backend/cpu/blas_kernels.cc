#include "backend/cpu/blas_kernels.h"

#include <cblas.h>
#include <fmt/format.h>

#include <cstdlib>
#include <string_view>

namespace weft {

namespace {

int isa_rank(std::string_view isa) {
  if (isa == "avx512") return 3;
  if (isa == "avx2") return 2;
  if (isa == "avx") return 1;
  return 0;
}

std::string cpu_isa() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return "avx512";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "avx2";
  if (__builtin_cpu_supports("avx")) return "avx";
  return "sse";
#else
  return "";
#endif
}

}  // namespace

BlasKernels blas_kernels() {
  BlasKernels k;
  const char* name = openblas_get_corename();
  k.core = name != nullptr ? name : "";
  k.core_isa = blas_core_isa(k.core);
  k.cpu_isa = cpu_isa();
  k.suggested = k.cpu_isa == "avx512" ? "SkylakeX" : k.cpu_isa == "avx2" ? "Haswell" : "";
  return k;
}

// OpenBLAS 0.3.21's x86-64 kernel sets (driver/others/dynamic.c) by their widest vectors.
std::string blas_core_isa(const std::string& core) {
  for (std::string_view c : {"SkylakeX", "Cooperlake", "SapphireRapids"}) {
    if (core == c) return "avx512";
  }
  for (std::string_view c : {"Haswell", "Zen"}) {
    if (core == c) return "avx2";
  }
  for (std::string_view c : {"Sandybridge", "Bulldozer", "Piledriver", "Steamroller", "Excavator"}) {
    if (core == c) return "avx";
  }
  return "sse";  // Prescott, Core2, Penryn, Dunnington, Nehalem, Atom, Opteron, Barcelona, ...
}

std::string blas_kernel_note() {
  const char* set = std::getenv("OPENBLAS_CORETYPE");
  return blas_kernel_note(blas_kernels(), set != nullptr ? set : "");
}

std::string blas_kernel_note(const BlasKernels& k, const std::string& coretype_env) {
  if (k.cpu_isa.empty() || k.suggested.empty() || isa_rank(k.core_isa) >= isa_rank(k.cpu_isa)) return {};
  const bool chosen = !coretype_env.empty();
  // AVX2 kernels on an AVX-512 CPU are a choice OpenBLAS makes on purpose for some models, or
  // the caller's: said only when nobody chose them.
  if (isa_rank(k.core_isa) >= 2 && chosen) return {};
  return fmt::format("OpenBLAS runs its {} kernels ({}) on a CPU with {}{}: matrix products run below this "
                     "machine's best; OPENBLAS_CORETYPE={} picks the {} set",
                     k.core, k.core_isa, k.cpu_isa, chosen ? fmt::format(" (OPENBLAS_CORETYPE={})", coretype_env) : std::string(),
                     k.suggested, k.cpu_isa);
}

}  // namespace weft
