#include "model/climax/climax_description.h"

#include <algorithm>

#include "core/error.h"
#include "model/climax/climax_config.h"
#include "model/params.h"
#include "parallel/tp/mappings.h"

namespace weft {

ClimaxDescription::ClimaxDescription(const ClimaxRunSpec& spec) : s_(spec) {
  const ModelConfig& m = s_.model;
  WEFT_CHECK(m.family == &climax_family(), "ClimaxDescription of model '{}', a {} model", m.name, m.family_name());
  m.validate();
  check_tp_split(m, s_.tp);
  if (s_.B <= 0) throw_input("micro-batch {} must be positive", s_.B);
  L_ = num_patches(m);
  N_ = s_.B * L_;
  C_ = m.n_embd;
  Cl_ = C_ / s_.tp;
  Fl_ = m.ffn / s_.tp;
  NHl_ = m.n_head / s_.tp;
  V_ = m.vars;
  P2_ = patch_area(m);
  K_ = V_ * P2_;
  rf_ = 0;
  if (s_.training && s_.recompute == Recompute::kFull) {
    rf_ = s_.recompute_layers < 0 ? m.n_layer : std::min(s_.recompute_layers, m.n_layer);
  }
}

int64_t ClimaxDescription::front_params(int tp) const {
  const ModelConfig& m = s_.model;
  const int64_t C = m.n_embd, V = m.vars, P2 = patch_area(m), L = num_patches(m);
  return V * P2 * C + V * C      // token_embeds
         + V * C + C             // var_embed, var_query
         + (C * C + C) / tp      // var_agg.q
         + (2 * C * C + 2 * C) / tp  // var_agg.kv
         + C * C / tp + C        // var_agg.out_proj (bias replicated)
         + L * C                 // pos_embed
         + 2 * C;                // lead_time_embed
}

int64_t ClimaxDescription::layer_params(int tp) const {
  const int64_t C = s_.model.n_embd, F = s_.model.ffn;
  return 4 * C + (3 * C * C + 3 * C) / tp + C * C / tp + C + (C * F + F) / tp + F * C / tp + C;
}

int64_t ClimaxDescription::back_params() const {
  const ModelConfig& m = s_.model;
  const int64_t C = m.n_embd, K = int64_t{m.vars} * patch_area(m);
  return 2 * C + climax_fields(m).decoder_depth * (C * C + C) + C * K + K;
}

double ClimaxDescription::train_flops_per_token(const ModelConfig& m) {
  ClimaxRunSpec s;
  s.model = m;
  return 3.0 * ClimaxDescription(s).forward_flops_per_token();
}

double ClimaxDescription::layer_forward_flops_per_token() const {
  const double C = static_cast<double>(C_), F = static_cast<double>(s_.model.ffn), L = static_cast<double>(L_);
  return 2.0 * (4.0 * C * C + 2.0 * C * F) + 4.0 * C * L;
}

double ClimaxDescription::forward_flops_per_token() const {
  const double C = static_cast<double>(C_), V = static_cast<double>(V_), P2 = static_cast<double>(P2_);
  const double K = static_cast<double>(K_), Ld = static_cast<double>(s_.model.n_layer);
  const double front = 2.0 * V * P2 * C + 4.0 * V * C * C + 4.0 * V * C + 2.0 * C * C;
  const double back = 2.0 * (static_cast<double>(climax_fields(s_.model).decoder_depth) * C * C + C * K);
  return front + Ld * layer_forward_flops_per_token() + back;
}

double ClimaxDescription::recompute_flops_per_token() const {
  return static_cast<double>(rf_) * layer_forward_flops_per_token();
}

int64_t ClimaxDescription::front_stash_elems() const {
  // patches (V,N,p^2), tokens X (V,N,C), kv (V,N,2Cl), q (Cl), probabilities (N,NHl,V),
  // aggregated (N,Cl), lead times (B), the blocks' input (N,C).
  return V_ * N_ * P2_ + V_ * N_ * C_ + V_ * N_ * 2 * Cl_ + Cl_ + N_ * NHl_ * V_ + N_ * Cl_ + s_.B + N_ * C_;
}

TypedElems ClimaxDescription::layer_elems(bool output) const {
  // The shared block's LayerActs (model/block.h's carve_layer), the probabilities (B,NHl,L,L)
  // included; no sequence parallelism (N rows everywhere).
  return weft::layer_elems(N_, N_, C_, Cl_, Fl_, s_.B * NHl_ * L_ * L_, true, output, layer_dtypes());
}

TypedElems ClimaxDescription::layer_stash(int64_t i) const {
  if (i < rf_) return {0, N_ * C_};  // a fully recomputed layer keeps its output only (f32)
  return layer_elems(true);
}

int64_t ClimaxDescription::back_stash_elems() const {
  // final norm (N,C) + statistics (2N); per decoder layer pre-activation and GELU (2 N C);
  // the predictions (N,K).
  return N_ * C_ + 2 * N_ + 2 * int64_t{climax_fields(s_.model).decoder_depth} * N_ * C_ + N_ * K_;
}

TypedElems ClimaxDescription::stash() const {
  TypedElems e{0, front_stash_elems() + back_stash_elems()};
  for (int64_t i = 0; i < s_.model.n_layer; ++i) e += layer_stash(i);
  return e;
}

int64_t ClimaxDescription::staging_elems() const {
  if (s_.precision == Precision::kFp32) return 0;
  int64_t blocks = 0;
  if (s_.model.n_layer > 0) {
    BlockStaging k;
    k.N = k.Nl = N_, k.C = C_, k.Cl = Cl_, k.F = Fl_;
    k.tp = s_.tp;
    k.training = s_.training;
    k.dt = layer_dtypes();  // the gradient scratch stays f32
    k.w = s_.param_dtype;
    k.chunk = s_.staging_chunk;
    k.native_products = s_.native_products;
    blocks = block_staging_elems(k);
  }
  return std::max(blocks, ends_staging_elems());
}

int64_t ClimaxDescription::ends_staging_elems() const {
  // The front's and the back's tensors are f32 (climax.cc's front_forward, back_forward,
  // back_backward, front_backward): their calls stage the 16-bit weights and biases they read,
  // or, with native products, a product stages bf16 copies of its f32 inputs (2 to an element).
  const DType pd = s_.param_dtype;
  const bool w32 = pd == DType::kF32, q32 = w32, native = s_.native_products;
  const int64_t ch = s_.staging_chunk;
  const auto w = [pd](int64_t n) { return staged_elems(pd, n); };
  // matmul_forward, out (n, OUT) = inp (n, IN) @ w: exact, the 16-bit weights (and bias) staged;
  // native, the bf16 copies of its f32 operands (backend/staging.h).
  const auto fwd = [&](int64_t staged16, int64_t n, int64_t IN, int64_t OUT, bool inp32) {
    return native ? native_product_staging(n, OUT, IN, inp32, w32, false, ch) : staged16;
  };
  // matmul_backward with f32 dout (dinp = dout @ w^T when with_dinp, then dw += inp^T @ dout).
  const auto bwd = [&](int64_t staged16, int64_t n, int64_t IN, int64_t OUT, bool inp32, bool with_dinp) {
    if (!native) return staged16;
    return std::max(with_dinp ? native_product_staging(n, IN, OUT, true, w32, false, ch) : 0,
                    native_product_staging(IN, OUT, n, inp32, true, false, ch));
  };
  const auto ones = [&](int64_t rows) { return native ? native_product_staging(1, C_, rows, true, true, false, ch) : 0; };
  const int64_t N = N_, C = C_, Cl = Cl_, K = K_, P2 = P2_, V = V_, L = L_, B = s_.B;
  const int64_t pos = staged_rows_elems(L, 0, w32 ? 0 : C, ch);
  int64_t m = std::max({fwd(w(P2 * C + C), N, P2, C, true),        // a variable's patch embedding
                        w(C),                                      // its variable embedding; biases alone
                        fwd(w(C * 2 * Cl + 2 * Cl), V * N, C, 2 * Cl, true),  // k|v of the variable tokens
                        fwd(w(C + C * Cl + Cl), 1, C, Cl, q32),    // the query's projection (a parameter)
                        fwd(w(2 * C), B, 1, C, true),              // the lead-time embedding
                        pos,                                       // the positions, added per sample
                        fwd(w(Cl * C), N, Cl, C, true),            // out_proj
                        w(2 * C),                                  // the final LayerNorm
                        fwd(w(C * C + C), N, C, C, true),          // a decoder layer
                        fwd(w(C * K + K), N, C, K, true)});        // the prediction head
  if (!s_.training) return m;
  m = std::max({m, bwd(w(C * K), N, C, K, true, true),           // the head's backward
                bwd(w(C * C), N, C, C, true, true),              // a decoder layer's
                bwd(w(Cl * C), N, Cl, C, true, true),            // out_proj's
                ones(L),                                         // the lead embedding's gradient (column sums)
                bwd(w(C), B, 1, C, true, false),                 // the lead-time embedding's
                bwd(w(C * 2 * Cl), V * N, C, 2 * Cl, true, true),  // k|v's
                bwd(w(C + C * Cl), 1, C, Cl, q32, true),         // the query's
                ones(N),                                         // a variable embedding's gradient
                bwd(w(P2 * C), N, P2, C, true, false)});         // a patch embedding's
  return m;
}

TypedElems ClimaxDescription::workspace_tensors() const {
  const int64_t N = N_, C = C_, Cl = Cl_, F = Fl_;
  // Both modes: targets (N,K), weights (L,K) of one sample, row losses (B), ones (N), the lead embedding (B,C),
  // the residual base (N,C).
  TypedElems e{0, N * K_ + L_ * K_ + s_.B + N + s_.B * C + N * C};
  if (!s_.training) return e;
  // dres, dC (N,C), d3C (N,3Cl), dF (N,F); dX (V,N,C), dkv (V,N,2Cl), dagg (N,Cl), dq (Cl),
  // dquery (C), dlead (B,C); the decoder's two (N,C).
  e.f32 += 2 * N * C + N * 3 * Cl + N * F + V_ * N * C + V_ * N * 2 * Cl + N * Cl + Cl + C + s_.B * C + 2 * N * C;
  if (rf_ > 0) e += layer_elems(false);  // the rematerialised layer (its output stays in the stash)
  return e;
}

EndsWork ClimaxDescription::ends_work() const {
  const double N = static_cast<double>(N_), C = static_cast<double>(C_), Cl = static_cast<double>(Cl_);
  const double V = static_cast<double>(V_), P2 = static_cast<double>(P2_), K = static_cast<double>(K_);
  const double NHl = static_cast<double>(NHl_), D = static_cast<double>(climax_fields(s_.model).decoder_depth);
  // The query attention: reads k|v and the query, writes the probabilities and the output.
  Kernel att = Kernel::memory(V * N * 2 * Cl + Cl + N * NHl * V + N * Cl);
  att.flops = 4 * N * V * Cl;
  Kernel att_back = att;
  att_back.elems *= 2;
  att_back.flops *= 2;
  EndsWork w;
  // Forward: the patch embeddings + the variable embedding; k|v (column-parallel), the query;
  // the attention; the lead-time and position base; out_proj (row-parallel) + its bias and the base.
  w.front_forward.kernels = {Kernel::product(N, C, P2, V), Kernel::memory(2 * V * N * C), Kernel::product(V * N, 2 * Cl, C),
                             Kernel::product(1, Cl, C),     att,
                             Kernel::memory(2 * N * C),    Kernel::product(N, C, Cl),
                             Kernel::memory(3 * N * C)};
  w.front_forward.tp = {{"all_reduce", N * C}};
  // Backward: out_proj's two products, the base's gradients (column sums), the attention's
  // backward, k|v's and the query's two products, the variable embedding's column sums and the
  // patch embeddings' dW.
  w.front_backward.kernels = {Kernel::product_abt(N, Cl, C),
                              Kernel::product_atb(Cl, C, N),
                              Kernel::memory(2 * N * C),
                              att_back,
                              Kernel::product_abt(V * N, C, 2 * Cl),
                              Kernel::product_atb(C, 2 * Cl, V * N),
                              Kernel::product_abt(1, C, Cl),
                              Kernel::product_atb(C, Cl, 1),
                              Kernel::memory(V * N * C),
                              Kernel::product_atb(P2, C, N, V)};
  w.front_backward.tp = {{"all_reduce", V * N * C}, {"all_reduce", C, false, true}};
  // Back, replicated: final LayerNorm, decoder_depth x (Linear(C, C) + GELU), Linear(C, K), the
  // weighted MSE (reads the predictions, targets and weights; writes the gradient).
  // The decoder's GELUs (the tanh form) name their function (a CPU prices its rate).
  Kernel gelu = Kernel::memory(2 * N * C, D), gelu_back = Kernel::memory(3 * N * C, D);
  gelu.function = "gelu", gelu.functions = N * C;
  gelu_back.function = "gelu_backward", gelu_back.functions = N * C;
  w.back_forward.kernels = {Kernel::memory(2 * N * C), Kernel::product(N, C, C, 1, D), gelu, Kernel::product(N, K, C),
                            Kernel::memory(4 * N * K)};
  w.back_backward.kernels = {Kernel::product_abt(N, C, K),       Kernel::product_atb(C, K, N),
                             Kernel::product_abt(N, C, C, 1, D), Kernel::product_atb(C, C, N, 1, D),
                             gelu_back,                          Kernel::memory(4 * N * C)};
  return w;
}

AcceleratorMemory ClimaxDescription::accelerator_memory(const AcceleratorOptions& o) const {
  const double e = o.e;
  const double L = static_cast<double>(L_), B = static_cast<double>(s_.B), NHl = static_cast<double>(NHl_);
  const double probs = B * NHl * L * L, lse = B * NHl * L;
  const double kept_layers = static_cast<double>(s_.model.n_layer - rf_);
  double act = static_cast<double>(stash_elems()) * e, ws = static_cast<double>(workspace_elems()) * e;
  if (o.flash_attention) {
    // FlashAttention (Dao et al. 2022) keeps a layer's fp32 log-sum-exp instead of its
    // probabilities, in the stash of every layer that is not recomputed and in the
    // rematerialised layer.
    act -= kept_layers * (probs * e - lse * 4);
    if (rf_ > 0) ws -= probs * e - lse * 4;
  }
  AcceleratorMemory r;
  r.per_micro_batch = act;
  r.workspace = ws;
  const int t = s_.tp;
  r.front_gathered = static_cast<double>(front_params(t));
  r.slot = static_cast<double>(std::max<int64_t>({1, s_.model.n_layer > 0 ? layer_params(t) : 0, back_params()}));
  return r;
}

int64_t ClimaxDescription::tp_scratch_elems() const {
  return TensorParallel::scratch_elems(s_.tp, false, N_, C_);
}

}  // namespace weft
