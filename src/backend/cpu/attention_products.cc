#include "backend/cpu/attention_products.h"

#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>

#include "core/error.h"

namespace weft::cpu {

void attention_sgemm(AttentionGemm lib, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                     const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (lib == AttentionGemm::kOpenblas || M == 0 || N == 0 || K == 0) {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M, N, K,
                alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  const dnnl_status_t st =
      dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  WEFT_CHECK(st == dnnl_success, "oneDNN sgemm {}x{}x{} failed (status {})", M, N, K, static_cast<int>(st));
}

}  // namespace weft::cpu
