// The defaults of Backend's typed ops (backend.h, "ops"): f32 operands go to the backend's fp32
// kernel as they are; 16-bit operands are staged through fp32 scratch of the backend (the
// staging arena): inputs widen into it (decode_16), the fp32 kernel runs on it, outputs round
// back (encode_16). Every step goes through the backend's virtual calls, so on cpu-guarded the
// scratch is fenced device memory and every step is checked like any other op.
//
// Ops whose fp32 kernel computes every row on its own (elementwise, LayerNorm forward, the
// cross-entropy rows) stage a chunk of rows at a time (staging_chunk_rows): the same fp32
// operations on the same values, so bitwise the whole call, with an arena of about
// staging_chunk() elements instead of the whole tensors. The fused ops on 16-bit tensors run
// as the sequence of typed ops their fp32 form is (each output rounded where the sequence's
// round_to rounds it), so each step stages only its own operands.
#include <array>
#include <cstddef>
#include <initializer_list>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"

namespace weft {
namespace {

// One tensor operand of a typed op: its view, its element count, and whether the op reads it,
// writes it, or both. A row operand of a row-chunked op (ld > 0) holds `cols` elements a row,
// rows ld elements apart; n is then the span of the call's rows.
enum class Role { kIn, kOut, kInOut };
struct Operand {
  const void* data;
  DType dt;
  int64_t n;
  Role role;
  int64_t ld = 0, cols = 0;
};
Operand in(CView v, int64_t n) { return {v.data, v.dtype, n, Role::kIn}; }
Operand out(View v, int64_t n) { return {v.data, v.dtype, n, Role::kOut}; }
Operand inout(View v, int64_t n) { return {v.data, v.dtype, n, Role::kInOut}; }
// Row operands: row r at element r * ld, cols elements (cols = ld: dense rows).
Operand rin(CView v, int64_t ld, int64_t cols) { return {v.data, v.dtype, 0, Role::kIn, ld, cols}; }
Operand rout(View v, int64_t ld, int64_t cols) { return {v.data, v.dtype, 0, Role::kOut, ld, cols}; }
Operand rinout(View v, int64_t ld, int64_t cols) { return {v.data, v.dtype, 0, Role::kInOut, ld, cols}; }

// The elements a row-major (rows, cols) operand with row stride ld spans.
int64_t span(int64_t rows, int64_t cols, int64_t ld) { return rows <= 0 || cols <= 0 ? 0 : (rows - 1) * ld + cols; }

bool sixteen(const Operand& x) { return x.data != nullptr && x.dt != DType::kF32; }

// Runs f with the fp32 form of each operand (a float* each; null stays null).
template <class F, size_t K, size_t... I>
void call(F& f, const std::array<float*, K>& p, std::index_sequence<I...>) {
  f(p[I]...);
}

template <class F, size_t K>
void staged_array(Backend& be, const char* op, F& f, const std::array<Operand, K>& o) {
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

template <class F, class... Ops>
void staged(Backend& be, const char* op, F&& f, Ops... ops) {
  const std::array<Operand, sizeof...(Ops)> o{ops...};
  staged_array(be, op, f, o);
}

// A row-chunked op over N rows: f(r0, nr, fp32 pointers...) runs the fp32 kernel on rows
// [r0, r0 + nr), each row operand's pointer at its row r0. Whole operands (n elements) are
// read-only (staged again for every chunk). All-f32 calls run once over every row.
template <class F, class... Ops>
void staged_rows(Backend& be, const char* op, int64_t N, F&& f, Ops... ops) {
  constexpr size_t K = sizeof...(Ops);
  const std::array<Operand, K> o{ops...};
  int64_t row16 = 0;
  for (const Operand& x : o) {
    if (x.ld == 0) {
      WEFT_CHECK(x.role == Role::kIn || !sixteen(x), "{}: a whole 16-bit operand written by a row-chunked op", op);
    } else if (sixteen(x)) {
      row16 += x.ld;
    }
  }
  if (N <= 0) return;
  const int64_t rows = staging_chunk_rows(N, row16, be.staging_chunk());
  for (int64_t r0 = 0; r0 < N; r0 += rows) {
    const int64_t nr = std::min(rows, N - r0);
    std::array<Operand, K> c = o;
    for (Operand& x : c) {
      if (x.ld == 0) continue;
      if (x.data != nullptr) x.data = static_cast<const char*>(x.data) + view_offset(x.dt, r0 * x.ld);
      x.n = span(nr, x.cols, x.ld);
    }
    auto g = [&](auto... p) { f(r0, nr, p...); };
    staged_array(be, op, g, c);
  }
}

// The storage dtype a precision's round_to rounds to (kF32 for fp32: no rounding).
DType rounded_dtype(Precision p) { return p == Precision::kFp32 ? DType::kF32 : dtype_of(p); }

// Whether a fused op over these outputs runs as its sequence of typed ops with the same bits:
// every 16-bit output has the dtype p rounds to (an f32 output is rounded with round_f32 after
// its step, as the fp32 form's round_to). With p = fp32 a 16-bit output is rounded once, at the
// fused op's end, which the sequence cannot do (it runs staged whole).
bool runs_as_sequence(Precision p, std::initializer_list<DType> outs) {
  for (DType d : outs) {
    if (d != DType::kF32 && (p == Precision::kFp32 || d != rounded_dtype(p))) return false;
  }
  return true;
}

bool all_f32(std::initializer_list<CView> vs) {
  for (const CView& v : vs) {
    if (v.data != nullptr && !v.f32()) return false;
  }
  return true;
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

void Backend::set_staging_chunk(int64_t elems) {
  if (elems < 1) throw_input("the staging chunk must be at least 1 element, got {}", elems);
  staging_chunk_ = elems;
}

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
  if (!wte || wte.f32()) {  // chunks of whole samples (the positions restart at each)
    staged_rows(
        *this, "embedding_forward", B,
        [&](int64_t b0, int64_t nb, float* o_, float* e, float* p) {
          embedding_forward_f32(o_, tokens + b0 * T, e, p, nb, T, C, v0, vrows);
        },
        rout(o, T * C, T * C), in(wte, 0), in(wpe, T * C));
    return;
  }
  embedding_forward_16(o, tokens, wte, wpe, B, T, C, v0, vrows);
}

void Backend::embedding_forward_16(View o, const int32_t* tokens, CView wte, CView wpe, int64_t B, int64_t T,
                                   int64_t C, int64_t v0, int64_t vrows) {
  // A 16-bit table is read a row at a time, never widened whole: a chunk of output rows at a
  // time, each token's row widens into its fp32 output row (decode_16) and takes its position's
  // row (widened into the arena when 16-bit), as embedding_forward_f32 computes it (wte + wpe;
  // a row this rank does not hold is the position's row, or zero); a 16-bit output is rounded
  // once from those fp32 rows.
  if (o.dtype != DType::kF32 && o.dtype != DType::kBF16 && o.dtype != DType::kF16) {
    throw_input("embedding_forward: the output is {}; the ops take f32, bf16 or f16 tensors", dtype_name(o.dtype));
  }
  const int64_t N = B * T;
  std::vector<int32_t> tok(static_cast<size_t>(N));
  if (!tok.empty()) copy_to_host(tok.data(), tokens, 0, tok.size() * sizeof(int32_t));
  const bool o16 = !o.f32(), p16 = wpe && !wpe.f32();
  const int64_t per = staging_chunk_rows(N, (o16 ? C : 0) + (p16 ? C : 0), staging_chunk());
  for (int64_t r0 = 0; r0 < N; r0 += per) {
    const int64_t n = std::min(per, N - r0);
    const int64_t staged_n = (o16 ? n * C : 0) + (p16 ? n * C : 0);
    float* arena = staged_n > 0 ? staging_for_op(staged_n) : nullptr;
    float* out = o16 ? arena : static_cast<float*>(o.at(r0 * C).data);
    float* pos16 = p16 ? arena + (o16 ? n * C : 0) : nullptr;
    // The position row of output row i of the chunk (null: no positions on this rank).
    const auto pos = [&](int64_t i) -> const float* {
      if (!wpe) return nullptr;
      if (p16) return pos16 + i * C;
      return static_cast<const float*>(wpe.data) + ((r0 + i) % T) * C;
    };
    for (int64_t i = 0; i < n; ++i) {
      if (p16) decode_16(pos16 + i * C, wpe.at(((r0 + i) % T) * C).data, C, wpe.dtype, false);
      const int64_t row = static_cast<int64_t>(tok[static_cast<size_t>(r0 + i)]) - v0;
      float* oi = out + i * C;
      if (row >= 0 && row < vrows) {
        decode_16(oi, wte.at(row * C).data, C, wte.dtype, false);
        if (pos(i) != nullptr) add_f32(oi, oi, pos(i), C);
      } else if (pos(i) != nullptr) {
        copy_device(oi, 0, pos(i), 0, static_cast<size_t>(C) * sizeof(float));
      } else {
        fill(oi, DType::kF32, 0, C, 0.0f);
      }
    }
    if (o16) encode_16(o.at(r0 * C).data, out, n * C, o.dtype);
  }
}

void Backend::embedding_backward(View dwte, View dwpe, CView dout, const int32_t* tokens, int64_t B, int64_t T,
                                 int64_t C, int64_t v0, int64_t vrows) {
  if (dwte && !dwte.f32() && vrows == INT64_MAX) {
    throw_input("embedding_backward: a {} table needs its row count (vrows)", dtype_name(dwte.dtype));
  }
  if (!dout.f32() && (!dwte || dwte.f32()) && (!dwpe || dwpe.f32())) {
    // fp32 gradients, a 16-bit dout: a chunk of rows of one sample at a time, widened, as a
    // sequence of length n from position t0 (its positions' gradient rows from dwpe's row t0).
    // Every gradient element takes its tokens' rows in the same order as one call.
    float* de = static_cast<float*>(dwte.data);
    float* dp = static_cast<float*>(dwpe.data);
    const int64_t per = staging_chunk_rows(B * T, C, staging_chunk());
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t t0 = 0; t0 < T; t0 += per) {
        const int64_t n = std::min(per, T - t0), r0 = b * T + t0;
        float* d = staging_for_op(n * C);
        decode_16(d, dout.at(r0 * C).data, n * C, dout.dtype, false);
        embedding_backward_f32(de, dp != nullptr ? dp + t0 * C : nullptr, d, tokens + r0, 1, n, C, v0, vrows);
      }
    }
    return;
  }
  staged(
      *this, "embedding_backward",
      [&](float* de, float* dp, float* d) { embedding_backward_f32(de, dp, d, tokens, B, T, C, v0, vrows); },
      inout(dwte, dwte.f32() ? 0 : vrows * C), inout(dwpe, T * C), in(dout, B * T * C));
}

// --- LayerNorm ---
void Backend::layernorm_forward(View o, View mean, View rstd, CView inp, CView w, CView b, int64_t N, int64_t C,
                                float eps) {
  staged_rows(
      *this, "layernorm_forward", N,
      [&](int64_t, int64_t n, float* o_, float* m, float* r, float* x, float* w_, float* b_) {
        layernorm_forward_f32(o_, m, r, x, w_, b_, n, C, eps);
      },
      rout(o, C, C), rout(mean, 1, 1), rout(rstd, 1, 1), rin(inp, C, C), in(w, C), in(b, C));
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
  staged_rows(
      *this, "add_bias", N, [&](int64_t, int64_t n, float* o_, float* x, float* b) { add_bias_f32(o_, x, b, n, C); },
      rout(o, C, C), rin(inp, C, C), in(bias, C));
}

void Backend::add(View o, CView a, CView b, int64_t n) {
  staged_rows(
      *this, "add", n, [&](int64_t, int64_t m, float* o_, float* a_, float* b_) { add_f32(o_, a_, b_, m); },
      rout(o, 1, 1), rin(a, 1, 1), rin(b, 1, 1));
}

void Backend::gelu_forward(View o, CView inp, int64_t n) {
  staged_rows(
      *this, "gelu_forward", n, [&](int64_t, int64_t m, float* o_, float* x) { gelu_forward_f32(o_, x, m); },
      rout(o, 1, 1), rin(inp, 1, 1));
}

void Backend::gelu_backward(View dinp, CView inp, CView dout, int64_t n) {
  staged_rows(
      *this, "gelu_backward", n,
      [&](int64_t, int64_t m, float* di, float* x, float* d) { gelu_backward_f32(di, x, d, m); }, rout(dinp, 1, 1),
      rin(inp, 1, 1), rin(dout, 1, 1));
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
  staged_rows(
      *this, "weighted_mse", R,
      [&](int64_t, int64_t n, float* l, float* g, float* p, float* t, float* w_) {
        weighted_mse_f32(l, g, p, t, w_, n, K, dloss);
      },
      rout(row_loss, 1, 1), rout(grad, K, K), rin(pred, K, K), rin(target, K, K), in(w, K));
}

void Backend::softmax_cross_entropy(View logits, View losses, const int32_t* targets, int64_t N, int64_t V, int64_t Vp,
                                    float dloss) {
  staged_rows(
      *this, "softmax_cross_entropy", N,
      [&](int64_t r0, int64_t n, float* lg, float* l) { softmax_cross_entropy_f32(lg, l, targets + r0, n, V, Vp, dloss); },
      dloss != 0.0f ? rinout(logits, Vp, Vp) : rin(logits, Vp, Vp), rout(losses, 1, 1));
}

void Backend::ce_row_max(CView logits, int64_t N, int64_t ld, int64_t cols, View max) {
  staged_rows(
      *this, "ce_row_max", N, [&](int64_t, int64_t n, float* lg, float* m) { ce_row_max_f32(lg, n, ld, cols, m); },
      rin(logits, ld, cols), rout(max, 1, 1));
}

void Backend::ce_row_sumexp(CView logits, int64_t N, int64_t ld, int64_t cols, CView max, View sum) {
  staged_rows(
      *this, "ce_row_sumexp", N,
      [&](int64_t, int64_t n, float* lg, float* m, float* s) { ce_row_sumexp_f32(lg, n, ld, cols, m, s); },
      rin(logits, ld, cols), rin(max, 1, 1), rout(sum, 1, 1));
}

void Backend::ce_target_logit(CView logits, int64_t N, int64_t ld, int64_t cols, const int32_t* targets, int64_t v0,
                              View tl) {
  staged_rows(
      *this, "ce_target_logit", N,
      [&](int64_t r0, int64_t n, float* lg, float* t) { ce_target_logit_f32(lg, n, ld, cols, targets + r0, v0, t); },
      rin(logits, ld, cols), rout(tl, 1, 1));
}

void Backend::ce_loss(View losses, CView max, CView sum, CView tl, int64_t n) {
  staged_rows(
      *this, "ce_loss", n,
      [&](int64_t, int64_t k, float* l, float* m, float* s, float* t) { ce_loss_f32(l, m, s, t, k); },
      rout(losses, 1, 1), rin(max, 1, 1), rin(sum, 1, 1), rin(tl, 1, 1));
}

void Backend::ce_grad(View logits, int64_t N, int64_t ld, int64_t cols, CView max, CView sum, const int32_t* targets,
                      int64_t v0, float dloss) {
  // The whole rows (padding columns included: the gradient zeroes them).
  staged_rows(
      *this, "ce_grad", N,
      [&](int64_t r0, int64_t n, float* lg, float* m, float* s) {
        ce_grad_f32(lg, n, ld, cols, m, s, targets + r0, v0, dloss);
      },
      rinout(logits, ld, ld), rin(max, 1, 1), rin(sum, 1, 1));
}

// --- the fused ops ---
// With 16-bit tensors a fused default runs the sequence of typed ops its fp32 form runs (the
// sequence fused_defaults.cc writes), each 16-bit output rounded by its step and each f32 one by
// round_f32: the fp32 form's bits (its round_to(p) is the 16-bit output's rounding), staging one
// step's operands at a time. All-f32 calls run the fp32 form; another mix (an output of a dtype p
// does not round to) runs it staged whole.
void Backend::round_f32(View v, int64_t n, Precision p) {
  if (v && v.f32() && p != Precision::kFp32) round_to(static_cast<float*>(v.data), n, p);
}

void Backend::residual_layernorm_forward(View residual, View o, View mean, View rstd, CView a, CView b, CView w,
                                         CView bias, int64_t N, int64_t C, float eps, Precision p) {
  if (!all_f32({residual, o, a, b, w, bias}) && runs_as_sequence(p, {residual.dtype, o.dtype})) {
    add(residual, a, b, N * C);
    round_f32(residual, N * C, p);
    layernorm_forward(o, mean, rstd, residual, w, bias, N, C, eps);
    round_f32(o, N * C, p);
    return;
  }
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
  // The residual starts as res (a copy, or a widening: exact) and takes bias + the product in
  // fp32 (matmul_forward accumulating: add_bias then the product, as the fp32 form), rounded once.
  const bool exact_start = residual.data == res.data || residual.dtype == res.dtype || residual.f32();
  if (!all_f32({residual, o, res, inp, w, bias, ln_w, ln_b}) && exact_start &&
      runs_as_sequence(p, {residual.dtype, o.dtype})) {
    if (residual.data != res.data) convert(residual, res, N * C);
    matmul_forward(residual, inp, w, bias, N, IN, C, true);
    round_f32(residual, N * C, p);
    layernorm_forward(o, mean, rstd, residual, ln_w, ln_b, N, C, eps);
    round_f32(o, N * C, p);
    return;
  }
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
  if (!all_f32({o, pre, inp, w, bias}) && runs_as_sequence(p, {o.dtype, pre.dtype})) {
    matmul_forward(pre, inp, w, bias, N, IN, OUT, false);
    round_f32(pre, N * OUT, p);
    gelu_forward(o, pre, N * OUT);
    round_f32(o, N * OUT, p);
    return;
  }
  staged(
      *this, "matmul_gelu_forward",
      [&](float* o_, float* pr, float* i_, float* w_, float* b_) {
        matmul_gelu_forward_f32(o_, pr, i_, w_, b_, N, IN, OUT, p);
      },
      out(o, N * OUT), out(pre, N * OUT), in(inp, N * IN), in(w, IN * OUT), in(bias, OUT));
}

void Backend::matmul_gelu_backward(View dinp, View dw, View dbias, CView dout, CView inp, CView w, CView pre, int64_t N,
                                   int64_t IN, int64_t OUT, Precision p) {
  if (!all_f32({dinp, dw, dbias, dout, inp, w, pre}) && runs_as_sequence(p, {dinp.dtype})) {
    WEFT_CHECK(dinp, "{}: matmul_gelu_backward needs dinp", name());
    matmul_backward(dinp, dw, dbias, dout, inp, w, N, IN, OUT);
    round_f32(dinp, N * IN, p);
    gelu_backward(dinp, pre, dinp, N * IN);
    round_f32(dinp, N * IN, p);
    return;
  }
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
