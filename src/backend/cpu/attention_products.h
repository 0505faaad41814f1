// The fp32 products inside the CPU backend's attention (the scores, the weighted sums and their
// gradients: small products, one (sample, head) block per OpenMP thread, 16-bit operands widened
// first): OpenBLAS's sgemm, or with [precision] fp32_kernel = "onednn" oneDNN's dnnl_sgemm, which
// is stateless and safe to call from every thread at once (another summation order, within the
// fp32 parity rule). The library follows the run's fp32 kernel, so that a machine whose OpenBLAS
// runs a kernel set below the CPU's (docs/precision.md) does not keep it for attention.
#pragma once
#include <cstdint>

namespace weft::cpu {

enum class AttentionGemm { kOpenblas, kOnednn };

// As cblas_sgemm, row-major: C (M,N) = alpha op(A) op(B) + beta C; M, N, K >= 0.
void attention_sgemm(AttentionGemm lib, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                     const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

}  // namespace weft::cpu
