// The matrix products of the GPU backend, behind one class: cuBLAS (strict fp32 SGEMM, the
// reference path) and cuBLASLt (bf16 and fp32 products with BIAS / GELU_AUX_BIAS / DGELU
// epilogues) on CUDA; hipBLAS and hipBLASLt under the same calls in a HIP build (WEFT_HIP).
// The vendor names appear only in gpu_blas.cc; callers pass row-major shapes and weft's own
// enums. hipBLAS/hipBLASLt are not packaged for Debian 12, so the HIP side of gpu_blas.cc is
// compiled only on a machine with ROCm 6 (docs/cuda.md, "The HIP path").
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "backend/cuda/gpu_runtime.h"

namespace weft::gpu {

enum class MatType { kF32, kBf16 };
enum class BlasEpilogue { kNone, kBias, kGeluAuxBias, kDGelu };
const char* epilogue_name(BlasEpilogue ep);  // "none", "bias", "gelu_aux_bias", "dgelu"

class Blas {
 public:
  // The cuBLASLt workspace the owner hands in (Hopper wants 32 MiB).
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;

  // Handles bound to `stream`; SGEMM in strict fp32 (no TF32). The Lt products use
  // `workspace` (workspace_bytes of device memory, 256-byte aligned), which the owner
  // allocates (the backend: through its device_alloc, counted as workspace) and keeps alive
  // and unused by anything else for the Blas's lifetime.
  Blas(Stream stream, void* workspace, size_t workspace_bytes);
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;

  // Lets the fp32 SGEMMs use TF32 tensor cores (NVIDIA). MI250X has no TF32: on HIP the
  // products stay fp32 and asking for TF32 logs that once.
  void set_tf32(bool on);

  // Row-major fp32 product, strided-batched: C_i = alpha op(A_i) op(B_i) + beta C_i.
  void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, int64_t sa,
             const float* B, int64_t ldb, int64_t sb, float beta, float* C, int64_t ldc, int64_t sc, int64_t batch);

  // Row-major Lt product C = alpha op(A) op(B) + beta C with A, B of type `ab` (bf16, or fp32:
  // strict fp32 accumulation, no TF32) and C of type `c`, with the epilogue `ep` (bias: N-long
  // vector; aux: the GELU input, leading dimension ldaux). Returns false (nothing enqueued)
  // when the library has no algorithm for this epilogue and shape, so that the caller can run
  // separate kernels; a plain product without an algorithm is an error.
  bool lt_matmul(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const void* A, int64_t lda,
                 const void* B, int64_t ldb, float beta, void* C, int64_t ldc, MatType c, BlasEpilogue ep,
                 const void* bias, const void* aux, int64_t ldaux, MatType ab = MatType::kBf16);

 private:
  struct State;
  std::unique_ptr<State> st_;
};

}  // namespace weft::gpu
