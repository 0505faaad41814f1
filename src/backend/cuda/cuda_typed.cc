// The CUDA backend's typed ops (backend.h "ops"): the dtype patterns its bf16 kernels cover go
// to them (the private *_bf16 members: cuBLASLt bf16 products with their epilogues, the bf16
// LayerNorm, GELU, embedding, cross-entropy and flash-attention kernels, AdamW writing the bf16
// copy); every other pattern goes to Backend's default (the fp32 kernels, on staged fp32 copies
// of the 16-bit operands). These overrides are the only callers of the bf16 kernels.
// The bf16 policy those kernels were written for: activations, activation gradients and the
// working parameters bf16; weight gradients (dw, dbias, LayerNorm dw/db, embedding tables'
// gradients) and every statistic (mean, rstd, lse, row max/sum, losses) fp32.
#include "backend/cuda/cuda_backend.h"

namespace weft::cuda {
namespace {

bool is_bf16(CView v) { return v.data != nullptr && v.dtype == DType::kBF16; }
bool is_f32(CView v) { return v.data != nullptr && v.dtype == DType::kF32; }
// bf16, or absent.
bool bf16_or_null(CView v) { return v.data == nullptr || v.dtype == DType::kBF16; }
bool f32_or_null(CView v) { return v.data == nullptr || v.dtype == DType::kF32; }

bf16* b(View v) { return static_cast<bf16*>(v.data); }
const bf16* b(CView v) { return static_cast<const bf16*>(v.data); }
float* f(View v) { return static_cast<float*>(v.data); }
const float* f(CView v) { return static_cast<const float*>(v.data); }

}  // namespace

void CudaBackend::gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, CView A, int64_t lda, CView B,
                       int64_t ldb, float beta, View C, int64_t ldc) {
  if (is_bf16(A) && is_bf16(B) && is_bf16(C)) return gemm_bf16(ta, tb, M, N, K, alpha, b(A), lda, b(B), ldb, beta,
                                                               b(C), ldc);
  if (is_bf16(A) && is_bf16(B) && is_f32(C)) return gemm_bf16(ta, tb, M, N, K, alpha, b(A), lda, b(B), ldb, beta,
                                                              f(C), ldc);
  Backend::gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void CudaBackend::matmul_forward(View out, CView inp, CView w, CView bias, int64_t N, int64_t IN, int64_t OUT,
                                 bool accumulate) {
  if (is_bf16(out) && is_bf16(inp) && is_bf16(w) && bf16_or_null(bias)) {
    return matmul_forward_bf16(b(out), nullptr, b(inp), b(w), b(bias), N, IN, OUT,
                               bias ? Epilogue::kBias : Epilogue::kNone, accumulate);
  }
  Backend::matmul_forward(out, inp, w, bias, N, IN, OUT, accumulate);
}

void CudaBackend::matmul_backward(View dinp, View dw, View dbias, CView dout, CView inp, CView w, int64_t N, int64_t IN,
                                  int64_t OUT) {
  if (bf16_or_null(dinp) && is_f32(dw) && f32_or_null(dbias) && is_bf16(dout) && is_bf16(inp) && is_bf16(w)) {
    return matmul_backward_bf16(b(dinp), f(dw), f(dbias), b(dout), b(inp), b(w), N, IN, OUT, nullptr);
  }
  Backend::matmul_backward(dinp, dw, dbias, dout, inp, w, N, IN, OUT);
}

void CudaBackend::embedding_forward(View out, const int32_t* tokens, CView wte, CView wpe, int64_t B, int64_t T,
                                    int64_t C, int64_t v0, int64_t vrows) {
  if (is_bf16(out) && is_bf16(wte) && bf16_or_null(wpe)) {
    return embedding_forward_bf16(b(out), tokens, b(wte), b(wpe), B, T, C, v0, vrows);
  }
  Backend::embedding_forward(out, tokens, wte, wpe, B, T, C, v0, vrows);
}

void CudaBackend::embedding_backward(View dwte, View dwpe, CView dout, const int32_t* tokens, int64_t B, int64_t T,
                                     int64_t C, int64_t v0, int64_t vrows) {
  if (is_f32(dwte) && f32_or_null(dwpe) && is_bf16(dout)) {
    return embedding_backward_bf16(f(dwte), f(dwpe), b(dout), tokens, B, T, C, v0, vrows);
  }
  Backend::embedding_backward(dwte, dwpe, dout, tokens, B, T, C, v0, vrows);
}

void CudaBackend::layernorm_forward(View out, View mean, View rstd, CView inp, CView w, CView bias, int64_t N,
                                    int64_t C, float eps) {
  if (is_bf16(out) && is_f32(mean) && is_f32(rstd) && is_bf16(inp) && is_bf16(w) && is_bf16(bias)) {
    return layernorm_forward_bf16(b(out), f(mean), f(rstd), b(inp), b(w), b(bias), N, C, eps);
  }
  Backend::layernorm_forward(out, mean, rstd, inp, w, bias, N, C, eps);
}

void CudaBackend::layernorm_backward(View dinp, View dw, View db, CView dout, CView inp, CView w, CView mean,
                                     CView rstd, int64_t N, int64_t C) {
  if (is_bf16(dinp) && is_f32(dw) && is_f32(db) && is_bf16(dout) && is_bf16(inp) && is_bf16(w) && is_f32(mean) &&
      is_f32(rstd)) {
    return layernorm_backward_bf16(b(dinp), f(dw), f(db), b(dout), b(inp), b(w), f(mean), f(rstd), N, C);
  }
  Backend::layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}

void CudaBackend::add(View out, CView a, CView c, int64_t n) {
  if (is_bf16(out) && is_bf16(a) && is_bf16(c)) return add_bf16(b(out), b(a), b(c), n);
  Backend::add(out, a, c, n);
}

void CudaBackend::gelu_forward(View out, CView inp, int64_t n) {
  if (is_bf16(out) && is_bf16(inp)) return gelu_forward_bf16(b(out), b(inp), n);
  Backend::gelu_forward(out, inp, n);
}

void CudaBackend::gelu_backward(View dinp, CView inp, CView dout, int64_t n) {
  if (is_bf16(dinp) && is_bf16(inp) && is_bf16(dout)) return gelu_backward_bf16(b(dinp), b(inp), b(dout), n);
  Backend::gelu_backward(dinp, inp, dout, n);
}

void CudaBackend::softmax_cross_entropy(View logits, View losses, const int32_t* targets, int64_t N, int64_t V,
                                        int64_t Vp, float dloss) {
  if (is_bf16(logits) && is_f32(losses)) return softmax_cross_entropy_bf16(b(logits), f(losses), targets, N, V, Vp,
                                                                           dloss);
  Backend::softmax_cross_entropy(logits, losses, targets, N, V, Vp, dloss);
}

void CudaBackend::ce_row_max(CView logits, int64_t N, int64_t ld, int64_t cols, View max) {
  if (is_bf16(logits) && is_f32(max)) return ce_row_max_bf16(b(logits), N, ld, cols, f(max));
  Backend::ce_row_max(logits, N, ld, cols, max);
}

void CudaBackend::ce_row_sumexp(CView logits, int64_t N, int64_t ld, int64_t cols, CView max, View sum) {
  if (is_bf16(logits) && is_f32(max) && is_f32(sum)) return ce_row_sumexp_bf16(b(logits), N, ld, cols, f(max), f(sum));
  Backend::ce_row_sumexp(logits, N, ld, cols, max, sum);
}

void CudaBackend::ce_target_logit(CView logits, int64_t N, int64_t ld, int64_t cols, const int32_t* targets, int64_t v0,
                                  View tl) {
  if (is_bf16(logits) && is_f32(tl)) return ce_target_logit_bf16(b(logits), N, ld, cols, targets, v0, f(tl));
  Backend::ce_target_logit(logits, N, ld, cols, targets, v0, tl);
}

void CudaBackend::ce_grad(View logits, int64_t N, int64_t ld, int64_t cols, CView max, CView sum,
                          const int32_t* targets, int64_t v0, float dloss) {
  if (is_bf16(logits) && is_f32(max) && is_f32(sum)) {
    return ce_grad_bf16(b(logits), N, ld, cols, f(max), f(sum), targets, v0, dloss);
  }
  Backend::ce_grad(logits, N, ld, cols, max, sum, targets, v0, dloss);
}

void CudaBackend::residual_layernorm_forward(View residual, View out, View mean, View rstd, CView a, CView c, CView w,
                                             CView bias, int64_t N, int64_t C, float eps, Precision p) {
  if (is_bf16(residual) && is_bf16(out) && is_f32(mean) && is_f32(rstd) && is_bf16(a) && is_bf16(c) && is_bf16(w) &&
      is_bf16(bias)) {
    return residual_layernorm_forward_bf16(b(residual), b(out), f(mean), f(rstd), b(a), b(c), b(w), b(bias), N, C, eps);
  }
  Backend::residual_layernorm_forward(residual, out, mean, rstd, a, c, w, bias, N, C, eps, p);
}

void CudaBackend::matmul_gelu_forward(View out, View pre, CView inp, CView w, CView bias, int64_t N, int64_t IN,
                                      int64_t OUT, Precision p) {
  if (is_bf16(out) && is_bf16(pre) && is_bf16(inp) && is_bf16(w) && is_bf16(bias)) {
    return matmul_forward_bf16(b(out), b(pre), b(inp), b(w), b(bias), N, IN, OUT, Epilogue::kGeluBias, false);
  }
  Backend::matmul_gelu_forward(out, pre, inp, w, bias, N, IN, OUT, p);
}

void CudaBackend::matmul_gelu_backward(View dinp, View dw, View dbias, CView dout, CView inp, CView w, CView pre,
                                       int64_t N, int64_t IN, int64_t OUT, Precision p) {
  if (is_bf16(dinp) && is_f32(dw) && f32_or_null(dbias) && is_bf16(dout) && is_bf16(inp) && is_bf16(w) &&
      is_bf16(pre)) {
    return matmul_backward_bf16(b(dinp), f(dw), f(dbias), b(dout), b(inp), b(w), N, IN, OUT, b(pre));
  }
  Backend::matmul_gelu_backward(dinp, dw, dbias, dout, inp, w, pre, N, IN, OUT, p);
}

void CudaBackend::attention_forward_lse(View out, View lse, CView qkv, int64_t B, int64_t T, int64_t C, int64_t NH) {
  if (is_bf16(out) && is_f32(lse) && is_bf16(qkv)) return attention_forward_bf16(b(out), f(lse), b(qkv), B, T, C, NH);
  Backend::attention_forward_lse(out, lse, qkv, B, T, C, NH);
}

void CudaBackend::attention_backward_lse(View dqkv, CView dout, CView qkv, CView out, CView lse, int64_t B, int64_t T,
                                         int64_t C, int64_t NH) {
  if (is_bf16(dqkv) && is_bf16(dout) && is_bf16(qkv) && is_bf16(out) && is_f32(lse)) {
    return attention_backward_bf16(b(dqkv), b(dout), b(qkv), b(out), f(lse), B, T, C, NH);
  }
  Backend::attention_backward_lse(dqkv, dout, qkv, out, lse, B, T, C, NH);
}

void CudaBackend::adamw_copy(float* p, View copy, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
                             float beta2, float eps, float weight_decay, int64_t t, float grad_scale,
                             Precision copy_precision) {
  if (is_bf16(copy)) return adamw_bf16(p, b(copy), g, m, v, n, lr, beta1, beta2, eps, weight_decay, t, grad_scale);
  Backend::adamw_copy(p, copy, g, m, v, n, lr, beta1, beta2, eps, weight_decay, t, grad_scale, copy_precision);
}

}  // namespace weft::cuda
