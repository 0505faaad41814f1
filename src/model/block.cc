#include "model/block.h"

#include <algorithm>

#include "core/error.h"

namespace weft {

TypedElems layer_elems(int64_t N, int64_t Nl, int64_t C, int64_t Cl, int64_t F, int64_t att_elems, bool with_att,
                       bool output, const LayerDtypes& dt, int64_t FC, bool rms) {
  // carve_layer's pieces, each counted under its storage.
  TypedElems e;
  const auto add = [&e](int64_t n, DType d) { (d == DType::kF32 ? e.f32 : e.act) += n; };
  if (FC < 0) FC = F;
  const int64_t stats = rms ? Nl : 2 * Nl;  // RMSNorm: rstd; LayerNorm: mean, rstd
  add(N * C, dt.ln);                 // ln1
  add(stats, DType::kF32);           // its statistics
  add(N * 3 * Cl, dt.act);           // qkv
  if (with_att) add(att_elems, dt.att);
  add(N * Cl + Nl * C, dt.act);      // atty, res2
  add(N * C, dt.ln);                 // ln2
  add(stats, DType::kF32);           // its statistics
  add(N * FC + N * F, dt.act);       // fch, fch_gelu
  if (output) add(Nl * C, dt.res);   // res3
  return e;
}

int64_t block_staging_elems(const BlockStaging& k) {
  // Every call of forward() and backward() below (through parallel/tp/layers.cc) with its
  // 16-bit operands: activations, scratch, and the weights and biases it reads (w).
  const DType a = k.dt.act, ln = k.dt.ln, r = k.dt.res, dC = k.dC, d3C = k.d3C, dF = k.dF, s = k.sum;
  const int64_t N = k.N, Nl = k.Nl, C = k.C, Cl = k.Cl, F = k.F;
  const bool tp1 = k.tp == 1, sp = k.sequence_parallel;
  const auto st = staged_elems;
  const auto w = [&k](int64_t n) { return staged_elems(k.w, n); };
  const auto h = [](DType d) -> int64_t { return d == DType::kF32 ? 0 : 1; };  // 16-bit: 1
  // A row-chunked op over n rows (typed_defaults.cc): its whole operands, and its 16-bit row
  // operands' elements a row.
  const auto rows = [&k](int64_t n, int64_t whole, int64_t row16) { return staged_rows_elems(n, whole, row16, k.chunk); };
  // A product (matmul_forward, out (n, OUT) = inp (n, IN) @ w): exact, its staged 16-bit operands;
  // native, the bf16 copies of its f32 operands (backend/staging.h).
  const bool w32 = k.w == DType::kF32;
  const auto fwd = [&k, w32](int64_t staged16, int64_t n, int64_t IN, int64_t OUT, DType inp, DType out) {
    return k.native_products
               ? native_product_staging(n, OUT, IN, inp == DType::kF32, w32, out != DType::kF32, k.chunk)
               : staged16;
  };
  // matmul_backward (dinp = dout @ w^T, then dw (f32) += inp^T @ dout).
  const auto bwd = [&k, w32](int64_t staged16, int64_t n, int64_t IN, int64_t OUT, DType dout, DType inp,
                             DType dinp) {
    if (!k.native_products) return staged16;
    const bool d32 = dout == DType::kF32;
    return std::max(native_product_staging(n, IN, OUT, d32, w32, dinp != DType::kF32, k.chunk),
                    native_product_staging(IN, OUT, n, inp == DType::kF32, d32, false, k.chunk));
  };
  const DType f32 = DType::kF32;
  int64_t m = 0;
  const auto call = [&m](int64_t n) { m = std::max(m, n); };
  // --- forward ---
  call(rows(Nl, w(2 * C), (h(r) + h(ln)) * C));  // layernorm_forward(x) -> ln1 (sp: its rows, gathered as stored)
  call(fwd(st(a, N * 3 * Cl) + st(ln, N * C) + w(C * 3 * Cl + 3 * Cl), N, C, 3 * Cl, ln, a));  // qkv = ln1 @ w + b
  // The cpu backends' self-attention reads its 16-bit operands in place (backend/cpu/
  // attention_16.h: per-thread scratch, not the arena); flash attention's log-sum-exp form (the
  // typed defaults) stages its operands, the whole batch.
  if (k.attention_lse) call(st(a, N * Cl + N * 3 * Cl));  // attention
  if (tp1) {
    // matmul_residual_layernorm_forward: native, the fp32 sum (N C) and the bf16 copies of f32
    // inputs, then ln_2; else with an f32 input res and a 16-bit residual staged whole (attn
    // proj's w, b and ln_2's w, b); an f32 residual runs as its sequence.
    if (k.native_products) {
      call(native_residual_staging(N, Cl, C, a == f32, w32, k.chunk));
      call(rows(N, w(2 * C), (h(a) + h(ln)) * C));
    } else if (h(a)) {
      call(st(a, N * C) + st(ln, N * C) + st(a, N * Cl) + w(Cl * C + C + 2 * C));
    } else {
      call(fwd(st(a, N * Cl) + w(Cl * C + C), N, Cl, C, a, f32));  // residual += atty @ w + b
      call(rows(N, w(2 * C), h(ln) * C));            // ln_2
    }
  } else {
    // The partial product: fp32 sums, then its bias after the reduction; 16-bit sums (s), the
    // product rounded to 16 bits with the bias (rank 0's: every rank reserves it).
    if (h(s)) {
      call(fwd(st(s, N * C) + st(a, N * Cl) + w(Cl * C + C), N, Cl, C, a, s));
    } else {
      call(fwd(st(a, N * Cl) + w(Cl * C), N, Cl, C, a, f32));  // partial = atty @ w
      call(rows(Nl, w(C), 0));                               // its bias, after the reduction
    }
    if (sp) {
      call(rows(Nl * C, 0, h(a) + h(r) + h(s)));      // res2 = x + y
      call(rows(Nl, w(2 * C), (h(a) + h(ln)) * C));  // its LayerNorm's rows (gathered as stored)
    } else {
      call(rows(N * C, 0, h(a) + h(r) + h(s)));       // residual_layernorm_forward: res2 = x + y
      call(rows(N, w(2 * C), (h(a) + h(ln)) * C));  // ln2 = LayerNorm(res2)
    }
  }
  call(fwd(st(a, N * F) + st(ln, N * C) + w(C * F + F), N, C, F, ln, a));  // pre = ln2 @ w + b
  call(rows(N * F, 0, 2 * h(a)));                                          // gelu
  // res3: at tp 1 add_bias(res3, res2, b) then the product of fch_gelu, or (a 16-bit res3) res2
  // converted into res3 and the product with its bias accumulated there; at tp > 1 the product into
  // the partial sums, its bias, then add(res3, res2, y).
  if (tp1 && h(r)) {
    call(fwd(st(r, N * C) + st(a, N * F) + w(F * C + C), N, F, C, a, r));
  } else if (!tp1 && h(s)) {  // 16-bit sums: the product with rank 0's bias, then add(res3, res2, y)
    call(fwd(st(s, N * C) + st(a, N * F) + w(F * C + C), N, F, C, a, s));
    call(rows(Nl * C, 0, h(a) + h(r) + h(s)));
  } else {
    call(fwd(st(a, N * F) + w(F * C), N, F, C, a, f32));
    call(tp1 ? rows(N, w(C), h(a) * C) : std::max(rows(Nl, w(C), 0), rows(Nl * C, 0, h(a) + h(r))));
  }
  if (!k.training) return m;
  // --- backward ---
  // matmul_gelu_backward: the product (dout is dres, or under sequence parallelism its gather,
  // as stored: both dtype r), then gelu_backward in place.
  call(bwd(st(dF, N * F) + st(a, N * F) + st(r, N * C) + w(F * C), N, F, C, r, a, dF));
  call(rows(N * F, 0, 2 * h(dF) + h(a)));
  call(bwd(st(dC, N * C) + st(dF, N * F) + st(ln, N * C) + w(C * F), N, C, F, dF, ln, dC));  // fc -> dC
  // ln2's and ln1's layernorm_backward read 16-bit operands in place on the cpu backends
  // (backend/cpu/layernorm_16.h): nothing staged.
  call(bwd(st(dC, N * Cl) + st(a, N * Cl) + st(r, N * C) + w(Cl * C), N, Cl, C, r, a, dC));  // attn proj -> dC
  if (k.attention_lse) {
    call(st(d3C, N * 3 * Cl) + st(a, N * 3 * Cl) + st(dC, N * Cl) + st(a, N * Cl));  // its backward
  }
  call(bwd(st(dC, N * C) + st(d3C, N * 3 * Cl) + st(ln, N * C) + w(C * 3 * Cl), N, C, 3 * Cl, d3C, ln, dC));                 // qkv's matmul_backward -> dC
  return m;
}

namespace {
float* f32p(View v) {
  WEFT_CHECK(v.f32(), "the decoder variants run on fp32 tensors, got {}", dtype_name(v.dtype));
  return static_cast<float*>(v.data);
}
}  // namespace

TransformerBlock::TransformerBlock(const ModelConfig& cfg, Backend& backend, TensorParallel& tp,
                                   SequenceParallelLayerNorm& ln, ColumnParallelLinear& column, RowParallelLinear& row,
                                   bool causal)
    : C_(cfg.n_embd),
      F_(tp.part(cfg.ffn)),
      NH_(tp.part(cfg.n_head)),
      Cl_(tp.part(cfg.n_embd)),
      QKVl_(cfg.qkv_width_local(tp.size())),
      FCl_(tp.part(cfg.fc_width())),
      KVHl_(cfg.kv_heads_local(tp.size())),
      hd_(cfg.head_dim()),
      rot_(cfg.rope_dims()),
      kv_rep_(cfg.kv_replicas(tp.size())),
      alibi_(cfg.block.position == PositionKind::kAlibi),
      gelu_exact_(cfg.block.mlp == MlpKind::kGeluExact),
      swiglu_(cfg.block.mlp == MlpKind::kSwiglu),
      gqa_(cfg.kv_heads() != cfg.n_head),
      fused_norm_(cfg.block.norm == NormKind::kLayerNorm && cfg.block.bias),
      parallel_(cfg.block.parallel_residual),
      be_(backend),
      tp_(tp),
      ln_(ln),
      column_(column),
      row_(row),
      causal_(causal) {
  WEFT_CHECK(ln.rms() == (cfg.block.norm == NormKind::kRmsNorm), "the block's norm ({}) and its norm layer's differ",
             norm_name(cfg.block.norm));
  WEFT_CHECK(!alibi_ || causal, "ALiBi positions need causal attention");
}

void TransformerBlock::set_attention_lse(bool on) {
  WEFT_CHECK(!on || causal_, "flash attention (log-sum-exp) is only available for causal attention");
  WEFT_CHECK(!on || !alibi_, "flash attention (log-sum-exp) does not take ALiBi's bias");
  lse_ = on;
}

void TransformerBlock::attention_forward(View out, View att, CView qkv, int64_t B, int64_t T) {
  if (alibi_) {
    WEFT_CHECK(vw_.alibi != nullptr, "ALiBi positions without their slopes");
    be_.attention_forward_alibi_f32(f32p(out), f32p(att), static_cast<const float*>(qkv.data), vw_.alibi, B, T, Cl_, NH_);
  } else if (causal_) {
    be_.attention_forward(out, att, qkv, B, T, Cl_, NH_);
  } else {
    be_.bidir_attention_forward(out, att, qkv, B, T, Cl_, NH_);
  }
}

void TransformerBlock::qkv_forward(const LayerWeights& lw, LayerActs& a, int64_t N, int64_t T) {
  if (gqa_) {  // the product's kv_heads heads of k and v, each repeated for its query heads
    column_.forward(vw_.qkvc, a.ln1, lw.qkvw, lw.qkvb, N, C_, QKVl_);
    be_.expand_kv_f32(f32p(a.qkv), f32p(vw_.qkvc), N, NH_, KVHl_, hd_);
  } else {
    column_.forward(a.qkv, a.ln1, lw.qkvw, lw.qkvb, N, C_, 3 * Cl_);
  }
  // q and k side by side: 2 NH heads of hd from column 0.
  if (rot_ > 0) be_.rope_f32(f32p(a.qkv), vw_.rope_cos, vw_.rope_sin, N, T, 3 * Cl_, 2 * NH_, hd_, rot_, false);
}

void TransformerBlock::mlp_forward(const LayerWeights& lw, LayerActs& a, int64_t N) {
  if (swiglu_) {
    column_.forward(a.fch, a.ln2, lw.fcw, lw.fcb, N, C_, FCl_);
    be_.swiglu_forward_f32(f32p(a.fch_gelu), f32p(a.fch), N, F_);
  } else if (gelu_exact_) {  // the product, then erf's GELU
    column_.forward(a.fch, a.ln2, lw.fcw, lw.fcb, N, C_, F_);
    be_.gelu_erf_forward_f32(f32p(a.fch_gelu), f32p(a.fch), N * F_);
  } else {
    column_.forward_gelu(a.fch_gelu, a.fch, a.ln2, lw.fcw, lw.fcb, N, C_, F_);
  }
}

void TransformerBlock::forward(const LayerWeights& lw, CView x, LayerActs& a, int64_t B, int64_t T, bool to_gelu) {
  const int64_t N = B * T, C = C_, F = F_, NH = NH_, Cl = Cl_;
  ln_.forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, lw.ln1w, lw.ln1b, N, C);
  qkv_forward(lw, a, N, T);
  if (lse_) {
    be_.attention_forward_lse(a.atty, a.att /* lse (B,NH,T) */, a.qkv, B, T, Cl, NH);  // statistics stay fp32
  } else {
    attention_forward(a.atty, a.att, a.qkv, B, T);
    tp_.round(a.att, B * NH * T * T);
  }
  tp_.round(a.atty, N * Cl);
  if (fused_norm_ && !parallel_) {
    row_.forward_norm(ln_, a.res2, a.ln2, a.ln2_mean, a.ln2_rstd, x, a.atty, lw.attprojw, lw.attprojb, lw.ln2w,
                      lw.ln2b, N, Cl, C);
  } else {  // RMSNorm, no biases, or a parallel residual (the second norm reads x): the residual, then the norm
    row_.forward(a.res2, x, a.atty, lw.attprojw, lw.attprojb, N, Cl, C);
    ln_.forward(a.ln2, a.ln2_mean, a.ln2_rstd, parallel_ ? x : CView(a.res2), lw.ln2w, lw.ln2b, N, C);
  }
  mlp_forward(lw, a, N);
  if (to_gelu) return;
  row_.forward(a.res3, a.res2, a.fch_gelu, lw.fcprojw, lw.fcprojb, N, F, C);
}

View TransformerBlock::qkv_backward(const LayerWeights& lw, const LayerPtrs& lg, LayerActs& a, int64_t N, int64_t T,
                                    const BlockScratch& s) {
  // The rotation's backward is the opposite turn; the repeated kv heads' gradients sum.
  if (rot_ > 0) be_.rope_f32(f32p(s.d3C), vw_.rope_cos, vw_.rope_sin, N, T, 3 * Cl_, 2 * NH_, hd_, rot_, true);
  if (!gqa_) return column_.backward(s.dC, lg.qkvw, lg.qkvb, s.d3C, a.ln1, lw.qkvw, N, C_, 3 * Cl_);
  be_.reduce_kv_f32(f32p(vw_.qkvc), f32p(s.d3C), N, NH_, KVHl_, hd_);
  if (kv_rep_ == 1) return column_.backward(s.dC, lg.qkvw, lg.qkvb, vw_.qkvc, a.ln1, lw.qkvw, N, C_, QKVl_);
  // The kv head held here is also held by kv_rep_ - 1 other ranks, each with its own query heads:
  // its weight gradient is the sum of theirs (the input gradient's all-reduce already sums them).
  const TensorParallel::ReplicaCols kv{lg.qkvw, lg.qkvb, C_, QKVl_, Cl_, 2 * KVHl_ * hd_, kv_rep_};
  tp_.begin_replica_grads(kv, vw_.kv_sum);
  const View d = column_.backward(s.dC, lg.qkvw, lg.qkvb, vw_.qkvc, a.ln1, lw.qkvw, N, C_, QKVl_);
  tp_.end_replica_grads(kv, vw_.kv_sum);
  return d;
}

// The forward's steps in reverse.
void TransformerBlock::backward(const LayerWeights& lw, const LayerPtrs& lg, CView x, LayerActs& a, int64_t B, int64_t T,
                                bool full, const BlockScratch& s) {
  const int64_t N = B * T, C = C_, F = F_, NH = NH_, Cl = Cl_;
  const int64_t Nl = tp_.local_rows(N);  // rows of the residual stream held here
  if (full) forward(lw, x, a, B, T, true);  // rematerialise the layer in the workspace
  // The residual passes d(res3) on unchanged to res2; a parallel residual's attention branch
  // reads d(res3) itself, kept in dpar while the MLP branch's norm adds its part to dres.
  if (parallel_) be_.copy_device(s.dpar.data, 0, s.dres.data, 0, dtype_bytes(s.dres.dtype, Nl * C));
  View dln2;
  if (swiglu_) {  // d(silu(gate) up) from the product, then d(gate, up)
    row_.backward(s.dF, lg.fcprojw, lg.fcprojb, s.dres, a.fch_gelu, lw.fcprojw, N, F, C);
    be_.swiglu_backward_f32(f32p(s.dFC), f32p(a.fch), f32p(s.dF), N, F);
    dln2 = column_.backward(s.dC, lg.fcw, lg.fcb, s.dFC, a.ln2, lw.fcw, N, C, FCl_);
  } else if (gelu_exact_) {  // d(gelu(pre)) from the product, then d(pre) in place
    row_.backward(s.dF, lg.fcprojw, lg.fcprojb, s.dres, a.fch_gelu, lw.fcprojw, N, F, C);
    be_.gelu_erf_backward_f32(f32p(s.dF), f32p(a.fch), f32p(s.dF), N * F);
    dln2 = column_.backward(s.dC, lg.fcw, lg.fcb, s.dF, a.ln2, lw.fcw, N, C, F);
  } else {
    row_.backward_gelu(s.dF, lg.fcprojw, lg.fcprojb, s.dres, a.fch_gelu, lw.fcprojw, a.fch, N, F, C);
    dln2 = column_.backward(s.dC, lg.fcw, lg.fcb, s.dF, a.ln2, lw.fcw, N, C, F);
  }
  ln_.backward(s.dres, lg.ln2w, lg.ln2b, dln2, parallel_ ? x : CView(a.res2), lw.ln2w, a.ln2_mean, a.ln2_rstd, N, C);
  tp_.round(s.dres, Nl * C);
  // dres now holds d(res2) (parallel: d(res3) + the MLP branch's part of d(x)); the residual
  // passes it on unchanged to x.
  if (!full && !lse_ && a.att.data == s.att.data) {
    // Selective recompute: the attention probabilities again, from the stashed q, k, v (the
    // recomputed output goes to d3C, free until the attention backward writes it).
    attention_forward(s.d3C, s.att, a.qkv, B, T);
    tp_.round(s.att, B * NH * T * T);  // as the forward stored them
  }
  row_.backward(s.dC, lg.attprojw, lg.attprojb, parallel_ ? CView(s.dpar) : CView(s.dres), a.atty, lw.attprojw, N, Cl, C);
  if (lse_) {
    be_.attention_backward_lse(s.d3C, s.dC, a.qkv, a.atty, a.att /* lse */, B, T, Cl, NH);
  } else if (causal_) {
    be_.attention_backward(s.d3C, s.dC, a.qkv, a.att, B, T, Cl, NH);
  } else {
    be_.bidir_attention_backward(s.d3C, s.dC, a.qkv, a.att, B, T, Cl, NH);
  }
  tp_.round(s.d3C, N * 3 * Cl);
  const View dln1 = qkv_backward(lw, lg, a, N, T, s);
  ln_.backward(s.dres, lg.ln1w, lg.ln1b, dln1, x, lw.ln1w, a.ln1_mean, a.ln1_rstd, N, C);
  tp_.round(s.dres, Nl * C);
}

}  // namespace weft
