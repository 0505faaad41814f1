// Matrix products through oneDNN's matmul primitive (libdnnl; Debian 12's 2.6): the CPU
// backend's alternative to OpenBLAS's sgemm for fp32, and its native bf16 product (bf16 inputs,
// fp32 accumulation and output; brgemm kernels with AVX512-BF16 or AMX, 361-405 GFLOP/s per core
// on GPT-2's shapes against 190 for the best fp32 sgemm: ../shared/research/precision.md).
//
// One OnednnGemm per backend (one thread calls it at a time, as the backend). Primitives are
// made once per shape and kept; the bf16 product rounds its fp32 inputs to bfloat16 (nearest
// even, NaN stays NaN, as core/precision.h's f32_to_bf16) into scratch it keeps, which is exact
// for values a bf16 run has stored. oneDNN runs on the process's OpenMP threads.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

namespace weft {

class OnednnGemm {
 public:
  OnednnGemm();
  ~OnednnGemm();
  OnednnGemm(const OnednnGemm&) = delete;
  OnednnGemm& operator=(const OnednnGemm&) = delete;

  // As cblas_sgemm, row-major: C (M,N) = alpha op(A) op(B) + beta C, op(X) = X or X^T, lda/ldb/ldc
  // row strides as stored. bf16: A and B are rounded to bfloat16 first (the product is then
  // exact per term and summed in fp32, in oneDNN's order). M, N, K > 0.
  void gemm(bool bf16, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
            int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

  // The native bf16 product on bf16 operands as stored (no conversion): C (M,N) = alpha op(A)
  // op(B) + bias + beta C, A and B bfloat16 with row strides lda/ldb, C fp32 or bfloat16
  // (c_bf16: oneDNN rounds the fp32 result to nearest even), bias (N) null, fp32 or bfloat16
  // (bias_bf16). M, N, K > 0.
  void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A,
                 int64_t lda, const uint16_t* B, int64_t ldb, const void* bias, bool bias_bf16, float beta, void* C,
                 bool c_bf16, int64_t ldc);
  // rows x cols of fp32 stored with row stride ld -> dense rows x cols of bfloat16 (nearest even,
  // NaN stays NaN): what the product reads of an fp32 operand.
  static void to_bf16(uint16_t* dst, const float* src, int64_t rows, int64_t cols, int64_t ld);

  // oneDNN's name of the kernel that computes the last product it made for `bf16` (e.g.
  // "brg:avx512_core_bf16"), "" before the first.
  std::string kernel(bool bf16) const;

  // Whether this CPU has a native bf16 product in oneDNN (AVX512-BF16 or AMX): without one,
  // oneDNN emulates bf16 through fp32 and is slower than sgemm.
  static bool native_bf16();
  // oneDNN's version, "major.minor.patch".
  static std::string version();
  // oneDNN's name of this CPU's instruction set as it uses it ("avx512_core_bf16", ...).
  static std::string cpu_isa();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace weft
