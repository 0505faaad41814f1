// The op interface. The model (src/model) is written once against it; each backend
// implements every op. cpu/ is the reference every other backend is checked against.
// All tensors are row-major fp32 here; 16-bit storage is emulated with round_to (see
// core/precision.h).
// Shapes use fixed letters: B batch, T sequence, C channels, NH heads, hs = C/NH,
// F = MLP hidden, V real vocabulary, Vp padded vocabulary, N = B*T rows.
// "accumulates" means the op adds into its output; "writes" means it overwrites it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "core/precision.h"

namespace weft {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // --- matrix products (required) ---
  // General product, row-major: C (M,N) = alpha * op(A) op(B) + beta * C, where op(X) is X
  // or X^T; lda/ldb/ldc are row strides as stored.
  virtual void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                    const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                    float* C, int64_t ldc) = 0;
  // out (N,OUT) = inp (N,IN) @ w (IN,OUT) [+ bias (OUT)] [+ out if accumulate]. writes.
  virtual void matmul_forward(float* out, const float* inp, const float* w, const float* bias,
                              int64_t N, int64_t IN, int64_t OUT, bool accumulate) = 0;
  // dinp (N,IN) = dout @ w^T (writes, skipped if null); dw (IN,OUT) += inp^T @ dout;
  // dbias (OUT) += column sums of dout (skipped if null). accumulates into dw, dbias.
  virtual void matmul_backward(float* dinp, float* dw, float* dbias, const float* dout,
                               const float* inp, const float* w, int64_t N, int64_t IN,
                               int64_t OUT) = 0;

  // --- embeddings ---
  // out (B,T,C) = wte[tokens - v0] + wpe[t]. writes. Vocabulary-parallel: wte holds rows
  // [v0, v0 + vrows) only and a token outside them contributes zero; wpe may be null.
  virtual void embedding_forward(float* out, const int32_t* tokens, const float* wte,
                                 const float* wpe, int64_t B, int64_t T, int64_t C,
                                 int64_t v0 = 0, int64_t vrows = INT64_MAX) = 0;
  // dwte[tokens - v0] += dout (tokens in range), dwpe[t] += sum over b of dout (if not
  // null). accumulates.
  virtual void embedding_backward(float* dwte, float* dwpe, const float* dout,
                                  const int32_t* tokens, int64_t B, int64_t T, int64_t C,
                                  int64_t v0 = 0, int64_t vrows = INT64_MAX) = 0;

  // --- LayerNorm over the last dim ---
  // out (N,C), mean (N), rstd (N). writes.
  virtual void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                                 const float* w, const float* b, int64_t N, int64_t C,
                                 float eps) = 0;
  // dinp (N,C), dw (C), db (C) accumulate.
  virtual void layernorm_backward(float* dinp, float* dw, float* db, const float* dout,
                                  const float* inp, const float* w, const float* mean,
                                  const float* rstd, int64_t N, int64_t C) = 0;

  // --- elementwise ---
  // out = inp + bias broadcast over rows of (N,C) (bias may be null: plain copy). writes.
  virtual void add_bias(float* out, const float* inp, const float* bias, int64_t N, int64_t C) = 0;
  // out = a + b elementwise (n). writes; out may alias a or b.
  virtual void add(float* out, const float* a, const float* b, int64_t n) = 0;
  // GELU, tanh approximation (Hugging Face "gelu_new"). writes out (n).
  virtual void gelu_forward(float* out, const float* inp, int64_t n) = 0;
  // dinp = gelu'(inp) * dout. writes; dinp may alias dout.
  virtual void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) = 0;

  // --- causal self-attention ---
  // qkv (B,T,3C) holds q, k, v side by side; out (B,T,C); att (B,NH,T,T) keeps the
  // softmax probabilities for backward (entries above the diagonal are zero). writes.
  virtual void attention_forward(float* out, float* att, const float* qkv, int64_t B,
                                 int64_t T, int64_t C, int64_t NH) = 0;
  // dqkv (B,T,3C) writes.
  virtual void attention_backward(float* dqkv, const float* dout, const float* qkv,
                                  const float* att, int64_t B, int64_t T, int64_t C,
                                  int64_t NH) = 0;

  // --- softmax cross-entropy over the vocabulary ---
  // logits (N,Vp) in place: on return holds dlogits = (softmax - onehot) * dloss for
  // columns < V and 0 for the padding columns (if dloss != 0; otherwise untouched).
  // losses (N) writes -log p[target]. Targets must lie in [0, V).
  virtual void softmax_cross_entropy(float* logits, float* losses, const int32_t* targets,
                                     int64_t N, int64_t V, int64_t Vp, float dloss) = 0;

  // --- vocabulary-parallel softmax cross-entropy, in phases around the reductions ---
  // Each rank holds logits (N, ld) for its vocabulary columns, of which the first `cols`
  // are real (the rest padding). Phase 1: row maxima (writes max, N). Phase 2: sums of
  // exp(logit - max) with the global max (writes sum, N). Target logits: tl[i] = logit of
  // targets[i] - v0 if it lies in [0, cols), else 0 (writes). Phase 3 (gradient, in place):
  // logits -> (exp(logit - max) / sum - [col == target - v0]) * dloss, 0 on padding.
  virtual void ce_row_max(const float* logits, int64_t N, int64_t ld, int64_t cols, float* max) = 0;
  virtual void ce_row_sumexp(const float* logits, int64_t N, int64_t ld, int64_t cols,
                             const float* max, float* sum) = 0;
  virtual void ce_target_logit(const float* logits, int64_t N, int64_t ld, int64_t cols,
                               const int32_t* targets, int64_t v0, float* tl) = 0;
  virtual void ce_grad(float* logits, int64_t N, int64_t ld, int64_t cols, const float* max,
                       const float* sum, const int32_t* targets, int64_t v0, float dloss) = 0;

  // --- optimizer ---
  // AdamW over n elements (decoupled weight decay as in Loshchilov & Hutter / torch.optim.AdamW):
  // p -= lr*wd*p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
  // p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps). t counts from 1. The gradient is
  // read as g * grad_scale (gradient clipping without a separate pass over g).
  virtual void adamw(float* p, const float* g, float* m, float* v, int64_t n, float lr,
                     float beta1, float beta2, float eps, float weight_decay, int64_t t,
                     float grad_scale) = 0;
  // sum of squares of x (n), in double.
  virtual double sum_squares(const float* x, int64_t n) = 0;
  // x *= s.
  virtual void scale(float* x, float s, int64_t n) = 0;

  // --- mixed precision ---
  // x (n) rounded in place to the nearest value of precision p (round to nearest even;
  // fp16 overflow gives inf): the CPU backend's emulation of 16-bit storage. No-op for kFp32.
  virtual void round_to(float* x, int64_t n, Precision p) = 0;
};

// The CPU backend (BLAS + OpenMP).
std::unique_ptr<Backend> make_cpu_backend();

}  // namespace weft
