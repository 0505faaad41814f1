#include "model/block.h"

#include <algorithm>

#include "core/error.h"

namespace weft {

TypedElems layer_elems(int64_t N, int64_t Nl, int64_t C, int64_t Cl, int64_t F, int64_t att_elems, bool with_att,
                       bool output, const LayerDtypes& dt) {
  // carve_layer's pieces, each counted under its storage.
  TypedElems e;
  const auto add = [&e](int64_t n, DType d) { (d == DType::kF32 ? e.f32 : e.act) += n; };
  add(N * C, dt.ln);                 // ln1
  add(2 * Nl, DType::kF32);          // its mean, rstd
  add(N * 3 * Cl, dt.act);           // qkv
  if (with_att) add(att_elems, dt.att);
  add(N * Cl + Nl * C, dt.act);      // atty, res2
  add(N * C, dt.ln);                 // ln2
  add(2 * Nl, DType::kF32);          // its mean, rstd
  add(2 * N * F, dt.act);            // fch, fch_gelu
  if (output) add(Nl * C, DType::kF32);  // res3
  return e;
}

int64_t block_staging_elems(const BlockStaging& k) {
  const auto st = staged_elems;
  // Every call of forward() and backward() below (through parallel/tp/layers.cc) with its
  // 16-bit operands: activations, scratch, and the weights and biases it reads (w).
  const DType a = k.dt.act, ln = k.dt.ln, at = k.dt.att, dC = k.dC, d3C = k.d3C, dF = k.dF;
  const int64_t N = k.N, Nl = k.Nl, C = k.C, Cl = k.Cl, F = k.F, A = k.att;
  const bool tp1 = k.tp == 1, sp = k.sequence_parallel;
  const auto w = [&k](int64_t n) { return staged_elems(k.w, n); };
  int64_t m = 0;
  const auto call = [&m](int64_t n) { m = std::max(m, n); };
  // --- forward ---
  call((sp ? 0 : st(ln, N * C)) + w(2 * C));                            // layernorm_forward -> ln1
  call(st(a, N * 3 * Cl) + st(ln, N * C) + w(C * 3 * Cl + 3 * Cl));     // qkv = ln1 @ w + b
  // The attention ops stage one sample at a time (N/B rows, A/B statistics); flash attention's
  // log-sum-exp form the whole batch.
  const int64_t Ns = k.attention_lse ? N : N / k.B, As = k.attention_lse ? A : A / k.B;
  call(st(a, Ns * Cl + Ns * 3 * Cl) + (k.attention_lse ? 0 : st(at, As)));  // attention
  if (tp1) {
    // matmul_residual_layernorm_forward: attn proj's w, b and ln_2's w, b
    call(st(a, N * C) + st(ln, N * C) + st(a, N * Cl) + w(Cl * C + C + 2 * C));
  } else {
    call(st(a, N * Cl) + w(Cl * C));  // partial = atty @ w
    call(w(C));                       // its bias, after the reduction
    if (sp) {
      call(st(a, Nl * C));             // res2 = res + y
      call(st(a, Nl * C) + w(2 * C));  // its LayerNorm's rows
    } else {
      call(st(a, N * C) + st(ln, N * C) + w(2 * C));  // residual_layernorm_forward
    }
  }
  call(st(a, 2 * N * F) + st(ln, N * C) + w(C * F + F));  // matmul_gelu_forward
  // res3: at tp 1 add_bias(res3, res2, b) then the product of fch_gelu; at tp > 1 the product into
  // the partial sums, its bias, then add(res3, res2, y).
  call(st(a, N * F) + w(F * C));
  call(tp1 ? st(a, N * C) + w(C) : std::max(w(C), st(a, Nl * C)));
  if (!k.training) return m;
  // --- backward ---
  call(st(dF, N * F) + st(a, 2 * N * F) + w(F * C));             // matmul_gelu_backward -> dF
  call(st(dC, N * C) + st(dF, N * F) + st(ln, N * C) + w(C * F));  // fc's matmul_backward -> dC
  call((sp ? 0 : st(dC, N * C)) + st(a, Nl * C) + w(C));         // ln2's layernorm_backward
  if (k.selective) call(st(d3C, Ns * Cl) + st(at, As) + st(a, Ns * 3 * Cl));  // the recomputed probabilities
  call(st(dC, N * Cl) + st(a, N * Cl) + w(Cl * C));             // attn proj's matmul_backward -> dC
  call(st(d3C, Ns * 3 * Cl) + st(a, Ns * 3 * Cl) + st(dC, Ns * Cl) +
       (k.attention_lse ? st(a, Ns * Cl) : st(at, As)));         // attention's backward
  call(st(dC, N * C) + st(d3C, N * 3 * Cl) + st(ln, N * C) + w(C * 3 * Cl));  // qkv's matmul_backward -> dC
  call((sp ? 0 : st(dC, N * C)) + w(C));                         // ln1's layernorm_backward
  return m;
}

TransformerBlock::TransformerBlock(const ModelConfig& cfg, Backend& backend, TensorParallel& tp,
                                   SequenceParallelLayerNorm& ln, ColumnParallelLinear& column, RowParallelLinear& row,
                                   bool causal)
    : C_(cfg.n_embd),
      F_(tp.part(cfg.ffn)),
      NH_(tp.part(cfg.n_head)),
      Cl_(tp.part(cfg.n_embd)),
      be_(backend),
      tp_(tp),
      ln_(ln),
      column_(column),
      row_(row),
      causal_(causal) {}

void TransformerBlock::set_attention_lse(bool on) {
  WEFT_CHECK(!on || causal_, "flash attention (log-sum-exp) is only available for causal attention");
  lse_ = on;
}

void TransformerBlock::attention_forward(View out, View att, CView qkv, int64_t B, int64_t T) {
  if (causal_) {
    be_.attention_forward(out, att, qkv, B, T, Cl_, NH_);
  } else {
    be_.bidir_attention_forward(out, att, qkv, B, T, Cl_, NH_);
  }
}

void TransformerBlock::forward(const LayerWeights& lw, CView x, LayerActs& a, int64_t B, int64_t T, bool to_gelu) {
  const int64_t N = B * T, C = C_, F = F_, NH = NH_, Cl = Cl_;
  ln_.forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, lw.ln1w, lw.ln1b, N, C);
  column_.forward(a.qkv, a.ln1, lw.qkvw, lw.qkvb, N, C, 3 * Cl);
  if (lse_) {
    be_.attention_forward_lse(a.atty, a.att /* lse (B,NH,T) */, a.qkv, B, T, Cl, NH);  // statistics stay fp32
  } else {
    attention_forward(a.atty, a.att, a.qkv, B, T);
    tp_.round(a.att, B * NH * T * T);
  }
  tp_.round(a.atty, N * Cl);
  row_.forward_norm(ln_, a.res2, a.ln2, a.ln2_mean, a.ln2_rstd, x, a.atty, lw.attprojw, lw.attprojb, lw.ln2w,
                    lw.ln2b, N, Cl, C);
  column_.forward_gelu(a.fch_gelu, a.fch, a.ln2, lw.fcw, lw.fcb, N, C, F);
  if (to_gelu) return;
  row_.forward(a.res3, a.res2, a.fch_gelu, lw.fcprojw, lw.fcprojb, N, F, C);
}

// The forward's steps in reverse.
void TransformerBlock::backward(const LayerWeights& lw, const LayerPtrs& lg, CView x, LayerActs& a, int64_t B, int64_t T,
                                bool full, const BlockScratch& s) {
  const int64_t N = B * T, C = C_, F = F_, NH = NH_, Cl = Cl_;
  const int64_t Nl = tp_.local_rows(N);  // rows of the residual stream held here
  if (full) forward(lw, x, a, B, T, true);  // rematerialise the layer in the workspace
  // The residual passes d(res3) on unchanged to res2.
  row_.backward_gelu(s.dF, lg.fcprojw, lg.fcprojb, s.dres, a.fch_gelu, lw.fcprojw, a.fch, N, F, C);
  const View dln2 = column_.backward(s.dC, lg.fcw, lg.fcb, s.dF, a.ln2, lw.fcw, N, C, F);
  ln_.backward(s.dres, lg.ln2w, lg.ln2b, dln2, a.res2, lw.ln2w, a.ln2_mean, a.ln2_rstd, N, C);
  tp_.round(s.dres, Nl * C);
  // dres now holds d(res2); the residual passes it on unchanged to x.
  if (!full && !lse_ && a.att.data == s.att.data) {
    // Selective recompute: the attention probabilities again, from the stashed q, k, v (the
    // recomputed output goes to d3C, free until the attention backward writes it).
    attention_forward(s.d3C, s.att, a.qkv, B, T);
    tp_.round(s.att, B * NH * T * T);  // as the forward stored them
  }
  row_.backward(s.dC, lg.attprojw, lg.attprojb, s.dres, a.atty, lw.attprojw, N, Cl, C);
  if (lse_) {
    be_.attention_backward_lse(s.d3C, s.dC, a.qkv, a.atty, a.att /* lse */, B, T, Cl, NH);
  } else if (causal_) {
    be_.attention_backward(s.d3C, s.dC, a.qkv, a.att, B, T, Cl, NH);
  } else {
    be_.bidir_attention_backward(s.d3C, s.dC, a.qkv, a.att, B, T, Cl, NH);
  }
  tp_.round(s.d3C, N * 3 * Cl);
  const View dln1 = column_.backward(s.dC, lg.qkvw, lg.qkvb, s.d3C, a.ln1, lw.qkvw, N, C, 3 * Cl);
  ln_.backward(s.dres, lg.ln1w, lg.ln1b, dln1, x, lw.ln1w, a.ln1_mean, a.ln1_rstd, N, C);
  tp_.round(s.dres, Nl * C);
}

}  // namespace weft
