// The defaults of Backend's typed ops (backend.h, "ops"): f32 operands go to the backend's fp32
// kernel as they are; 16-bit operands are staged through fp32 scratch of the backend (the
// staging arena): inputs widen into it (decode_16), the fp32 kernel runs on it, outputs round
// back (encode_16). Every step goes through the backend's virtual calls, so on cpu-guarded the
// scratch is fenced device memory and every step is checked like any other op.
#include <array>
#include <cstddef>
#include <initializer_list>
#include <utility>

#include "backend/backend.h"
#include "core/error.h"

namespace weft {
namespace {

// One tensor operand of a typed op: its view, its element count, and whether the op reads it,
// writes it, or both.
enum class Role { kIn, kOut, kInOut };
struct Operand {
  const void* data;
  DType dt;
  int64_t n;
  Role role;
};
Operand in(CView v, int64_t n) { return {v.data, v.dtype, n, Role::kIn}; }
Operand out(View v, int64_t n) { return {v.data, v.dtype, n, Role::kOut}; }
Operand inout(View v, int64_t n) { return {v.data, v.dtype, n, Role::kInOut}; }

// The elements a row-major (rows, cols) operand with row stride ld spans.
int64_t span(int64_t rows, int64_t cols, int64_t ld) { return rows <= 0 || cols <= 0 ? 0 : (rows - 1) * ld + cols; }

// Runs f with the fp32 form of each operand (a float* each; null stays null).
template <class F, size_t K, size_t... I>
void call(F& f, const std::array<float*, K>& p, std::index_sequence<I...>) {
  f(p[I]...);
}

template <class F, class... Ops>
void staged(Backend& be, const char* op, F&& f, Ops... ops) {
  constexpr size_t K = sizeof...(Ops);
  const std::array<Operand, K> o{ops...};
  std::array<float*, K> p{};
  std::array<bool, K> staged_here{};
  // One arena for the call: the staged operands side by side.
  int64_t total = 0;
  for (size_t k = 0; k < K; ++k) {
    const Operand& x = o[k];
    p[k] = static_cast<float*>(const_cast<void*>(x.data));
    if (x.data == nullptr || x.dt == DType::kF32) continue;
    if (x.dt != DType::kBF16 && x.dt != DType::kF16) {
      throw_input("{}: operand {} is {}; the ops take f32, bf16 or f16 tensors", op, k + 1, dtype_name(x.dt));
    }
    staged_here[k] = x.n > 0;
    total += x.n;
  }
  if (total > 0) {
    float* arena = be.staging_for_op(total);
    for (size_t k = 0; k < K; ++k) {
      if (!staged_here[k]) continue;
      p[k] = arena;
      arena += o[k].n;
      if (o[k].role != Role::kOut) be.decode_16(p[k], o[k].data, o[k].n, o[k].dt, false);
    }
  }
  call(f, p, std::make_index_sequence<K>{});
  for (size_t k = 0; k < K; ++k) {
    if (staged_here[k] && o[k].role != Role::kIn) be.encode_16(const_cast<void*>(o[k].data), p[k], o[k].n, o[k].dt);
  }
}

}  // namespace

float* Backend::staging(int64_t n) {
  if (staging_n_ < n) {
    release_staging();
    staging_ = static_cast<float*>(device_alloc(DType::kF32, n, MemCategory::kWorkspace));
    staging_n_ = n;
  }
  return staging_;
}

void Backend::release_staging() noexcept {
  device_free(staging_, DType::kF32, staging_n_, MemCategory::kWorkspace);
  staging_ = nullptr;
  staging_n_ = 0;
}

int64_t Backend::staging_bytes() const { return staging_n_ * 4; }

// --- matrix products ---
void Backend::gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, CView A, int64_t lda, CView B,
                   int64_t ldb, float beta, View C, int64_t ldc) {
  // A strided C is read and written back whole (its gaps round-trip unchanged).
  staged(
      *this, "gemm",
      [&](float* a, float* b, float* c) { gemm_f32(ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc); },
      in(A, ta ? span(K, M, lda) : span(M, K, lda)), in(B, tb ? span(N, K, ldb) : span(K, N, ldb)),
      inout(C, span(M, N, ldc)));
}

void Backend::matmul_forward(View o, CView inp, CView w, CView bias, int64_t N, int64_t IN, int64_t OUT,
                             bool accumulate) {
  staged(
      *this, "matmul_forward",
      [&](float* o_, float* i_, float* w_, float* b_) { matmul_forward_f32(o_, i_, w_, b_, N, IN, OUT, accumulate); },
      accumulate ? inout(o, N * OUT) : out(o, N * OUT), in(inp, N * IN), in(w, IN * OUT), in(bias, OUT));
}

void Backend::matmul_backward(View dinp, View dw, View dbias, CView dout, CView inp, CView w, int64_t N, int64_t IN,
                              int64_t OUT) {
  staged(
      *this, "matmul_backward",
      [&](float* di, float* dw_, float* db, float* d, float* i_, float* w_) {
        matmul_backward_f32(di, dw_, db, d, i_, w_, N, IN, OUT);
      },
      out(dinp, N * IN), inout(dw, IN * OUT), inout(dbias, OUT), in(dout, N * OUT), in(inp, N * IN), in(w, IN * OUT));
}

// --- embeddings ---
void Backend::embedding_forward(View o, const int32_t* tokens, CView wte, CView wpe, int64_t B, int64_t T, int64_t C,
                                int64_t v0, int64_t vrows) {
  if (wte && !wte.f32() && vrows == INT64_MAX) {
    throw_input("embedding_forward: a {} table needs its row count (vrows)", dtype_name(wte.dtype));
  }
  staged(
      *this, "embedding_forward",
      [&](float* o_, float* e, float* p) { embedding_forward_f32(o_, tokens, e, p, B, T, C, v0, vrows); },
      out(o, B * T * C), in(wte, wte.f32() ? 0 : vrows * C), in(wpe, T * C));
}

void Backend::embedding_backward(View dwte, View dwpe, CView dout, const int32_t* tokens, int64_t B, int64_t T,
                                 int64_t C, int64_t v0, int64_t vrows) {
  if (dwte && !dwte.f32() && vrows == INT64_MAX) {
    throw_input("embedding_backward: a {} table needs its row count (vrows)", dtype_name(dwte.dtype));
  }
  staged(
      *this, "embedding_backward",
      [&](float* de, float* dp, float* d) { embedding_backward_f32(de, dp, d, tokens, B, T, C, v0, vrows); },
      inout(dwte, dwte.f32() ? 0 : vrows * C), inout(dwpe, T * C), in(dout, B * T * C));
}

// --- LayerNorm ---
void Backend::layernorm_forward(View o, View mean, View rstd, CView inp, CView w, CView b, int64_t N, int64_t C,
                                float eps) {
  staged(
      *this, "layernorm_forward",
      [&](float* o_, float* m, float* r, float* x, float* w_, float* b_) {
        layernorm_forward_f32(o_, m, r, x, w_, b_, N, C, eps);
      },
      out(o, N * C), out(mean, N), out(rstd, N), in(inp, N * C), in(w, C), in(b, C));
}

void Backend::layernorm_backward(View dinp, View dw, View db, CView dout, CView inp, CView w, CView mean, CView rstd,
                                 int64_t N, int64_t C) {
  staged(
      *this, "layernorm_backward",
      [&](float* di, float* dw_, float* db_, float* d, float* x, float* w_, float* m, float* r) {
        layernorm_backward_f32(di, dw_, db_, d, x, w_, m, r, N, C);
      },
      inout(dinp, N * C), inout(dw, C), inout(db, C), in(dout, N * C), in(inp, N * C), in(w, C), in(mean, N),
      in(rstd, N));
}

// --- elementwise ---
void Backend::add_bias(View o, CView inp, CView bias, int64_t N, int64_t C) {
  staged(
      *this, "add_bias", [&](float* o_, float* x, float* b) { add_bias_f32(o_, x, b, N, C); }, out(o, N * C),
      in(inp, N * C), in(bias, C));
}

void Backend::add(View o, CView a, CView b, int64_t n) {
  staged(
      *this, "add", [&](float* o_, float* a_, float* b_) { add_f32(o_, a_, b_, n); }, out(o, n), in(a, n), in(b, n));
}

void Backend::gelu_forward(View o, CView inp, int64_t n) {
  staged(
      *this, "gelu_forward", [&](float* o_, float* x) { gelu_forward_f32(o_, x, n); }, out(o, n), in(inp, n));
}

void Backend::gelu_backward(View dinp, CView inp, CView dout, int64_t n) {
  staged(
      *this, "gelu_backward", [&](float* di, float* x, float* d) { gelu_backward_f32(di, x, d, n); }, out(dinp, n),
      in(inp, n), in(dout, n));
}

// --- attention ---
namespace {
// The attention ops compute every (sample, head) on its own, so one sample at a time is bitwise
// the batched call: with a 16-bit operand they stage one sample's operands at a time (the
// arena holds T rows, not B T); all-f32 calls run batched, staging nothing.
bool any_16(std::initializer_list<DType> dts) {
  for (DType d : dts) {
    if (d != DType::kF32) return true;
  }
  return false;
}
template <class F>
void per_sample(int64_t B, bool sixteen, F&& f) {
  if (!sixteen || B <= 1) {
    f(0, B);
    return;
  }
  for (int64_t b = 0; b < B; ++b) f(b, 1);
}
}  // namespace

void Backend::attention_forward(View o, View att, CView qkv, int64_t B, int64_t T, int64_t C, int64_t NH) {
  per_sample(B, any_16({o.dtype, att.dtype, qkv.dtype}), [&](int64_t b, int64_t nb) {
    staged(
        *this, "attention_forward",
        [&](float* o_, float* a, float* q) { attention_forward_f32(o_, a, q, nb, T, C, NH); },
        out(o.at(b * T * C), nb * T * C), out(att.at(b * NH * T * T), nb * NH * T * T),
        in(qkv.at(b * T * 3 * C), nb * T * 3 * C));
  });
}

void Backend::attention_backward(View dqkv, CView dout, CView qkv, CView att, int64_t B, int64_t T, int64_t C,
                                 int64_t NH) {
  per_sample(B, any_16({dqkv.dtype, dout.dtype, qkv.dtype, att.dtype}), [&](int64_t b, int64_t nb) {
    staged(
        *this, "attention_backward",
        [&](float* dq, float* d, float* q, float* a) { attention_backward_f32(dq, d, q, a, nb, T, C, NH); },
        out(dqkv.at(b * T * 3 * C), nb * T * 3 * C), in(dout.at(b * T * C), nb * T * C),
        in(qkv.at(b * T * 3 * C), nb * T * 3 * C), in(att.at(b * NH * T * T), nb * NH * T * T));
  });
}

void Backend::bidir_attention_forward(View o, View att, CView qkv, int64_t B, int64_t T, int64_t C, int64_t NH) {
  per_sample(B, any_16({o.dtype, att.dtype, qkv.dtype}), [&](int64_t b, int64_t nb) {
    staged(
        *this, "bidir_attention_forward",
        [&](float* o_, float* a, float* q) { bidir_attention_forward_f32(o_, a, q, nb, T, C, NH); },
        out(o.at(b * T * C), nb * T * C), out(att.at(b * NH * T * T), nb * NH * T * T),
        in(qkv.at(b * T * 3 * C), nb * T * 3 * C));
  });
}

void Backend::bidir_attention_backward(View dqkv, CView dout, CView qkv, CView att, int64_t B, int64_t T, int64_t C,
                                       int64_t NH) {
  per_sample(B, any_16({dqkv.dtype, dout.dtype, qkv.dtype, att.dtype}), [&](int64_t b, int64_t nb) {
    staged(
        *this, "bidir_attention_backward",
        [&](float* dq, float* d, float* q, float* a) { bidir_attention_backward_f32(dq, d, q, a, nb, T, C, NH); },
        out(dqkv.at(b * T * 3 * C), nb * T * 3 * C), in(dout.at(b * T * C), nb * T * C),
        in(qkv.at(b * T * 3 * C), nb * T * 3 * C), in(att.at(b * NH * T * T), nb * NH * T * T));
  });
}

void Backend::query_attention_forward(View o, View att, CView q, CView kv, int64_t N, int64_t S, int64_t C,
                                      int64_t NH) {
  staged(
      *this, "query_attention_forward",
      [&](float* o_, float* a, float* q_, float* kv_) { query_attention_forward_f32(o_, a, q_, kv_, N, S, C, NH); },
      out(o, N * C), out(att, N * NH * S), in(q, C), in(kv, S * N * 2 * C));
}

void Backend::query_attention_backward(View dq, View dkv, CView dout, CView q, CView kv, CView att, int64_t N,
                                       int64_t S, int64_t C, int64_t NH) {
  staged(
      *this, "query_attention_backward",
      [&](float* dq_, float* dkv_, float* d, float* q_, float* kv_, float* a) {
        query_attention_backward_f32(dq_, dkv_, d, q_, kv_, a, N, S, C, NH);
      },
      inout(dq, C), out(dkv, S * N * 2 * C), in(dout, N * C), in(q, C), in(kv, S * N * 2 * C), in(att, N * NH * S));
}

// --- losses ---
void Backend::weighted_mse(View row_loss, View grad, CView pred, CView target, CView w, int64_t R, int64_t K,
                           float dloss) {
  staged(
      *this, "weighted_mse",
      [&](float* l, float* g, float* p, float* t, float* w_) { weighted_mse_f32(l, g, p, t, w_, R, K, dloss); },
      out(row_loss, R), out(grad, R * K), in(pred, R * K), in(target, R * K), in(w, K));
}

void Backend::softmax_cross_entropy(View logits, View losses, const int32_t* targets, int64_t N, int64_t V, int64_t Vp,
                                    float dloss) {
  staged(
      *this, "softmax_cross_entropy",
      [&](float* lg, float* l) { softmax_cross_entropy_f32(lg, l, targets, N, V, Vp, dloss); },
      dloss != 0.0f ? inout(logits, N * Vp) : in(logits, N * Vp), out(losses, N));
}

void Backend::ce_row_max(CView logits, int64_t N, int64_t ld, int64_t cols, View max) {
  staged(
      *this, "ce_row_max", [&](float* lg, float* m) { ce_row_max_f32(lg, N, ld, cols, m); }, in(logits, span(N, cols,
          ld)),
      out(max, N));
}

void Backend::ce_row_sumexp(CView logits, int64_t N, int64_t ld, int64_t cols, CView max, View sum) {
  staged(
      *this, "ce_row_sumexp", [&](float* lg, float* m, float* s) { ce_row_sumexp_f32(lg, N, ld, cols, m, s); },
      in(logits, span(N, cols, ld)), in(max, N), out(sum, N));
}

void Backend::ce_target_logit(CView logits, int64_t N, int64_t ld, int64_t cols, const int32_t* targets, int64_t v0,
                              View tl) {
  staged(
      *this, "ce_target_logit", [&](float* lg, float* t) { ce_target_logit_f32(lg, N, ld, cols, targets, v0, t); },
      in(logits, span(N, cols, ld)), out(tl, N));
}

void Backend::ce_loss(View losses, CView max, CView sum, CView tl, int64_t n) {
  staged(
      *this, "ce_loss", [&](float* l, float* m, float* s, float* t) { ce_loss_f32(l, m, s, t, n); }, out(losses, n),
      in(max, n), in(sum, n), in(tl, n));
}

void Backend::ce_grad(View logits, int64_t N, int64_t ld, int64_t cols, CView max, CView sum, const int32_t* targets,
                      int64_t v0, float dloss) {
  // The whole rows (padding columns included: the gradient zeroes them).
  staged(
      *this, "ce_grad", [&](float* lg, float* m, float* s) { ce_grad_f32(lg, N, ld, cols, m, s, targets, v0, dloss); },
      inout(logits, span(N, ld, ld)), in(max, N), in(sum, N));
}

// --- the fused ops ---
void Backend::residual_layernorm_forward(View residual, View o, View mean, View rstd, CView a, CView b, CView w,
                                         CView bias, int64_t N, int64_t C, float eps, Precision p) {
  staged(
      *this, "residual_layernorm_forward",
      [&](float* r, float* o_, float* m, float* s, float* a_, float* b_, float* w_, float* bi) {
        residual_layernorm_forward_f32(r, o_, m, s, a_, b_, w_, bi, N, C, eps, p);
      },
      out(residual, N * C), out(o, N * C), out(mean, N), out(rstd, N), in(a, N * C), in(b, N * C), in(w, C),
      in(bias, C));
}

void Backend::matmul_residual_layernorm_forward(View residual, View o, View mean, View rstd, CView res, CView inp,
                                                CView w, CView bias, CView ln_w, CView ln_b, int64_t N, int64_t IN,
                                                int64_t C, float eps, Precision p) {
  staged(
      *this, "matmul_residual_layernorm_forward",
      [&](float* r, float* o_, float* m, float* s, float* re, float* i_, float* w_, float* bi, float* lw, float* lb) {
        matmul_residual_layernorm_forward_f32(r, o_, m, s, re, i_, w_, bi, lw, lb, N, IN, C, eps, p);
      },
      out(residual, N * C), out(o, N * C), out(mean, N), out(rstd, N), in(res, N * C), in(inp, N * IN), in(w, IN * C),
      in(bias, C), in(ln_w, C), in(ln_b, C));
}

void Backend::matmul_gelu_forward(View o, View pre, CView inp, CView w, CView bias, int64_t N, int64_t IN, int64_t OUT,
                                  Precision p) {
  staged(
      *this, "matmul_gelu_forward",
      [&](float* o_, float* pr, float* i_, float* w_, float* b_) {
        matmul_gelu_forward_f32(o_, pr, i_, w_, b_, N, IN, OUT, p);
      },
      out(o, N * OUT), out(pre, N * OUT), in(inp, N * IN), in(w, IN * OUT), in(bias, OUT));
}

void Backend::matmul_gelu_backward(View dinp, View dw, View dbias, CView dout, CView inp, CView w, CView pre, int64_t N,
                                   int64_t IN, int64_t OUT, Precision p) {
  staged(
      *this, "matmul_gelu_backward",
      [&](float* di, float* dw_, float* db, float* d, float* i_, float* w_, float* pr) {
        matmul_gelu_backward_f32(di, dw_, db, d, i_, w_, pr, N, IN, OUT, p);
      },
      out(dinp, N * IN), inout(dw, IN * OUT), inout(dbias, OUT), in(dout, N * OUT), in(inp, N * IN), in(w, IN * OUT),
      in(pre, N * IN));
}

void Backend::attention_forward_lse(View o, View lse, CView qkv, int64_t B, int64_t T, int64_t C, int64_t NH) {
  staged(
      *this, "attention_forward_lse",
      [&](float* o_, float* l, float* q) { attention_forward_lse_f32(o_, l, q, B, T, C, NH); }, out(o, B * T * C),
      out(lse, B * NH * T), in(qkv, B * T * 3 * C));
}

void Backend::attention_backward_lse(View dqkv, CView dout, CView qkv, CView o, CView lse, int64_t B, int64_t T,
                                     int64_t C, int64_t NH) {
  staged(
      *this, "attention_backward_lse",
      [&](float* dq, float* d, float* q, float* o_, float* l) { attention_backward_lse_f32(dq, d, q, o_, l, B, T, C,
          NH); },
      out(dqkv, B * T * 3 * C), in(dout, B * T * C), in(qkv, B * T * 3 * C), in(o, B * T * C), in(lse, B * NH * T));
}

void Backend::adamw_copy(float* p, View copy, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
                         float beta2, float eps, float weight_decay, int64_t t, float grad_scale,
                         Precision copy_precision) {
  if (!copy || copy.f32()) {
    adamw_copy_f32(p, static_cast<float*>(copy.data), g, m, v, n, lr, beta1, beta2, eps, weight_decay, t, grad_scale,
                   copy_precision);
    return;
  }
  if (copy.dtype != DType::kBF16 && copy.dtype != DType::kF16) {
    throw_input("adamw_copy: the copy is {}; it takes f32, bf16 or f16", dtype_name(copy.dtype));
  }
  adamw(p, g, m, v, n, lr, beta1, beta2, eps, weight_decay, t, grad_scale);
  encode_16(copy.data, p, n, copy.dtype);
}

void Backend::convert(View dst, CView src, int64_t n) {
  if (n == 0) return;
  const auto check = [&](DType d) {
    if (!dtype_is_float(d)) throw_input("convert: {} is not a float dtype (f32, bf16, f16)", dtype_name(d));
  };
  check(dst.dtype);
  check(src.dtype);
  if (dst.dtype == src.dtype) {
    copy_device(dst.data, 0, src.data, 0, dtype_bytes(dst.dtype, n));
  } else if (src.f32()) {
    encode_16(dst.data, static_cast<const float*>(src.data), n, dst.dtype);
  } else if (dst.f32()) {
    decode_16(static_cast<float*>(dst.data), src.data, n, src.dtype, false);
  } else {
    float* s = staging(n);
    decode_16(s, src.data, n, src.dtype, false);
    encode_16(dst.data, s, n, dst.dtype);
  }
}

}  // namespace weft
