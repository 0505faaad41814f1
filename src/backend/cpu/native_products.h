// The CPU backend's typed products on a CPU with a native bf16 product (oneDNN with AVX512-BF16
// or AMX) when [precision] matmul = "fast" and the storage is bf16: oneDNN reads bf16 operands
// where they are stored and writes a bf16 or fp32 output directly (the bias in its epilogue),
// so nothing is widened into the staging arena. An f32 input (the residual stream's gradient,
// a model's f32 tensors) is rounded to a dense bf16 copy in the arena (two to an fp32 element,
// counted as workspace like any staging: RunSpec::native_products in the descriptions), as the
// fp32 path's product would round it. Results are the fast mode's: within the 16-bit parity
// tolerance of the exact products, not bitwise.
#pragma once
#include <cstdint>
#include <initializer_list>

#include "backend/backend.h"
#include "backend/cpu/onednn_gemm.h"

namespace weft {

class NativeProducts {
 public:
  NativeProducts(Backend& be, OnednnGemm& g) : be_(be), g_(g) {}

  // Whether the native path takes these operands: each null, f32 or bf16 (an f16 operand goes
  // to the staged default).
  static bool covers(std::initializer_list<CView> operands);

  // Backend's typed ops of the same names (backend.h), natively.
  void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, CView A, int64_t lda, CView B, int64_t ldb,
            float beta, View C, int64_t ldc);
  void matmul_forward(View out, CView inp, CView w, CView bias, int64_t N, int64_t IN, int64_t OUT, bool accumulate);
  void matmul_backward(View dinp, View dw, View dbias, CView dout, CView inp, CView w, int64_t N, int64_t IN,
                       int64_t OUT);
  // The product + residual + LayerNorm: the residual is summed in fp32 in the arena a chunk of
  // rows at a time (res widened, + bias + inp @ w; native_residual_staging) and rounded once
  // into `residual`, then the LayerNorm runs as the typed op (round_to(p) on an f32 output).
  void matmul_residual_layernorm_forward(View residual, View out, View mean, View rstd, CView res, CView inp, CView w,
                                         CView bias, CView ln_w, CView ln_b, int64_t N, int64_t IN, int64_t C,
                                         float eps, Precision p);

 private:
  // C (M,N) = alpha op(A) op(B) + bias + beta C (op(A) M x K stored with row stride lda, op(B)
  // K x N): bf16 operands read in place; an f32 A rounded to bf16 a chunk of C's rows at a time
  // (an f32 B then whole), else an f32 B a chunk of C's columns at a time, in the staging arena
  // (backend/staging.h native_product_staging).
  void product(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, CView A, int64_t lda, CView B,
               int64_t ldb, CView bias, float beta, View C, int64_t ldc);
  void column_sums(float* dbias, CView dout, int64_t N, int64_t OUT);

  Backend& be_;
  OnednnGemm& g_;
};

}  // namespace weft
