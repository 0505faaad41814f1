#include "model/gpt/gpt.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/error.h"
#include "model/gpt/gpt_config.h"
#include "model/gpt/gpt_description.h"
#include "model/gpt/gpt_variants.h"

namespace weft {

GPT::GPT(const ModelConfig& cfg, Backend& backend, bool local_store, int tp_size, int tp_rank, const StageSpec& stage)
    : cfg_(cfg), layout_(param_layout(cfg, tp_size, tp_rank, stage)),
      backend_(backend),
      tp_(backend, tp_size, tp_rank),
      ln_(tp_, cfg.ln_eps, cfg.block.norm == NormKind::kRmsNorm),
      column_(tp_),
      row_(tp_),
      embedding_(tp_, cfg.padded_vocab),
      head_(tp_, cfg.vocab_size, cfg.padded_vocab),
      block_(cfg, backend, tp_, ln_, column_, row_, /*causal=*/true) {
  WEFT_CHECK(cfg.family == &gpt_family(), "model '{}' is a {} model, not a GPT", cfg.name, cfg.family_name());
  if (local_store) {
    local_ = std::make_unique<LocalParamStore>(layout_, backend_);
    store_ = local_.get();
  }
}

void GPT::init(uint64_t seed) {
  std::vector<float> host(static_cast<size_t>(layout_.total()));
  init_params(layout_, seed, host.data());
  upload_params(host.data());
}

void GPT::upload_params(const float* host) {
  WEFT_CHECK(local_ != nullptr, "upload_params without a local store");
  backend_.copy_to_device(params(), 0, host, static_cast<size_t>(layout_.total()) * sizeof(float));
}

void GPT::download_grads(float* host) {
  WEFT_CHECK(local_ != nullptr, "download_grads without a local store");
  backend_.copy_to_host(host, grads(), 0, static_cast<size_t>(layout_.total()) * sizeof(float));
}

void GPT::zero_grads() {
  WEFT_CHECK(local_ != nullptr, "zero_grads without a local store");
  backend_.fill(grads(), DType::kF32, 0, layout_.total(), 0.0f);
}

double GPT::train_flops_per_token(const ModelConfig& c, int64_t T) { return GptDescription::train_flops_per_token(c, T); }

void GPT::set_recompute(Recompute mode, int full_layers) {
  recompute_ = mode;
  full_layers_ = full_layers;
}

int64_t GPT::activation_bytes() const {
  int64_t b = 0;
  for (const Activations& a : stash_) b += a.bytes();
  return b;
}

void GPT::reserve(int64_t B, int64_t T, bool training, int64_t head_chunk, int slots) {
  const ModelConfig& c = config();
  if (T > c.n_ctx) {
    throw_input("sequence length {} is longer than the model's context {} ({})", T, c.n_ctx, c.name);
  }
  if (B <= 0 || T <= 0) throw_input("batch {} and sequence length {} must be positive", B, T);
  slots = std::max(1, slots);
  if (ws_.B == B && ws_.T == T && acts_training_ == training && acts_rows_ == tp_.local_rows(B * T) &&
      acts_slots_ == slots && acts_recompute_ == recompute_ && acts_full_layers_ == full_layers_ &&
      (head_chunk == 0 || head_chunk == ws_.head_chunk)) {
    return;
  }
  tp_.check_rows(B, T);
  // The sizes come from the model's one description (model/gpt_description.h), which the
  // planner reads too; build_stash and build_workspace carve exactly that much.
  GptRunSpec spec;
  spec.model = c;
  spec.B = B;
  spec.T = T;
  spec.tp = tp_.size();
  spec.sequence_parallel = tp_.sequence_parallel();
  spec.recompute = recompute_;
  spec.recompute_layers = full_layers_;
  spec.precision = prec_;
  spec.head_chunk = head_chunk;
  spec.stage = layout_.stage();
  spec.training = training;
  // Flash attention where the backend offers it for this rank's heads at the storage precision
  // (the backend, the tensor-parallel split and the precision are set before reserve).
  // ALiBi's bias: the probabilities' path (the log-sum-exp kernels take no bias).
  attn_lse_ = backend_.offers(FusedOp::kAttentionLse) && c.block.position != PositionKind::kAlibi &&
              backend_.attention_lse_supports(tp_.part(c.n_embd), tp_.part(c.n_head), prec_);
  spec.attention_lse = attn_lse_;
  spec.param_dtype = store_ != nullptr ? store_->param_dtype() : DType::kF32;
  spec.staging_chunk = backend_.staging_chunk();
  spec.native_products = backend_.native_16bit_products();
  block_.set_attention_lse(attn_lse_);
  const GptDescription d(spec);
  head_chunk = d.head_chunk();
  slot_ = d.stash();
  act_dtype_ = d.act_dtype();
  dtypes_ = d.layer_dtypes();
  const int64_t Nl = tp_.local_rows(B * T);  // rows of the residual stream held here
  acts_training_ = training;
  acts_rows_ = Nl;
  acts_slots_ = slots;
  acts_recompute_ = recompute_;
  acts_full_layers_ = full_layers_;
  ws_.B = B;
  ws_.T = T;
  ws_.head_chunk = head_chunk;
  build_workspace(d);
  stash_.clear();
  stash_.resize(static_cast<size_t>(slots));
  build_stash(stash_[0]);
  cur_ = &stash_[0];
}

void GPT::build_workspace(const GptDescription& d) {
  const ModelConfig& c = config();
  const int64_t B = ws_.B, T = ws_.T, N = B * T, C = c.n_embd, F = tp_.part(c.ffn), NH = tp_.part(c.n_head);
  const int64_t Cl = tp_.part(C), Nl = acts_rows_, Vp = head_.vocab_rows(), head_chunk = ws_.head_chunk;
  const int64_t FC = tp_.part(c.fc_width());
  const bool training = acts_training_, head = layout_.stage().head, rms = c.block.norm == NormKind::kRmsNorm;
  bool any_full = false, any_recompute = false;
  const bool selective = recompute_ == Recompute::kSelective && !attn_lse_;  // lse: nothing to recompute
  for (int i = 0; i < layout_.num_layers() && training; ++i) {
    any_full = any_full || full_recompute(i);
    any_recompute = any_recompute || full_recompute(i) || selective;
  }
  const int64_t att_stats = attn_lse_ ? B * NH * T : B * NH * T * T;  // lse or probabilities
  tp_.release();  // every buffer goes before any is allocated again
  ws_.storage = DeviceBuffer();
  ws_.storage32 = DeviceBuffer();
  ws_.tokens = DeviceBuffer();
  carve_typed(backend_, ws_.storage, ws_.storage32, act_dtype_, d.workspace_tensors(), MemCategory::kWorkspace,
              "workspace", [&](TypedCarver& take) {
    const auto f32 = [&take](int64_t n) { return static_cast<float*>(take(n, DType::kF32).data); };
    ws_.losses = head ? f32(N) : nullptr;
    ws_.logits = head ? take(head_chunk * Vp, dtypes_.act) : View();
    ws_.stats = head ? f32(3 * head_chunk) : nullptr;
    ws_.dres = training ? take(Nl * C, dtypes_.res) : View();
    ws_.dC = training ? take(N * C, d.dC_dtype()) : View();
    ws_.d3C = training ? take(N * 3 * Cl, dtypes_.act) : View();
    ws_.dF = training ? take(N * F, dtypes_.act) : View();
    ws_.att = any_recompute ? take(att_stats, dtypes_.att) : View();
    ws_.layer = {};
    if (any_full) carve_layer(ws_.layer, take, N, Nl, C, Cl, F, ws_.att, false, dtypes_, FC, rms);
    ws_.qkvc = d.qkvc_elems() > 0 ? take(d.qkvc_elems(), dtypes_.act) : View();
    ws_.dfc = d.dfc_elems() > 0 ? take(d.dfc_elems(), dtypes_.act) : View();
    ws_.dpar = d.dpar_elems() > 0 ? take(d.dpar_elems(), dtypes_.res) : View();
    ws_.rope_cos = d.rope_table_elems() > 0 ? f32(d.rope_table_elems()) : nullptr;
    ws_.rope_sin = d.rope_table_elems() > 0 ? f32(d.rope_table_elems()) : nullptr;
    ws_.kv_sum = d.kv_sum_elems() > 0 ? f32(d.kv_sum_elems()) : nullptr;
    ws_.alibi = d.alibi_elems() > 0 ? f32(d.alibi_elems()) : nullptr;
    ws_.ln_zeros = d.ln_bias_elems() > 0 ? f32(d.ln_bias_elems()) : nullptr;
  });
  if (ws_.ln_zeros != nullptr) {  // a LayerNorm without bias reads zeros, its gradient goes to a sink
    backend_.fill(ws_.ln_zeros, DType::kF32, 0, d.ln_bias_elems(), 0.0f);
    ln_.set_missing_bias(ws_.ln_zeros, ws_.ln_zeros + C);
  }
  if (ws_.rope_cos != nullptr) upload_rope_tables(T);
  if (ws_.alibi != nullptr) upload_alibi_slopes();
  block_.set_variant_workspace({ws_.qkvc, ws_.rope_cos, ws_.rope_sin, ws_.kv_sum, ws_.alibi});
  ws_.tokens = DeviceBuffer(backend_, DType::kI32, d.token_elems(), MemCategory::kWorkspace);
  tp_.reserve(N, C, d.tp_sum_dtype());
  WEFT_CHECK(tp_.scratch_bytes() == d.tp_scratch_bytes(), "tensor-parallel scratch {} bytes, the description says {}",
             tp_.scratch_bytes(), d.tp_scratch_bytes());
  int32_t* tok = ws_.tokens.data<int32_t>();
  ws_.inputs = layout_.stage().embedding ? std::exchange(tok, tok + N) : nullptr;
  ws_.targets = head ? std::exchange(tok, tok + N) : nullptr;
  WEFT_CHECK(tok == ws_.tokens.data<int32_t>() + d.token_elems(), "token ids {} != {}",
             tok - ws_.tokens.data<int32_t>(), d.token_elems());
  // The typed ops' staging arena for the 16-bit tensors (backend.h), reserved now so that no
  // step grows it.
  if (d.staging_elems() > 0) backend_.staging(d.staging_elems());
}

void GPT::build_stash(Activations& A) {
  const ModelConfig& c = config();
  const int64_t B = ws_.B, T = ws_.T, N = B * T, C = c.n_embd, F = tp_.part(c.ffn), NH = tp_.part(c.n_head);
  const int64_t Cl = tp_.part(C), Nl = acts_rows_, FC = tp_.part(c.fc_width());
  const bool rms = c.block.norm == NormKind::kRmsNorm;
  const int nl = layout_.num_layers();
  const int64_t att_stats = attn_lse_ ? B * NH * T : B * NH * T * T;  // lse or probabilities
  const bool selective = acts_training_ && recompute_ == Recompute::kSelective && !attn_lse_;
  A.built = true;
  carve_typed(backend_, A.storage, A.storage32, act_dtype_, slot_, MemCategory::kActivations, "activation",
              [&](TypedCarver& take) {
    const auto f32 = [&take](int64_t n) { return static_cast<float*>(take(n, DType::kF32).data); };
    A.encoded = take(Nl * C, dtypes_.res);
    A.layers.resize(static_cast<size_t>(nl));
    for (int i = 0; i < nl; ++i) {
      LayerActs& a = A.layers[static_cast<size_t>(i)];
      if (acts_training_ && full_recompute(i)) {
        a = ws_.layer;  // everything but the output lives in the workspace
        a.res3 = take(Nl * C, dtypes_.res);
        continue;
      }
      carve_layer(a, take, N, Nl, C, Cl, F, selective ? ws_.att : take(att_stats, dtypes_.att), true, dtypes_, FC, rms);
    }
    if (layout_.stage().head) {
      A.lnf = take(N * C, dtypes_.ln);
      A.lnf_mean = rms ? nullptr : f32(Nl);  // RMSNorm keeps rstd alone
      A.lnf_rstd = f32(Nl);
    }
  });
}

CView GPT::acquire_head() {
  if (tied()) return store_->acquire(0);
  CView lnfw, lnfb, hw;
  final_ptrs(layout_, store_->acquire(config().n_layer + 1), &lnfw, &lnfb, &hw);
  return hw;
}

void GPT::release_head() { store_->release(tied() ? 0 : config().n_layer + 1); }

void GPT::upload_rope_tables(int64_t T) {
  std::vector<float> cos, sin;
  rope_tables(config(), T, cos, sin);
  backend_.copy_to_device(ws_.rope_cos, 0, cos.data(), cos.size() * sizeof(float));
  backend_.copy_to_device(ws_.rope_sin, 0, sin.data(), sin.size() * sizeof(float));
}

void GPT::upload_alibi_slopes() {
  // This rank's heads [rank NH/tp, (rank + 1) NH/tp) of the model's.
  const std::vector<float> all = alibi_slopes(config().n_head);
  const int64_t NH = tp_.part(config().n_head);
  backend_.copy_to_device(ws_.alibi, 0, all.data() + tp_.rank() * NH, static_cast<size_t>(NH) * sizeof(float));
}

void GPT::check_tokens(const int32_t* tokens, int64_t n, const char* what) const {
  const int32_t V = config().vocab_size;
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= V) {
      throw_input("{} token {} at position {} is outside the vocabulary [0, {})", what, tokens[i], i, V);
    }
  }
}

void GPT::upload_tokens(const int32_t* inputs, const int32_t* targets, int64_t n) {
  if (inputs != nullptr && ws_.inputs != nullptr) {
    check_tokens(inputs, n, "input");
    backend_.copy_to_device(ws_.inputs, 0, inputs, static_cast<size_t>(n) * sizeof(int32_t));
  }
  if (targets != nullptr && ws_.targets != nullptr) {
    check_tokens(targets, n, "target");
    backend_.copy_to_device(ws_.targets, 0, targets, static_cast<size_t>(n) * sizeof(int32_t));
  }
}

void GPT::check_shape(int64_t B, int64_t T, bool training) const {
  WEFT_CHECK(cur_ != nullptr && B <= ws_.B && T <= ws_.T && B * T * T <= ws_.B * ws_.T * ws_.T,
             "micro-batch ({}, {}) exceeds the reserved ({}, {})", B, T, ws_.B, ws_.T);
  WEFT_CHECK(!training || acts_training_, "forward_backward needs reserve(..., training=true)");
  WEFT_CHECK(acts_rows_ == tp_.local_rows(ws_.B * ws_.T), "sequence parallelism changed since reserve()");
  tp_.check_rows(B, T);
}

void GPT::forward_blocks(int64_t B, int64_t T) {
  WEFT_CHECK(store_ != nullptr, "GPT has no parameter store");
  tp_.check_ready();
  const ModelConfig& c = config();
  const int64_t N = B * T, C = c.n_embd;
  const int L = c.n_layer, l0 = layout_.first_layer(), nl = layout_.num_layers();
  const bool first = layout_.stage().embedding, last = layout_.stage().head;
  ParamStore& st = *store_;
  CView wte, wpe;
  if (layout_.has_group(0)) layout_.embedding_ptrs(st.acquire(0), &wte, &wpe);  // held to the end
  // On a later pipeline stage cur_->encoded holds the activation received from the previous one.
  if (first) embedding_.forward(cur_->encoded, ws_.inputs, wte, wpe, B, T, C);
  CView x = cur_->encoded;
  for (int l = l0; l < l0 + nl; ++l) {
    const LayerWeights lw = layer_weights(layout_, l, st.acquire(l + 1));
    LayerActs& a = cur_->layers[static_cast<size_t>(l - l0)];
    block_.forward(lw, x, a, B, T, false);
    st.release(l + 1);
    x = a.res3;
  }
  if (!last) return;
  CView lnfw, lnfb;
  final_ptrs(layout_, st.acquire(L + 1), &lnfw, &lnfb, &head_w_);  // held to the end (an untied head with it)
  ln_.forward(cur_->lnf, cur_->lnf_mean, cur_->lnf_rstd, x, lnfw, lnfb, N, C);  // every row, for the head
}

double GPT::head(int64_t N, CView wte, float* dwte, float dloss) {
  const int64_t C = config().n_embd;
  // Chunk by chunk: logits -> loss (and, training, dlogits in place -> dwte += dlogits^T lnf,
  // dlnf = dlogits wte). The full (N, Vp) logits never exist.
  for (int64_t r0 = 0; r0 < N; r0 += ws_.head_chunk) {
    const int64_t rows = std::min(ws_.head_chunk, N - r0);
    const CView lnf = cur_->lnf.at(r0 * C);
    head_.logits(ws_.logits, lnf, wte, rows, C);
    head_.cross_entropy(ws_.logits, ws_.losses + r0, ws_.targets + r0, rows, dloss, ws_.stats);
    if (dloss != 0.0f) head_.backward(ws_.dC.at(r0 * C), dwte, ws_.logits, lnf, wte, rows, C);
  }
  // The token losses back on the host, summed there in order (double).
  host_losses_.resize(static_cast<size_t>(N));
  backend_.copy_to_host(host_losses_.data(), ws_.losses, 0, static_cast<size_t>(N) * sizeof(float));
  double s = 0.0;
  for (int64_t i = 0; i < N; ++i) s += host_losses_[static_cast<size_t>(i)];
  return s;
}

float GPT::forward_loss(const int32_t* inputs, const int32_t* targets, int64_t B, int64_t T) {
  WEFT_CHECK(layout_.stage().embedding && layout_.stage().head, "forward_loss needs the whole model");
  check_shape(B, T, false);
  upload_tokens(inputs, targets, B * T);
  forward_blocks(B, T);
  const int64_t N = B * T;
  double s = 0.0;
  if (tied()) {
    const CView wte = store_->acquire(0);  // still held from forward_blocks
    s = head(N, wte, nullptr, 0.0f);
    store_->release(0);  // the extra acquire above
  } else {
    s = head(N, head_w_, nullptr, 0.0f);  // the back group, held from forward_blocks
  }
  store_->release(config().n_layer + 1);
  store_->release(0);
  return static_cast<float>(s / static_cast<double>(N));
}

float GPT::forward_backward(const int32_t* inputs, const int32_t* targets, int64_t B, int64_t T,
                            float loss_scale) {
  WEFT_CHECK(layout_.stage().embedding && layout_.stage().head, "forward_backward needs the whole model; a pipeline stage uses stage_forward/stage_backward");
  check_shape(B, T, true);
  upload_tokens(inputs, targets, B * T);
  forward_blocks(B, T);
  const double loss_sum = backward_part(nullptr, B, T, loss_scale);
  return static_cast<float>(loss_sum / static_cast<double>(B * T));
}

double GPT::backward_part(CView dy, int64_t B, int64_t T, float loss_scale) {
  const ModelConfig& c = config();
  const int64_t N = B * T, C = c.n_embd;
  const int64_t Nl = tp_.local_rows(N);  // rows of the residual stream held here
  const int L = c.n_layer, l0 = layout_.first_layer(), nl = layout_.num_layers();
  const bool first = layout_.stage().embedding, last = layout_.stage().head;
  ParamStore& st = *store_;
  CView wte, wpe;
  float *dwte = nullptr, *dwpe = nullptr;
  double loss_sum = 0.0;
  // The embedding group's weights and gradients: first when the head reads it (tied), else after
  // the layers (the order of parameter accesses ZeRO-3's gathers follow: plan/comm_model.cc).
  const auto take_front = [&] {
    if (!layout_.has_group(0)) return;
    layout_.embedding_ptrs(st.acquire(0), &wte, &wpe);
    st.release(0);  // balance the acquire just above; forward_blocks' acquire is still held
    layout_.embedding_ptrs(st.grads(0), &dwte, &dwpe);
  };
  if (tied()) take_front();
  if (!last) {
    // a pipeline stage before the last: the gradient of its output came from the next stage
    WEFT_CHECK(dy.dtype == ws_.dres.dtype, "stage_backward: a {} output gradient for a {} residual stream",
               dtype_name(dy.dtype), dtype_name(ws_.dres.dtype));
    backend_.copy_device(ws_.dres.data, 0, dy.data, 0, dtype_bytes(dy.dtype, Nl * C));
  } else {
    const CView x_last = nl > 0 ? CView(cur_->layers.back().res3) : CView(cur_->encoded);
    CView lnfw, lnfb, hw;
    float *dlnfw, *dlnfb, *dhw;
    final_ptrs(layout_, st.acquire(L + 1), &lnfw, &lnfb, &hw);
    st.release(L + 1);
    final_ptrs(layout_, st.grads(L + 1), &dlnfw, &dlnfb, &dhw);
    loss_sum = tied() ? head(N, wte, dwte, loss_scale) : head(N, hw, dhw, loss_scale);
    st.head_done();
    backend_.fill(ws_.dres.data, ws_.dres.dtype, 0, Nl * C, 0.0f);
    const View dlnf = head_.input_grad(ws_.dC, N, C);
    ln_.backward(ws_.dres, dlnfw, dlnfb, dlnf, x_last, lnfw, cur_->lnf_mean, cur_->lnf_rstd, N, C);
    rnd(ws_.dres, Nl * C);
    st.ready(L + 1);
  }
  for (int l = l0 + nl - 1; l >= l0; --l) {
    const LayerWeights lw = layer_weights(layout_, l, st.acquire(l + 1));
    const LayerPtrs lg = layer_ptrs(layout_, l, st.grads(l + 1));
    const CView x = l == l0 ? CView(cur_->encoded) : CView(cur_->layers[static_cast<size_t>(l - l0 - 1)].res3);
    block_.backward(lw, lg, x, cur_->layers[static_cast<size_t>(l - l0)], B, T, full_recompute(l - l0),
                    {ws_.dres, ws_.dC, ws_.d3C, ws_.dF, ws_.att, ws_.dfc, ws_.dpar});
    st.release(l + 1);
    st.ready(l + 1);
  }
  if (!tied()) take_front();
  if (first) {
    const CView demb = embedding_.output_grad(ws_.dres, N, C);  // every row's gradient
    if (!st.embedding_backward(ws_.inputs, demb, B, T, embedding_.v0(), embedding_.vocab_rows())) {
      embedding_.backward(dwte, dwpe, demb, ws_.inputs, B, T, C);
    }
  }
  // The embedding group is complete: after the lookup (first stage) or the head (a last
  // stage that is not also the first holds it only for the tied head).
  if (layout_.has_group(0)) st.ready(0);
  if (last) st.release(L + 1);
  if (layout_.has_group(0)) st.release(0);
  // dres now holds the gradient of the stage's input (sent to the previous stage).
  return loss_sum;
}

void GPT::use_slot(int slot) {
  WEFT_CHECK(slot >= 0 && slot < acts_slots_, "activation slot {} of {}", slot, acts_slots_);
  Activations& A = stash_[static_cast<size_t>(slot)];
  if (!A.built) build_stash(A);  // first use
  cur_ = &A;
}

namespace {
// Makes a slot current for one call; slot 0 again afterwards (the whole-model calls use it).
struct SlotScope {
  SlotScope(Activations** cur, Activations* zero) : cur_(cur), zero_(zero) {}
  ~SlotScope() { *cur_ = zero_; }
  Activations** cur_;
  Activations* zero_;
};
}  // namespace

void GPT::stage_forward(int slot, const int32_t* inputs, CView x_in, int64_t B, int64_t T, bool for_backward) {
  check_shape(B, T, for_backward);
  if (layout_.stage().embedding) upload_tokens(inputs, nullptr, B * T);
  SlotScope scope(&cur_, &stash_[0]);
  use_slot(slot);
  if (!layout_.stage().embedding) {
    const int64_t rows = tp_.local_rows(B * T);
    WEFT_CHECK(x_in.dtype == cur_->encoded.dtype, "stage_forward: a {} input for a {} residual stream",
               dtype_name(x_in.dtype), dtype_name(cur_->encoded.dtype));
    backend_.copy_device(cur_->encoded.data, 0, x_in.data, 0, dtype_bytes(x_in.dtype, rows * config().n_embd));
  }
  forward_blocks(B, T);
  if (!for_backward) {  // drop the holds that the backward would release
    if (layout_.stage().head) store_->release(config().n_layer + 1);
    if (layout_.has_group(0)) store_->release(0);
  }
}

double GPT::stage_backward(int slot, const int32_t* inputs, const int32_t* targets, CView dy, int64_t B,
                           int64_t T, float loss_scale) {
  upload_tokens(layout_.stage().embedding ? inputs : nullptr, layout_.stage().head ? targets : nullptr, B * T);
  SlotScope scope(&cur_, &stash_[0]);
  use_slot(slot);
  return backward_part(dy, B, T, loss_scale);
}

double GPT::stage_loss(int slot, const int32_t* targets, int64_t B, int64_t T) {
  WEFT_CHECK(layout_.stage().head, "stage_loss on a stage without the head");
  upload_tokens(nullptr, targets, B * T);
  SlotScope scope(&cur_, &stash_[0]);
  use_slot(slot);
  const double s = head(B * T, acquire_head(), nullptr, 0.0f);
  release_head();
  return s;
}

CView GPT::stage_output(int slot) {
  SlotScope scope(&cur_, &stash_[0]);
  use_slot(slot);
  return layout_.num_layers() > 0 ? CView(cur_->layers.back().res3) : CView(cur_->encoded);
}

// Logits (V real entries) of one row (C) of the final LayerNorm's output (generation).
void GPT::row_logits(CView lnf_row, float* logits_out) {
  const ModelConfig& c = config();
  // Allocated at the first generated token and kept: one per GPT, not one per token.
  if (!row_logits_) row_logits_ = DeviceBuffer(backend_, DType::kF32, c.padded_vocab, MemCategory::kWorkspace);
  head_.row_logits(row_logits_.data<float>(), lnf_row, acquire_head(), c.n_embd);
  release_head();
  backend_.copy_to_host(logits_out, row_logits_.raw(), 0, static_cast<size_t>(c.vocab_size) * sizeof(float));
}

void GPT::forward_last_logits(const int32_t* tokens, int64_t T, float* logits_out) {
  forward_logits(tokens, T, T - 1, logits_out);
}

void GPT::forward_logits(const int32_t* tokens, int64_t T, int64_t from, float* logits_out) {
  WEFT_CHECK(from >= 0 && from < T, "forward_logits: positions [{}, {}) are empty", from, T);
  check_shape(1, T, false);
  upload_tokens(tokens, nullptr, T);
  forward_blocks(1, T);
  const int64_t C = config().n_embd, V = config().vocab_size;
  for (int64_t t = from; t < T; ++t) row_logits(cur_->lnf.at(t * C), logits_out + (t - from) * V);
  store_->release(config().n_layer + 1);
  store_->release(0);
}

void GPT::stage_logits(int slot, int64_t T, int64_t from, float* logits_out) {
  WEFT_CHECK(layout_.stage().head, "stage_logits on a stage without the head");
  WEFT_CHECK(from >= 0 && from < T, "stage_logits: positions [{}, {}) are empty", from, T);
  SlotScope scope(&cur_, &stash_[0]);
  use_slot(slot);
  const int64_t C = config().n_embd, V = config().vocab_size;
  for (int64_t t = from; t < T; ++t) row_logits(cur_->lnf.at(t * C), logits_out + (t - from) * V);
}

}  // namespace weft
