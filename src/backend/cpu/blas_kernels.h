// Which of OpenBLAS's kernel sets the CPU backend's matrix products run, against the widest
// vector instructions this CPU offers. OpenBLAS (DYNAMIC_ARCH) picks its kernels from the CPU
// model it knows; on a model newer than the library (Debian 12's 0.3.21 on some recent Xeons) it
// falls back to its Prescott (SSE3) kernels, and every product runs several times below the
// machine's best with nothing said. OPENBLAS_CORETYPE picks the set by name.
#pragma once
#include <string>

namespace weft {

struct BlasKernels {
  std::string core;       // openblas_get_corename(): "SkylakeX", "Haswell", "Zen", "Prescott", ...
  std::string core_isa;   // the widest vector ISA of that kernel set: "avx512", "avx2", "avx", "sse"
  std::string cpu_isa;    // this CPU's widest of those
  std::string suggested;  // the OPENBLAS_CORETYPE for cpu_isa ("SkylakeX", "Haswell"; "" when none)
};
BlasKernels blas_kernels();

// One line when the kernels run narrower vectors than the CPU has (SSE or AVX kernels on an
// AVX2 or AVX-512 CPU; AVX2 kernels on an AVX-512 CPU when OPENBLAS_CORETYPE is unset), naming
// both and the OPENBLAS_CORETYPE to set; "" otherwise.
std::string blas_kernel_note();
// The same for given kernels and OPENBLAS_CORETYPE ("" when unset): what blas_kernel_note says
// on a machine with those.
std::string blas_kernel_note(const BlasKernels& k, const std::string& coretype_env);
// The widest vector ISA of one of OpenBLAS's x86-64 kernel sets ("sse" for the ones before AVX).
std::string blas_core_isa(const std::string& core);

}  // namespace weft
