#include "model/gpt/gpt_description.h"

#include <algorithm>

#include "core/error.h"
#include "model/block_memory.h"
#include "parallel/tp/mappings.h"

namespace weft {

namespace {

// One layer's parameters on one of t ranks, tensor by tensor as params.cc lays them out
// (Shoeybi et al. 2019, sec. 3): c_attn's columns split by whole heads (q, k and v each), attn.c_proj's
// and mlp.c_proj's rows split, c_fc's columns split (gate and up each); the norms and the two
// row-parallel biases (added once, after the all-reduce) replicated. The variant decides the
// widths (QKV = C + 2 KV, FC = F or 2F) and which biases exist.
int64_t layer_params(const ModelConfig& m, int64_t t) {
  const int64_t C = m.n_embd, F = m.ffn, QKVl = m.qkv_width_local(static_cast<int>(t)), FC = m.fc_width();
  const bool bias = m.block.bias, norm_bias = bias && m.block.norm == NormKind::kLayerNorm;
  const int64_t ln = C + (norm_bias ? C : 0);                   // ln_1 / ln_2: weight (C), bias (C)
  // c_attn (C, QKVl) + (QKVl): QKV/t, or with fewer kv heads than ranks C/t + 2 head_dim (one
  // replicated kv head a rank).
  const int64_t qkv = C * QKVl + (bias ? QKVl : 0);
  const int64_t attn_proj = (C / t) * C + (bias ? C : 0);       // attn.c_proj (C/t, C) + (C)
  const int64_t fc = C * (FC / t) + (bias ? FC / t : 0);        // c_fc (C, FC/t) + (FC/t)
  const int64_t fc_proj = (F / t) * C + (bias ? C : 0);         // mlp.c_proj (F/t, C) + (C)
  return 2 * ln + qkv + attn_proj + fc + fc_proj;
}

// The parameters of a part of `layers` layers on one of t ranks (t = 1: whole tensors).
GptParamCounts param_counts(const ModelConfig& m, int64_t t, int64_t layers, const StageSpec& st) {
  GptParamCounts p;
  const int64_t C = m.n_embd;
  const bool learned = m.block.position == PositionKind::kLearned, tied = m.block.tie_embeddings;
  p.layer = layer_params(m, t);
  p.embedding = m.padded_vocab / t * C + (learned ? int64_t{m.n_ctx} * C : 0);  // wte (Vp/t rows), wpe (replicated)
  p.final_norm = m.block.norm == NormKind::kLayerNorm && m.block.bias ? 2 * C : C;  // a bias or not
  p.head = tied ? 0 : m.padded_vocab / t * C;  // lm_head (Vp/t rows)
  // A tied output head reads wte: a part with the head holds the embedding group too.
  p.part = layers * p.layer + (st.embedding || (st.head && tied) ? p.embedding : 0) + (st.head ? p.back() : 0);
  return p;
}

// GPT::reserve's automatic chunk: about 2^25 logits (128 MiB) at a time, a multiple of 256
// rows, at least 256; never more rows than the micro-batch has.
int64_t resolve_head_chunk(int64_t requested, int64_t Vl, int64_t N) {
  const int64_t rows = requested > 0 ? requested : std::max<int64_t>(256, (int64_t{1} << 25) / Vl / 256 * 256);
  return std::min(rows, N);
}

}  // namespace

GptDescription::GptDescription(const GptRunSpec& spec) : s_(spec) {
  const ModelConfig& m = s_.model;
  m.validate();
  s_.stage = resolve_stage(m, s_.stage);
  check_tp_split(m, s_.tp);
  const int64_t t = s_.tp;
  nl_ = s_.stage.num_layers;
  rank_ = param_counts(m, t, nl_, s_.stage);
  full_ = param_counts(m, 1, nl_, s_.stage);
  sp_ = s_.sequence_parallel && t > 1;
  N_ = s_.B * s_.T;
  if (sp_ && N_ % t != 0) {
    throw_input("sequence parallelism: micro-batch {} x sequence {} = {} tokens are not divisible by tp {}", s_.B,
                s_.T, N_, t);
  }
  Nl_ = sp_ ? N_ / t : N_;
  C_ = m.n_embd, Cl_ = C_ / t, Fl_ = m.ffn / t, NHl_ = m.n_head / t, Vl_ = m.padded_vocab / t;
  QKVl_ = m.qkv_width_local(s_.tp), FCl_ = m.fc_width() / t;
  kv_rep_ = m.kv_replicas(s_.tp);
  alibi_ = m.block.position == PositionKind::kAlibi;
  rms_ = m.block.norm == NormKind::kRmsNorm;
  gqa_ = m.kv_heads() != m.n_head;
  swiglu_ = m.block.mlp == MlpKind::kSwiglu;
  parallel_ = m.block.parallel_residual;
  rot_ = m.rope_dims();
  head_chunk_ = resolve_head_chunk(s_.head_chunk, Vl_, N_);
  // GPT::set_recompute: kFull recomputes the part's first recompute_layers layers (Megatron's
  // "block" method), the others keep everything; recomputing happens in training only.
  if (s_.training && s_.recompute == Recompute::kFull) {
    rf_ = s_.recompute_layers < 0 ? nl_ : std::min<int64_t>(s_.recompute_layers, nl_);
  }
  // Selective recompute rebuilds the probabilities from the stashed q, k, v; flash attention
  // (attention_lse) keeps none, so there is nothing to recompute: it acts as none.
  selective_ = s_.training && s_.recompute == Recompute::kSelective && !s_.attention_lse;
}

int64_t GptDescription::total_params() const {
  const GptParamCounts whole = param_counts(s_.model, 1, s_.model.n_layer, StageSpec{});
  return whole.part;
}

double GptDescription::train_flops_per_token(const ModelConfig& c, int64_t T) {
  const double C = c.n_embd, F = c.ffn, L = c.n_layer, QKV = static_cast<double>(c.qkv_width());
  const double FC = static_cast<double>(c.fc_width());
  const double matmul_params = L * (C * QKV + C * C + C * FC + F * C) + static_cast<double>(c.padded_vocab) * C;
  return 6.0 * matmul_params + 12.0 * L * C * static_cast<double>(T);
}

double GptDescription::attention_core_forward_flops_per_token() const {
  // Per token: q k^T over T keys (2 C T) and the probabilities times v (2 C T).
  return 4.0 * static_cast<double>(C_) * static_cast<double>(s_.T);
}

double GptDescription::layer_forward_flops_per_token() const {
  const double C = static_cast<double>(C_), F = s_.model.ffn, QKV = static_cast<double>(s_.model.qkv_width());
  const double FC = static_cast<double>(s_.model.fc_width());
  return 2.0 * (C * QKV + C * C + C * FC + F * C) + attention_core_forward_flops_per_token();
}

double GptDescription::recompute_flops_per_token() const {
  const double full = static_cast<double>(rf_) * layer_forward_flops_per_token();
  const double selective = selective_ ? static_cast<double>(nl_) * attention_core_forward_flops_per_token() : 0.0;
  return full + selective;
}

int64_t GptDescription::att_stats_elems() const {
  return s_.attention_lse ? s_.B * NHl_ * s_.T : s_.B * NHl_ * s_.T * s_.T;
}

TypedElems GptDescription::layer_elems(bool with_att, bool output) const {
  // gpt.h's LayerActs, in carve_layer's order: ln1 (N,C) gathered under sequence parallelism,
  // its mean and rstd (Nl each), qkv (N,3Cl), the attention statistics (the probabilities
  // (B,NHl,T,T), or the log-sum-exp (B,NHl,T) with attention_lse), atty (N,Cl),
  // res2 (Nl,C), ln2 (N,C) + mean, rstd, fch and its GELU (N,Fl each), res3 (Nl,C).
  // The variants: RMSNorm keeps rstd alone, SwiGLU's fc output is (N, 2Fl).
  return weft::layer_elems(N_, Nl_, C_, Cl_, Fl_, att_stats_elems(), with_att, output, layer_dtypes(), FCl_, rms_);
}

TypedElems GptDescription::layer_elems() const { return layer_elems(true, true); }

TypedElems GptDescription::layer_stash(int64_t i) const {
  WEFT_CHECK(i >= 0 && i < nl_, "layer {} of a part of {} layers", i, nl_);
  TypedElems e;
  if (i < rf_) {  // full: the layer's output only (the residual stream's storage)
    (residual_dtype() == DType::kF32 ? e.f32 : e.act) += residual_elems();
    return e;
  }
  return layer_elems(!selective_, true);     // selective: no probabilities
}

TypedElems GptDescription::stash() const {
  // The part's input (Nl,C; the residual stream's storage); on the last stage ln_f's output
  // (N,C; the LayerNorm outputs' storage) and its statistics (Nl each).
  TypedElems e;
  const auto add = [&e](int64_t n, DType d) { (d == DType::kF32 ? e.f32 : e.act) += n; };
  add(residual_elems(), residual_dtype());
  if (s_.stage.head) {
    (layer_dtypes().ln == DType::kF32 ? e.f32 : e.act) += N_ * C_;
    e.f32 += (rms_ ? 1 : 2) * Nl_;  // its statistics (RMSNorm: rstd)
  }
  add(rf_ * residual_elems(), residual_dtype());  // the fully recomputed layers' outputs
  e += layer_elems(!selective_, true) * (nl_ - rf_);
  return e;
}

TypedElems GptDescription::workspace_tensors() const {
  // gpt.h's Workspace, in GPT::build_workspace's order.
  const int64_t N = N_, Nl = Nl_, C = C_, Cl = Cl_, F = Fl_;
  const LayerDtypes dt = layer_dtypes();
  TypedElems e;
  const auto add = [&e](int64_t n, DType d) { (d == DType::kF32 ? e.f32 : e.act) += n; };
  if (s_.stage.head) {
    e.f32 += N + 3 * head_chunk_;   // losses, stats
    add(head_chunk_ * Vl_, dt.act);  // logits
  }
  if (s_.training) {
    add(Nl * C, dt.res);              // dres
    add(N * C, dC_dtype());           // dC
    add(N * 3 * Cl + N * F, dt.act);  // d3C, dF
  }
  // The recomputed attention statistics: the probabilities (selective), or those of the
  // rematerialised layer (full: the probabilities, or the log-sum-exp with attention_lse).
  if (rf_ > 0 || (selective_ && nl_ > 0)) add(att_stats_elems(), dt.att);
  if (rf_ > 0) e += layer_elems(false, false);  // the rest of that layer
  add(qkvc_elems(), dt.act);  // grouped-query attention's compact q, k, v (and their gradient)
  add(dfc_elems(), dt.act);   // SwiGLU's fc gradient
  add(dpar_elems(), dt.res);  // a parallel residual's d(res3)
  e.f32 += kv_sum_elems();    // the replicated kv heads' gradient sums
  e.f32 += alibi_elems();     // ALiBi's slopes
  e.f32 += ln_bias_elems();   // a bias-free LayerNorm's zeros and gradient sink
  e.f32 += 2 * rope_table_elems();  // the rotary cos and sin tables
  return e;
}

int64_t GptDescription::kv_sum_elems() const {
  if (!s_.training) return 0;
  const ModelConfig& m = s_.model;
  return TensorParallel::replica_scratch_elems(s_.tp, kv_rep_, m.n_embd, m.block.bias,
                                               2 * int64_t{m.kv_heads_local(s_.tp)} * m.head_dim());
}

int64_t GptDescription::token_elems() const {
  return (s_.stage.embedding ? N_ : 0) + (s_.stage.head ? N_ : 0);  // input ids, target ids
}

int64_t GptDescription::tp_scratch_elems() const {
  // TensorParallel's: a LayerNorm's weight gradient (2C), the partial sums of a row-parallel
  // product (N,C; tp > 1), this rank's rows of a region (Nl,C; sequence parallel).
  return TensorParallel::scratch_elems(s_.tp, sp_, N_, C_);
}

int64_t GptDescription::tp_scratch_bytes() const {
  return TensorParallel::scratch_bytes(s_.tp, sp_, N_, C_, tp_sum_dtype());
}

int64_t GptDescription::workspace_elems() const {
  return workspace_tensor_elems() + token_elems() + tp_scratch_elems();
}

int64_t GptDescription::workspace_bytes() const {
  return workspace_tensors().bytes(act_dtype()) + 4 * token_elems() + tp_scratch_bytes();
}

int64_t GptDescription::staging_elems() const {
  if (s_.precision == Precision::kFp32) return 0;
  if (!s_.model.block.is_default()) {
    throw_input("model '{}': the decoder variants ({}) run with fp32 storage only for now, not {}", s_.model.name,
                "rotary positions, RMSNorm, no biases, SwiGLU, grouped-query attention, an untied head",
                precision_name(s_.precision));
  }
  return std::max({nl_ > 0 ? block_staging_elems() : 0, s_.stage.head ? head_staging_elems() : 0,
                   s_.stage.embedding ? embedding_staging_elems() : 0});
}

int64_t GptDescription::block_staging_elems() const {
  BlockStaging k;
  k.N = N_, k.Nl = Nl_, k.C = C_, k.Cl = Cl_, k.F = Fl_;
  k.tp = s_.tp;
  k.sequence_parallel = sp_;
  k.attention_lse = s_.attention_lse;
  k.training = s_.training;
  k.dt = layer_dtypes();
  k.dC = dC_dtype();
  k.d3C = k.dF = act_dtype();
  k.sum = tp_sum_dtype();
  k.w = s_.param_dtype;
  k.chunk = s_.staging_chunk;
  k.native_products = s_.native_products;
  return weft::block_staging_elems(k);
}

int64_t GptDescription::head_staging_elems() const {
  // GPT's own calls on the last stage: ln_f, the logits of a chunk and its cross-entropy, and
  // backward the head's two products and ln_f's backward, with the 16-bit weights each reads.
  // The logits (and the gradient that replaces them) are stored in the activations' dtype; a
  // native product stages bf16 copies of its f32 inputs (2 to an element).
  const DType ln = layer_dtypes().ln, dC = dC_dtype(), L = act_dtype();
  const int64_t Nl = Nl_, C = C_, h = head_chunk_, V = Vl_;
  const auto st = staged_elems;
  const auto w = [this](int64_t n) { return staged_elems(s_.param_dtype, n); };
  // A product C (M,N) = op(A) (M,K) op(B) (K,N): exact, its staged 16-bit operands; native, the
  // bf16 copies of its f32 operands (backend/staging.h).
  const auto prod = [this](int64_t staged16, int64_t M, int64_t Nn, int64_t K, bool a32, bool b32, bool c16) {
    return s_.native_products ? native_product_staging(M, Nn, K, a32, b32, c16, s_.staging_chunk) : staged16;
  };
  const bool ln32 = ln == DType::kF32, w32 = s_.param_dtype == DType::kF32, L32 = L == DType::kF32;
  const int64_t x16 = residual_dtype() == DType::kF32 ? 0 : C;  // ln_f's input row, 16-bit
  int64_t m = staged_rows_elems(Nl, w(2 * C), x16 + (ln32 ? 0 : C), s_.staging_chunk);  // ln_f
  m = std::max(m, prod(st(ln, h * C) + w(V * C) + st(L, h * V), h, V, C, ln32, w32, !L32));  // logits = lnf @ wte^T
  m = std::max(m, staged_rows_elems(h, 0, L32 ? 0 : V, s_.staging_chunk));  // the cross-entropy's rows
  if (s_.training) {
    m = std::max(m, prod(st(L, h * V) + st(ln, h * C), V, C, h, L32, ln32, false));  // dwte += dlogits^T lnf
    m = std::max(m, prod(st(L, h * V) + st(dC, h * C) + w(V * C), h, C, V, L32, w32, dC != DType::kF32));  // dlnf = dlogits wte
    // ln_f's layernorm_backward reads its 16-bit operands in place (backend/cpu/layernorm_16.h).
  }
  return m;
}

int64_t GptDescription::embedding_staging_elems() const {
  // The lookup widens a 16-bit table a row at a time into its output rows, with (tp rank 0,
  // the largest) their positions' rows of wpe; a 16-bit output (at tp > 1 the partial sums, of
  // the residual stream's dtype) is computed in fp32 a chunk of rows at a time (a reduced sum's
  // copy into out stages nothing). Its backward stages a 16-bit gradient of the output (under
  // sequence parallelism its gather, as stored) a chunk of rows at a time.
  const int64_t out16 = staged_elems(tp_sum_dtype(), C_);
  // An f32 table: chunks of whole samples (embedding_forward's staged rows); a 16-bit one: chunks
  // of rows, with their positions' rows widened (embedding_forward_16).
  int64_t m = s_.param_dtype == DType::kF32 ? staged_rows_elems(s_.B, 0, out16 * s_.T, s_.staging_chunk)
                                            : staged_rows_elems(N_, 0, out16 + C_, s_.staging_chunk);
  if (s_.training) m = std::max(m, staged_rows_elems(N_, 0, staged_elems(residual_dtype(), C_), s_.staging_chunk));
  return m;
}


EndsWork GptDescription::ends_work() const {
  const double t = s_.tp, N = static_cast<double>(N_), h = static_cast<double>(C_);
  const double rep = sp_ ? t : 1.0, V = static_cast<double>(Vl_);
  EndsWork w;
  // Embedding: gather rows + add positions (memory-bound); the vocab-parallel embedding sums its
  // partial rows over tp (Shoeybi et al. 2019).
  w.front_forward.kernels = {Kernel::memory(3 * N * h)};
  w.front_forward.tp = {{"all_reduce", N * h}};
  w.front_backward.kernels = {Kernel::memory(3 * N * h)};
  // Head: final LayerNorm (read x, write y), the logits, the cross-entropy (read the logits in
  // the storage precision, computing in fp32, write the gradients in place); backward the
  // LayerNorm's gradient (reads 4), the head's two products and the cross-entropy again.
  // Three passes over the logits (their working set N V: a CPU's caches may hold it).
  const Kernel ce = Kernel::memory(N * V, 3);
  // The products as the vocab-parallel head runs them (parallel/tp/layers.cc): logits = x wte^T,
  // dwte += dlogits^T x, dx = dlogits wte.
  w.back_forward.kernels = {Kernel::memory(2 * N * h / rep), Kernel::product_abt(N, V, h), ce};
  w.back_backward.kernels = {Kernel::memory(4 * N * h / rep), Kernel::product(N, h, V), Kernel::product_atb(V, h, N),
                             ce};
  // The loss's per-token sums and maxima stay exact and fp32; the input gradient is an
  // activation gradient.
  w.back_backward.tp = {{"all_reduce", 3 * N, true, true}, {"all_reduce", N * h}};
  return w;
}

AcceleratorMemory GptDescription::accelerator_memory(const AcceleratorOptions& o) const {
  const ModelConfig& m = s_.model;
  const double e = o.e, t = s_.tp, layers = static_cast<double>(nl_);
  BlockShape k{static_cast<double>(s_.T), static_cast<double>(s_.B), static_cast<double>(C_),
               static_cast<double>(m.ffn), static_cast<double>(m.n_head), t, s_.sequence_parallel};
  k.kv = static_cast<double>(m.kv_heads_local(s_.tp)) * m.head_dim() * t;  // / t: this rank's kv width
  k.gated = swiglu_;
  AcceleratorMemory r;
  // A block's stash; under full recompute the recomputed blocks keep their input, the others
  // everything.
  const double kept = block_stash_bytes(k, e, !o.flash_attention, o.dropout);  // a block without recompute
  r.layer = s_.recompute == Recompute::kNone ? kept : block_stash_bytes(k, e, false, o.dropout);
  if (s_.recompute == Recompute::kFull) {
    const double rec = static_cast<double>(rf_);
    r.layer = (rec * block_checkpoint_bytes(k, e) + (layers - rec) * kept) / std::max(1.0, layers);
  }
  const double sb = k.s * k.b;
  const double sbh = sb * k.h;
  const double as2b = k.a * k.s * sb;
  const double rep = s_.sequence_parallel ? t : 1.0;
  // The final LayerNorm input and output, kept for the head's backward (Korthikanti et al. 2022
  // sec. 4.3: the output layer).
  if (s_.stage.head) r.per_micro_batch = 2 * sbh * e / rep;

  // Workspace: gradients of one layer's activations (residual stream, attention output, QKV,
  // MLP hidden: 3 sbh + 3 sbh/t + sbf/t elements, weft's Activations scratch), the
  // attention-score gradient when scores are materialised, the all-gathered input under sp.
  // (Grouped-query attention: the compact q, k, v gradient; SwiGLU: gate and up.)
  const double qkv_l = static_cast<double>(QKVl_), fc_w = static_cast<double>(m.fc_width());
  double ws = (3 * sbh / rep + sb * qkv_l + sb * fc_w / t) * e;
  if (!o.flash_attention) ws += as2b * e / t;
  if (s_.sequence_parallel) ws += sbh * e;
  if (s_.recompute == Recompute::kFull) {
    ws += kept;  // the layer being rematerialised
  } else if (s_.recompute == Recompute::kSelective && !o.flash_attention) {
    ws += as2b * e / t;  // the recomputed attention scores of one layer
  }
  // Head logits of one micro-batch, s b V/t, in fp32 for the softmax cross-entropy (Megatron-LM's
  // vocab-parallel cross-entropy upcasts them).
  if (s_.stage.head) ws += sb * static_cast<double>(Vl_) * 4;
  r.workspace = ws;
  // The pipeline's send + receive, activations + their gradients; ZeRO-3 gathers a block at a
  // time (the embedding group like the others).
  r.pipeline = 4 * sbh * e / rep;
  r.slot = static_cast<double>(rank_.layer);
  return r;
}

}  // namespace weft
