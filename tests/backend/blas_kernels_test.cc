// The note on OpenBLAS's kernel set (backend/cpu/blas_kernels.h): said when the kernels run
// narrower vectors than the CPU has, with the OPENBLAS_CORETYPE that picks the wider set; silent
// when they match, and for AVX2 kernels on an AVX-512 CPU that the caller chose.
#include "backend/cpu/blas_kernels.h"

#include <gtest/gtest.h>

namespace weft {
namespace {

BlasKernels on(const std::string& core, const std::string& cpu) {
  return {core, blas_core_isa(core), cpu, cpu == "avx512" ? "SkylakeX" : cpu == "avx2" ? "Haswell" : ""};
}

TEST(BlasKernels, CoreSetsByTheirWidestVectors) {
  EXPECT_EQ(blas_core_isa("Prescott"), "sse");
  EXPECT_EQ(blas_core_isa("Nehalem"), "sse");
  EXPECT_EQ(blas_core_isa("Sandybridge"), "avx");
  EXPECT_EQ(blas_core_isa("Haswell"), "avx2");
  EXPECT_EQ(blas_core_isa("Zen"), "avx2");
  EXPECT_EQ(blas_core_isa("SkylakeX"), "avx512");
  EXPECT_EQ(blas_core_isa("Cooperlake"), "avx512");
}

TEST(BlasKernels, NoteNamesTheNarrowKernelsAndTheCoreTypeToSet) {
  // Debian 12's OpenBLAS on a newer Xeon: its SSE3 kernels on an AVX-512 CPU, chosen or not.
  const std::string n = blas_kernel_note(on("Prescott", "avx512"), "");
  EXPECT_NE(n.find("Prescott kernels (sse) on a CPU with avx512"), std::string::npos) << n;
  EXPECT_NE(n.find("OPENBLAS_CORETYPE=SkylakeX"), std::string::npos) << n;
  EXPECT_NE(blas_kernel_note(on("Prescott", "avx512"), "Prescott").find("(OPENBLAS_CORETYPE=Prescott)"),
            std::string::npos);
  EXPECT_NE(blas_kernel_note(on("Sandybridge", "avx2"), "").find("OPENBLAS_CORETYPE=Haswell"), std::string::npos);
  // AVX2 kernels on an AVX-512 CPU: said when nobody chose them, silent when the caller did.
  EXPECT_NE(blas_kernel_note(on("Zen", "avx512"), "").find("Zen kernels (avx2)"), std::string::npos);
  EXPECT_EQ(blas_kernel_note(on("Haswell", "avx512"), "Haswell"), "");
}

TEST(BlasKernels, SilentWhenTheKernelsMatchTheCpu) {
  EXPECT_EQ(blas_kernel_note(on("SkylakeX", "avx512"), ""), "");
  EXPECT_EQ(blas_kernel_note(on("Haswell", "avx2"), ""), "");
  EXPECT_EQ(blas_kernel_note(on("Prescott", "sse"), ""), "");  // nothing wider to pick
  EXPECT_EQ(blas_kernel_note(on("Prescott", ""), ""), "");     // not an x86 CPU
  // This machine: the note is empty exactly when the kernels are as wide as the CPU.
  const BlasKernels here = blas_kernels();
  EXPECT_FALSE(here.core.empty());
  if (here.core_isa == here.cpu_isa) EXPECT_EQ(blas_kernel_note(here, ""), "");
}

}  // namespace
}  // namespace weft
