#include "parallel/tp/layers.h"

#include <algorithm>
#include <cmath>

namespace weft {

CView SequenceParallelLayerNorm::bias(CView b) const {
  if (rms_ || b.data != nullptr) return b;
  WEFT_CHECK(zeros_ != nullptr, "a LayerNorm without bias and no zeros to read");
  return CView(zeros_);
}

void SequenceParallelLayerNorm::forward(View out, float* mean, float* rstd, CView x, CView w, CView b,
                                        int64_t N, int64_t C) {
  b = bias(b);
  const int64_t Nl = tp_.local_rows(N);
  // This rank's rows: out itself, or under sequence parallelism the group's row scratch (viewed
  // in out's dtype), all-gathered into out as stored.
  WEFT_CHECK(!tp_.sequence_parallel() || out.dtype == tp_.sum_dtype(), "{} LayerNorm rows in the {} row scratch",
             dtype_name(out.dtype), dtype_name(tp_.sum_dtype()));
  const View y = tp_.sequence_parallel() ? tp_.rows() : out;
  if (rms_) {
    WEFT_CHECK(y.f32() && x.f32() && w.f32(), "RMSNorm runs on fp32 tensors");
    tp_.backend().rmsnorm_forward_f32(static_cast<float*>(y.data), rstd, static_cast<const float*>(x.data),
                                      static_cast<const float*>(w.data), Nl, C, eps_);
  } else {
    tp_.backend().layernorm_forward(y, mean, rstd, x, w, b, Nl, C, eps_);
  }
  tp_.round(y, Nl * C);
  tp_.column_input_forward(y, out, N, C);
}

void SequenceParallelLayerNorm::backward(View dx, float* dw, float* db, CView dout, CView x, CView w,
                                         const float* mean, const float* rstd, int64_t N, int64_t C) {
  Backend& be = tp_.backend();
  const bool has_bias = !rms_ && db != nullptr;
  if (!rms_ && db == nullptr) {  // a LayerNorm without bias: its gradient goes nowhere
    WEFT_CHECK(sink_ != nullptr, "a LayerNorm without bias and no sink for its gradient");
    db = sink_;
  }
  const int64_t Nl = tp_.local_rows(N);
  // The norm's backward of this rank's rows into the weight (and bias) gradients gw, gb.
  const auto rows_backward = [&](float* gw, float* gb) {
    if (!rms_) {
      be.layernorm_backward(dx, gw, gb, dout, x, w, mean, rstd, Nl, C);
      return;
    }
    WEFT_CHECK(dx.f32() && dout.f32() && x.f32() && w.f32(), "RMSNorm runs on fp32 tensors");
    const auto f = [](CView v) { return static_cast<const float*>(v.data); };
    be.rmsnorm_backward_f32(static_cast<float*>(dx.data), gw, f(dout), f(x), f(w), rstd, Nl, C);
  };
  if (!tp_.sequence_parallel()) {
    rows_backward(dw, db);
    return;
  }
  // This rank's rows' part of the weight gradient (and the bias's; RMSNorm and a bias-free
  // LayerNorm have none to sum), summed over the ranks, then accumulated.
  const int64_t n = has_bias ? 2 * C : C;
  float* g = tp_.ln_grads();
  be.fill(g, DType::kF32, 0, 2 * C, 0.0f);
  rows_backward(g, g + C);
  tp_.all_reduce_exact(g, n);
  be.add(dw, dw, g, C);
  if (has_bias) be.add(db, db, g + C, C);
}

void ColumnParallelLinear::forward(View out, CView inp, CView w, CView b, int64_t N, int64_t IN,
                                   int64_t OUTl) {
  tp_.backend().matmul_forward(out, inp, w, b, N, IN, OUTl, false);
  tp_.round(out, N * OUTl);
}

void ColumnParallelLinear::forward_gelu(View out, View pre, CView inp, CView w, CView b, int64_t N,
                                        int64_t IN, int64_t OUTl) {
  tp_.backend().matmul_gelu_forward(out, pre, inp, w, b, N, IN, OUTl, tp_.precision());
}

View ColumnParallelLinear::backward(View dinp, float* dw, float* db, CView dout, CView inp, CView w, int64_t N,
                                    int64_t IN, int64_t OUTl) {
  tp_.backend().matmul_backward(dinp, dw, db, dout, inp, w, N, IN, OUTl);
  tp_.column_input_backward_rows(dinp, N, IN);
  return tp_.column_input_backward_scatter(dinp, N, IN);
}

void RowParallelLinear::forward(View out, CView res, CView inp, CView w, CView b, int64_t N, int64_t INl,
                                int64_t OUT) {
  Backend& be = tp_.backend();
  const int64_t Nl = tp_.local_rows(N);
  if (tp_.size() == 1) {
    // out = res + inp @ w + b: the residual add and the bias ride on the product.
    if (out.f32()) {
      be.add_bias(out, res, b, N, OUT);
      be.matmul_forward(out, inp, w, nullptr, N, INl, OUT, true);
    } else {
      // A 16-bit output: res into it (a copy, or exact when res is 16-bit too), then the bias and
      // the product accumulated in fp32 and rounded once: res + b, then + inp @ w, the f32 form's
      // sums and order (matmul_forward adds an accumulating call's bias first).
      WEFT_CHECK(res.dtype == out.dtype,
                 "a row-parallel layer at tp 1: a {} residual into a {} output would round twice", dtype_name(res.dtype),
                 dtype_name(out.dtype));
      be.convert(out, res, N * OUT);
      be.matmul_forward(out, inp, w, b, N, INl, OUT, true);
    }
  } else {
    be.add(out, res, reduced_product(inp, w, b, N, INl, OUT), Nl * OUT);  // the product's sum + the residual
  }
  tp_.round(out, Nl * OUT);
}

CView RowParallelLinear::reduced_product(CView inp, CView w, CView b, int64_t N, int64_t INl, int64_t OUT) {
  Backend& be = tp_.backend();
  const View part = tp_.partial();
  if (part.f32()) {  // fp32 sums: the partial products summed over the ranks, then the bias once
    be.matmul_forward(part, inp, w, nullptr, N, INl, OUT, false);
    const View y = tp_.row_output_forward(part, tp_.rows(), N, OUT);
    be.add_bias(y, y, b, tp_.local_rows(N), OUT);
    return y;
  }
  // 16-bit sums: each rank's product rounded to 16 bits, rank 0's with the bias (so that it is
  // added once, before the sum's rounding), then summed over the ranks in 16 bits.
  be.matmul_forward(part, inp, w, tp_.rank() == 0 ? b : CView(), N, INl, OUT, false);
  return tp_.row_output_forward(part, tp_.rows(), N, OUT);
}

void RowParallelLinear::forward_norm(SequenceParallelLayerNorm& norm, View out, View ln_out, float* mean, float* rstd,
                                     CView res, CView inp, CView w, CView b, CView ln_w,
                                     CView ln_b, int64_t N, int64_t INl, int64_t OUT) {
  ln_b = norm.bias(ln_b);
  Backend& be = tp_.backend();
  if (tp_.size() == 1) {
    be.matmul_residual_layernorm_forward(out, ln_out, mean, rstd, res, inp, w, b, ln_w, ln_b, N, INl, OUT, norm.eps(),
                                         tp_.precision());
    return;
  }
  if (tp_.sequence_parallel()) {  // the LayerNorm's rows live in the group's scratch: no fusion
    forward(out, res, inp, w, b, N, INl, OUT);
    norm.forward(ln_out, mean, rstd, out, ln_w, ln_b, N, OUT);
    return;
  }
  const CView y = reduced_product(inp, w, b, N, INl, OUT);  // all-reduced in place, with the bias
  be.residual_layernorm_forward(out, ln_out, mean, rstd, res, y, ln_w, ln_b, N, OUT, norm.eps(), tp_.precision());
}

void RowParallelLinear::backward(View dinp, float* dw, float* db, CView dout, CView inp, CView w, int64_t N,
                                 int64_t INl, int64_t OUT) {
  const CView dy = tp_.row_output_backward(dout, N, OUT);  // all N rows
  tp_.backend().matmul_backward(dinp, dw, db, dy, inp, w, N, INl, OUT);
  tp_.round(dinp, N * INl);
}

void RowParallelLinear::backward_gelu(View dinp, float* dw, float* db, CView dout, CView inp, CView w,
                                      CView pre, int64_t N, int64_t INl, int64_t OUT) {
  const CView dy = tp_.row_output_backward(dout, N, OUT);  // all N rows
  tp_.backend().matmul_gelu_backward(dinp, dw, db, dy, inp, w, pre, N, INl, OUT, tp_.precision());
}

void VocabParallelEmbedding::forward(View out, const int32_t* tokens, CView wte, CView wpe, int64_t B,
                                     int64_t T, int64_t C) {
  const int64_t N = B * T;
  Backend& be = tp_.backend();
  const CView pos = tp_.rank() == 0 ? wpe : CView();
  if (tp_.size() == 1) {  // the lookup itself (a 16-bit out rounds as the op writes it)
    be.embedding_forward(out, tokens, wte, pos, B, T, C, v0_, rows_);
    tp_.round(out, N * C);
    return;
  }
  // The lookup's partial sums, of the group's sum dtype: in place in an out of that dtype, else in
  // the group's scratch; summed over the ranks (reduce-scattered under sequence parallelism), then
  // rounded once into out. 16-bit sums are exact here: for each element one rank holds the token's
  // row (rank 0 adds its position, rounding once, as one rank does) and the others add zeros.
  const View part = tp_.partial();
  const bool same = out.dtype == part.dtype;
  const View partial = same && !tp_.sequence_parallel() ? out : part;
  be.embedding_forward(partial, tokens, wte, pos, B, T, C, v0_, rows_);
  const View y = tp_.row_output_forward(partial, same ? out : tp_.rows(), N, C);
  const int64_t Nl = tp_.local_rows(N);
  if (y.data != out.data) be.convert(out, y, Nl * C);  // a copy, or rounded to 16 bits once
  tp_.round(out, Nl * C);
}

void VocabParallelEmbedding::backward(float* dwte, float* dwpe, CView dy, const int32_t* tokens, int64_t B, int64_t T,
                                      int64_t C) {
  tp_.backend().embedding_backward(dwte, dwpe, dy, tokens, B, T, C, v0_, rows_);
}

VocabParallelHead::VocabParallelHead(TensorParallel& tp, int64_t V, int64_t Vp)
    : tp_(tp), V_(V), Vp_(Vp), rows_(tp.part(Vp)), v0_(tp.rank() * rows_),
      cols_(std::clamp<int64_t>(V - v0_, 0, rows_)) {}

void VocabParallelHead::logits(View logits, CView x, CView wte, int64_t rows, int64_t C) {
  tp_.backend().gemm(false, true, rows, rows_, C, 1.0f, x, C, wte, C, 0.0f, logits, rows_);
  tp_.round(logits, rows * rows_);
}

void VocabParallelHead::cross_entropy(View logits, float* losses, const int32_t* targets, int64_t rows, float dloss,
                                      float* stats) {
  Backend& be = tp_.backend();
  if (tp_.size() == 1) {
    be.softmax_cross_entropy(logits, losses, targets, rows, V_, rows_, dloss);
    return;
  }
  float* mx = stats;
  float* sm = stats + rows;  // sm and tl adjacent: one reduction
  float* tl = stats + 2 * rows;
  be.ce_row_max(logits, rows, rows_, cols_, mx);
  tp_.all_reduce_max(mx, rows);
  be.ce_row_sumexp(logits, rows, rows_, cols_, mx, sm);
  be.ce_target_logit(logits, rows, rows_, cols_, targets, v0_, tl);
  tp_.all_reduce_exact(sm, 2 * rows);
  be.ce_loss(losses, mx, sm, tl, rows);
  if (dloss != 0.0f) be.ce_grad(logits, rows, rows_, cols_, mx, sm, targets, v0_, dloss);
}

void VocabParallelHead::backward(View dx, float* dwte, CView dlogits, CView x, CView wte, int64_t rows,
                                 int64_t C) {
  Backend& be = tp_.backend();
  be.gemm(true, false, rows_, C, rows, 1.0f, dlogits, rows_, x, C, 1.0f, dwte, C);
  be.gemm(false, false, rows, C, rows_, 1.0f, dlogits, rows_, wte, C, 0.0f, dx, C);
  tp_.column_input_backward_rows(dx, rows, C);
}

void VocabParallelHead::row_logits(float* out, CView x, CView wte, int64_t C) {
  Backend& be = tp_.backend();
  if (tp_.size() == 1) {
    be.gemm(false, true, 1, V_, C, 1.0f, x, C, wte, C, 0.0f, out, V_);
    return;
  }
  // This rank's columns in place among zeros, summed over the ranks: every column.
  be.fill(out, DType::kF32, 0, Vp_, 0.0f);
  be.gemm(false, true, 1, rows_, C, 1.0f, x, C, wte, C, 0.0f, out + v0_, rows_);
  tp_.all_reduce_exact(out, Vp_);
}

}  // namespace weft
