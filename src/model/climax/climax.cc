#include "model/climax/climax.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/error.h"
#include "data/field_batch.h"
#include "model/climax/climax_config.h"
#include "model/local_store.h"

namespace weft {

namespace {
// Group 0's tensors, in layout order (params.cc, add_climax_tensors).
enum Front { kTokW, kTokB, kVarEmb, kQuery, kQW, kQB, kKvW, kKvB, kOutW, kOutB, kPos, kLeadW, kLeadB, kFrontCount };
}  // namespace

std::vector<float> default_latitudes(int H) {
  std::vector<float> lat(static_cast<size_t>(H));
  for (int i = 0; i < H; ++i) lat[static_cast<size_t>(i)] = static_cast<float>(-90.0 + 180.0 / H * (i + 0.5));
  return lat;
}

// One micro-batch's activations (ClimaxDescription::stash_elems, in its order).
struct ClimaX::Stash {
  DeviceBuffer storage16;  // the storage dtype: the blocks' 16-bit tensors (everything in an fp32 run)
  DeviceBuffer storage;    // a 16-bit run: the f32 tensors
  float *patches = nullptr, *X = nullptr, *kv = nullptr, *q = nullptr, *agg_att = nullptr, *agg_out = nullptr;
  float *lead = nullptr, *encoded = nullptr;
  std::vector<LayerActs> layers;
  float *lnf = nullptr, *lnf_mean = nullptr, *lnf_rstd = nullptr;
  std::vector<float*> dec_pre, dec_act;  // decoder_depth (N,C) each
  float* pred = nullptr;                 // (N,K); the backward turns it into its gradient
};

// Scratch (ClimaxDescription::workspace_tensor_elems, in its order).
struct ClimaX::Work {
  DeviceBuffer storage16;  // the storage dtype: the rematerialised layer's 16-bit tensors (everything in fp32)
  DeviceBuffer storage;    // a 16-bit run: the f32 tensors
  float *targets = nullptr, *weights = nullptr, *row_loss = nullptr, *ones = nullptr, *lead_emb = nullptr;
  float* base = nullptr;
  float *dres = nullptr, *dC = nullptr, *d3C = nullptr, *dF = nullptr, *dX = nullptr, *dkv = nullptr;
  float *dagg = nullptr, *dq = nullptr, *dquery = nullptr, *dlead = nullptr, *dh0 = nullptr, *dh1 = nullptr;
  LayerActs layer{};  // the rematerialised layer (full recompute)
};

ClimaX::ClimaX(const ModelConfig& cfg, Backend& backend, bool local_store, int tp_size, int tp_rank)
    : cfg_(cfg), layout_(param_layout(cfg, tp_size, tp_rank)),
      backend_(backend),
      tp_(backend, tp_size, tp_rank),
      ln_(tp_, cfg.ln_eps),
      column_(tp_),
      row_(tp_),
      block_(cfg, backend, tp_, ln_, column_, row_, /*causal=*/false) {
  WEFT_CHECK(cfg.family == &climax_family(), "model '{}' is a {} model, not a ClimaX model", cfg.name, cfg.family_name());
  if (local_store) {
    local_ = std::make_unique<LocalParamStore>(layout_, backend_);
    store_ = local_.get();
  }
  set_latitudes(default_latitudes(cfg.img_h));
}

ClimaX::~ClimaX() = default;

float* ClimaX::params() { return local_ ? local_->params() : nullptr; }
float* ClimaX::grads() { return local_ ? local_->grad_buffer() : nullptr; }

void ClimaX::init(uint64_t seed) {
  WEFT_CHECK(local_ != nullptr, "init without a local store");
  std::vector<float> host(static_cast<size_t>(layout_.total()));
  init_params(layout_, seed, host.data());
  backend_.copy_to_device(params(), 0, host.data(), host.size() * sizeof(float));
}

void ClimaX::zero_grads() {
  WEFT_CHECK(local_ != nullptr, "zero_grads without a local store");
  backend_.fill(grads(), DType::kF32, 0, layout_.total(), 0.0f);
}

void ClimaX::set_tp(TensorParallelOps* tp, bool sequence_parallel) {
  if (sequence_parallel && tp_.size() > 1) {
    throw_input("model '{}': sequence parallelism is not available for ClimaX models", config().name);
  }
  tp_.set_ops(tp, false);
}

void ClimaX::set_recompute(Recompute mode, int full_layers) {
  // Selective recompute keeps the probabilities out of the stash; ClimaX's attention over L
  // patches is recomputed only as part of a full layer.
  if (mode == Recompute::kSelective) {
    throw_input("model '{}': selective recompute is not available for ClimaX models (use full or none)",
                config().name);
  }
  recompute_ = mode;
  full_layers_ = full_layers;
}

void ClimaX::set_latitudes(const std::vector<float>& lat_deg) {
  const ModelConfig& c = config();
  if (static_cast<int>(lat_deg.size()) != c.img_h) {
    throw_input("model '{}': {} latitudes for a grid of {} rows", c.name, lat_deg.size(), c.img_h);
  }
  double sum = 0.0;
  for (float l : lat_deg) {
    if (!std::isfinite(l) || l < -90.0f || l > 90.0f) throw_input("latitude {} is outside [-90, 90]", l);
    sum += std::cos(l * M_PI / 180.0);
  }
  if (sum <= 0.0) throw_input("the latitudes' weights sum to {} (every row at a pole?)", sum);
  lat_deg_ = lat_deg;
  lat_w_.resize(lat_deg.size());
  for (size_t i = 0; i < lat_deg.size(); ++i) {
    lat_w_[i] = static_cast<float>(std::cos(lat_deg[i] * M_PI / 180.0) / (sum / static_cast<double>(lat_deg.size())));
  }
  if (!ws_) return;
  // The weights of one sample in the decoder's output order (L, p, p, V).
  const int64_t p = climax_fields(c).patch, w = c.img_w / p, V = c.vars, K = V * p * p, L = num_patches(c);
  std::vector<float> host(static_cast<size_t>(L * K));
  for (int64_t l = 0; l < L; ++l) {
    for (int64_t k = 0; k < K; ++k) host[static_cast<size_t>(l * K + k)] = lat_w_[static_cast<size_t>((l / w) * p + k / V / p)];
  }
  backend_.copy_to_device(ws_->weights, 0, host.data(), host.size() * sizeof(float));
}

int64_t ClimaX::activation_bytes() const {
  return st_ ? static_cast<int64_t>(st_->storage.bytes() + st_->storage16.bytes()) : 0;
}
int64_t ClimaX::workspace_bytes() const {
  return (ws_ ? static_cast<int64_t>(ws_->storage.bytes() + ws_->storage16.bytes()) : 0) + tp_.scratch_bytes();
}

void ClimaX::reserve(const HostBatch& capacity, bool training, int64_t head_chunk, int slots) {
  reserve(FieldBatch::of(capacity).capacity(), 0, training, head_chunk, slots);
}

void ClimaX::reserve(int64_t B, int64_t T, bool training, int64_t, int slots) {
  const ModelConfig& c = config();
  const int64_t L = num_patches(c);
  if (T != 0 && T != L) throw_input("model '{}' has {} patches per sample, not a sequence of {}", c.name, L, T);
  if (B <= 0) throw_input("micro-batch {} must be positive", B);
  if (slots > 1) throw_input("model '{}': ClimaX models run without pipeline stages ({} activation slots)", c.name, slots);
  if (st_ && B == B_ && training == training_) return;
  ClimaxRunSpec spec;
  spec.model = c;
  spec.B = B;
  spec.tp = tp_.size();
  spec.recompute = recompute_;
  spec.recompute_layers = full_layers_;
  spec.precision = prec_;
  spec.training = training;
  spec.param_dtype = store_ != nullptr ? store_->param_dtype() : DType::kF32;
  spec.staging_chunk = backend_.staging_chunk();
  spec.native_products = backend_.native_16bit_products();
  const ClimaxDescription d(spec);
  const int64_t N = B * L, C = c.n_embd, Cl = tp_.part(C), F = tp_.part(c.ffn), NH = tp_.part(c.n_head);
  const int64_t V = c.vars, P2 = patch_area(c), K = V * P2;
  st_.reset();
  ws_.reset();
  tp_.release();
  B_ = B;
  training_ = training;

  ws_ = std::make_unique<Work>();
  Work& w = *ws_;
  // The blocks' tensors by model/block.h's policy (16-bit buffers in a 16-bit run), ClimaX's own f32.
  const DType act = d.act_dtype();
  const LayerDtypes dt = d.layer_dtypes();
  carve_typed(backend_, w.storage16, w.storage, act, d.workspace_tensors(), MemCategory::kWorkspace, "workspace",
              [&](TypedCarver& vtake) {
    const auto take = [&vtake](int64_t n) { return static_cast<float*>(vtake(n, DType::kF32).data); };
    w.targets = take(N * K);
    w.weights = take(L * K);
    w.row_loss = take(B);
    w.ones = take(N);
    w.lead_emb = take(B * C);
    w.base = take(N * C);
    if (!training) return;
    w.dres = take(N * C);
    w.dC = take(N * C);
    w.d3C = take(N * 3 * Cl);
    w.dF = take(N * F);
    w.dX = take(V * N * C);
    w.dkv = take(V * N * 2 * Cl);
    w.dagg = take(N * Cl);
    w.dq = take(Cl);
    w.dquery = take(C);
    w.dlead = take(B * C);
    w.dh0 = take(N * C);
    w.dh1 = take(N * C);
    if (d.recomputed_layers() > 0) {
      const View att = vtake(B * NH * L * L, dt.att);
      carve_layer(w.layer, vtake, N, N, C, Cl, F, att, false, dt);
    }
  });
  tp_.reserve(N, C);
  WEFT_CHECK(tp_.scratch_bytes() == d.tp_scratch_elems() * static_cast<int64_t>(sizeof(float)),
             "tensor-parallel scratch {} bytes, the description says {} elements", tp_.scratch_bytes(),
             d.tp_scratch_elems());
  backend_.fill(w.ones, DType::kF32, 0, N, 1.0f);

  st_ = std::make_unique<Stash>();
  Stash& s = *st_;
  carve_typed(backend_, s.storage16, s.storage, act, d.stash(), MemCategory::kActivations, "activation",
              [&](TypedCarver& vtake) {
    const auto take = [&vtake](int64_t n) { return static_cast<float*>(vtake(n, DType::kF32).data); };
    s.patches = take(V * N * P2);
    s.X = take(V * N * C);
    s.kv = take(V * N * 2 * Cl);
    s.q = take(Cl);
    s.agg_att = take(N * NH * V);
    s.agg_out = take(N * Cl);
    s.lead = take(B);
    s.encoded = take(N * C);
    s.layers.resize(static_cast<size_t>(c.n_layer));
    for (int i = 0; i < c.n_layer; ++i) {
      LayerActs& a = s.layers[static_cast<size_t>(i)];
      if (training && full_recompute(i)) {
        a = w.layer;  // everything but the output lives in the workspace
        a.res3 = take(N * C);
        continue;
      }
      const View att = vtake(B * NH * L * L, dt.att);
      carve_layer(a, vtake, N, N, C, Cl, F, att, true, dt);
    }
    s.lnf = take(N * C);
    s.lnf_mean = take(N);
    s.lnf_rstd = take(N);
    for (int dd = 0; dd < climax_fields(c).decoder_depth; ++dd) {
      s.dec_pre.push_back(take(N * C));
      s.dec_act.push_back(take(N * C));
    }
    s.pred = take(N * K);
  });
  // The typed ops' staging arena for the blocks' 16-bit tensors, reserved now.
  if (d.staging_elems() > 0) backend_.staging(d.staging_elems());
  set_latitudes(lat_deg_);  // uploads the weights
}

void ClimaX::check_batch(const ClimaxBatch& mb, int64_t B, bool training) const {
  WEFT_CHECK(st_ != nullptr, "ClimaX: reserve() before running a micro-batch");
  WEFT_CHECK(B >= 1 && B <= B_, "micro-batch {} exceeds the reserved {}", B, B_);
  WEFT_CHECK(!training || training_, "ClimaX: training needs reserve(..., training=true)");
  WEFT_CHECK(mb.x != nullptr && mb.lead != nullptr, "ClimaX: a micro-batch without fields or lead times");
  WEFT_CHECK(store_ != nullptr, "ClimaX has no parameter store");
}

// The host reorders the fields into patch order: patches (V, N, p^2) and the targets
// (N, p^2 V) in the decoder's output order; the lead times are uploaded as hours / 100.
void ClimaX::upload(const ClimaxBatch& mb, int64_t B) {
  const ModelConfig& c = config();
  const int64_t V = c.vars, H = c.img_h, W = c.img_w, p = climax_fields(c).patch, w = W / p, L = num_patches(c);
  const int64_t P2 = p * p, K = V * P2, N = B * L;
  const int64_t n = B * V * H * W;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(mb.x[i])) throw_input("input field value {} at index {} is not finite", mb.x[i], i);
    if (mb.y != nullptr && !std::isfinite(mb.y[i])) {
      throw_input("target field value {} at index {} is not finite", mb.y[i], i);
    }
  }
  host_patches_.resize(static_cast<size_t>(V * N * P2));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t v = 0; v < V; ++v) {
      for (int64_t l = 0; l < L; ++l) {
        const int64_t y0 = (l / w) * p, x0 = (l % w) * p;
        float* dst = host_patches_.data() + ((v * B + b) * L + l) * P2;
        const float* src = mb.x + ((b * V + v) * H + y0) * W + x0;
        for (int64_t i = 0; i < p; ++i) {
          for (int64_t j = 0; j < p; ++j) dst[i * p + j] = src[i * W + j];
        }
      }
    }
  }
  backend_.copy_to_device(st_->patches, 0, host_patches_.data(), host_patches_.size() * sizeof(float));
  if (mb.y != nullptr) {
    host_targets_.resize(static_cast<size_t>(N * K));
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t l = 0; l < L; ++l) {
        const int64_t y0 = (l / w) * p, x0 = (l % w) * p;
        float* dst = host_targets_.data() + (b * L + l) * K;
        for (int64_t v = 0; v < V; ++v) {
          const float* src = mb.y + ((b * V + v) * H + y0) * W + x0;
          for (int64_t i = 0; i < p; ++i) {
            for (int64_t j = 0; j < p; ++j) dst[(i * p + j) * V + v] = src[i * W + j];
          }
        }
      }
    }
    backend_.copy_to_device(ws_->targets, 0, host_targets_.data(), host_targets_.size() * sizeof(float));
  }
  std::vector<float> lead(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    if (!std::isfinite(mb.lead[b])) throw_input("lead time {} hours is not finite", mb.lead[b]);
    lead[static_cast<size_t>(b)] = mb.lead[b] / 100.0f;
  }
  backend_.copy_to_device(st_->lead, 0, lead.data(), lead.size() * sizeof(float));
}

// Patch embeddings, variable embedding, variable aggregation, positions and lead time.
void ClimaX::front_forward(int64_t B, const std::vector<CView>& w) {
  const ModelConfig& c = config();
  const int64_t L = num_patches(c), N = B * L, C = c.n_embd, Cl = tp_.part(C), NH = tp_.part(c.n_head);
  const int64_t V = c.vars, P2 = patch_area(c);
  Stash& s = *st_;
  Work& ws = *ws_;
  Backend& be = backend_;
  for (int64_t v = 0; v < V; ++v) {
    float* Xv = s.X + v * N * C;
    be.matmul_forward(Xv, s.patches + v * N * P2, w[kTokW].at(v * P2 * C), w[kTokB].at(v * C), N, P2, C, false);
    be.add_bias(Xv, Xv, w[kVarEmb].at(v * C), N, C);
  }
  rnd(s.X, V * N * C);
  // The aggregation: k|v of every variable token (column-parallel: this rank's heads), the query.
  column_.forward(s.kv, s.X, w[kKvW], w[kKvB], V * N, C, 2 * Cl);
  column_.forward(s.q, w[kQuery], w[kQW], w[kQB], 1, C, Cl);
  be.query_attention_forward(s.agg_out, s.agg_att, s.q, s.kv, N, V, Cl, NH);
  rnd(s.agg_att, N * NH * V);
  rnd(s.agg_out, N * Cl);
  // The residual base: pos_embed[l] + lead_time_embed(lead[b]); out_proj (row-parallel) adds to it.
  be.matmul_forward(ws.lead_emb, s.lead, w[kLeadW], w[kLeadB], B, 1, C, false);
  for (int64_t b = 0; b < B; ++b) be.add_bias(ws.base + b * L * C, w[kPos], ws.lead_emb + b * C, L, C);
  rnd(ws.base, N * C);
  row_.forward(s.encoded, ws.base, s.agg_out, w[kOutW], w[kOutB], N, Cl, C);
}

void ClimaX::back_forward(int64_t B, const std::vector<CView>& w) {
  const ModelConfig& c = config();
  const int64_t N = B * num_patches(c), C = c.n_embd, K = int64_t{c.vars} * patch_area(c);
  Stash& s = *st_;
  const float* x = c.n_layer > 0 ? s.layers.back().res3.as_f32() : s.encoded;
  ln_.forward(s.lnf, s.lnf_mean, s.lnf_rstd, x, w[0], w[1], N, C);
  const float* h = s.lnf;
  const int D = climax_fields(c).decoder_depth;
  for (int d = 0; d < D; ++d) {
    backend_.matmul_forward(s.dec_pre[d], h, w[2 + 2 * d], w[3 + 2 * d], N, C, C, false);
    rnd(s.dec_pre[d], N * C);
    backend_.gelu_forward(s.dec_act[d], s.dec_pre[d], N * C);
    rnd(s.dec_act[d], N * C);
    h = s.dec_act[d];
  }
  backend_.matmul_forward(s.pred, h, w[2 + 2 * D], w[3 + 2 * D], N, C, K, false);
  rnd(s.pred, N * K);
}

void ClimaX::forward(int64_t B) {
  tp_.check_ready();
  const ModelConfig& c = config();
  const int64_t L = num_patches(c);
  ParamStore& st = *store_;
  const std::vector<CView> front = layout_.group_ptrs(0, st.acquire(0));  // held to the end
  front_forward(B, front);
  const float* x = st_->encoded;
  for (int l = 0; l < c.n_layer; ++l) {
    const LayerWeights lw = layer_weights(layout_, l, st.acquire(l + 1));
    LayerActs& a = st_->layers[static_cast<size_t>(l)];
    block_.forward(lw, x, a, B, L, false);
    st.release(l + 1);
    x = a.res3.as_f32();
  }
  const std::vector<CView> back = layout_.group_ptrs(c.n_layer + 1, st.acquire(c.n_layer + 1));
  back_forward(B, back);  // held to the end
}

// Sum over the micro-batch's positions of the mean weighted squared error of their V p^2
// values; dloss != 0: the predictions become d(dloss * that sum)/d(pred) in place.
double ClimaX::loss(int64_t B, float dloss) {
  const ModelConfig& c = config();
  const int64_t L = num_patches(c), K = int64_t{c.vars} * patch_area(c);
  Stash& s = *st_;
  const float per_value = 1.0f / static_cast<float>(K);
  backend_.weighted_mse(ws_->row_loss, dloss != 0.0f ? s.pred : nullptr, s.pred, ws_->targets, ws_->weights, B,
                        L * K, dloss * per_value);
  host_loss_.resize(static_cast<size_t>(B));
  backend_.copy_to_host(host_loss_.data(), ws_->row_loss, 0, host_loss_.size() * sizeof(float));
  double sum = 0.0;
  for (float r : host_loss_) sum += r;
  return sum / static_cast<double>(K);
}

void ClimaX::back_backward(int64_t B, const std::vector<CView>& w, const std::vector<float*>& g) {
  const ModelConfig& c = config();
  const int64_t N = B * num_patches(c), C = c.n_embd, K = int64_t{c.vars} * patch_area(c);
  Stash& s = *st_;
  Work& ws = *ws_;
  const int D = climax_fields(c).decoder_depth;
  const float* h_last = D > 0 ? s.dec_act[D - 1] : s.lnf;
  float* dh = ws.dh0;
  float* other = ws.dh1;
  backend_.matmul_backward(dh, g[2 + 2 * D], g[3 + 2 * D], s.pred, h_last, w[2 + 2 * D], N, C, K);
  rnd(dh, N * C);
  for (int d = D - 1; d >= 0; --d) {
    backend_.gelu_backward(dh, s.dec_pre[d], dh, N * C);
    rnd(dh, N * C);
    const float* h_in = d > 0 ? s.dec_act[d - 1] : s.lnf;
    backend_.matmul_backward(other, g[2 + 2 * d], g[3 + 2 * d], dh, h_in, w[2 + 2 * d], N, C, C);
    rnd(other, N * C);
    std::swap(dh, other);
  }
  const float* x = c.n_layer > 0 ? s.layers.back().res3.as_f32() : s.encoded;
  backend_.fill(ws.dres, DType::kF32, 0, N * C, 0.0f);
  ln_.backward(ws.dres, g[0], g[1], dh, x, w[0], s.lnf_mean, s.lnf_rstd, N, C);
  rnd(ws.dres, N * C);
}

void ClimaX::front_backward(int64_t B, const std::vector<CView>& w, const std::vector<float*>& g) {
  const ModelConfig& c = config();
  const int64_t L = num_patches(c), N = B * L, C = c.n_embd, Cl = tp_.part(C), NH = tp_.part(c.n_head);
  const int64_t V = c.vars, P2 = patch_area(c);
  Stash& s = *st_;
  Work& ws = *ws_;
  Backend& be = backend_;
  // ws.dres = d(encoded) = d(base): the residual passes it on.
  row_.backward(ws.dagg, g[kOutW], g[kOutB], ws.dres, s.agg_out, w[kOutW], N, Cl, C);
  for (int64_t b = 0; b < B; ++b) {
    const float* d = ws.dres + b * L * C;
    be.add(g[kPos], g[kPos], d, L * C);
    // d(lead embedding)[b] = the column sums of its L rows.
    be.gemm(false, false, 1, C, L, 1.0f, ws.ones, L, d, C, 0.0f, ws.dlead + b * C, C);
  }
  be.matmul_backward(nullptr, g[kLeadW], g[kLeadB], ws.dlead, s.lead, w[kLeadW], B, 1, C);
  be.fill(ws.dq, DType::kF32, 0, Cl, 0.0f);
  be.query_attention_backward(ws.dq, ws.dkv, ws.dagg, s.q, s.kv, s.agg_att, N, V, Cl, NH);
  rnd(ws.dkv, V * N * 2 * Cl);
  // The tokens' gradient, summed over the tensor-parallel ranks (V N C: the aggregation's
  // all-reduce), and the query's.
  const float* dX = column_.backward(ws.dX, g[kKvW], g[kKvB], ws.dkv, s.X, w[kKvW], V * N, C, 2 * Cl).as_f32();
  const float* dquery = column_.backward(ws.dquery, g[kQW], g[kQB], ws.dq, w[kQuery], w[kQW], 1, C, Cl).as_f32();
  be.add(g[kQuery], g[kQuery], dquery, C);
  for (int64_t v = 0; v < V; ++v) {
    const float* dXv = dX + v * N * C;
    be.gemm(false, false, 1, C, N, 1.0f, ws.ones, N, dXv, C, 1.0f, g[kVarEmb] + v * C, C);
    be.matmul_backward(nullptr, g[kTokW] + v * P2 * C, g[kTokB] + v * C, dXv, s.patches + v * N * P2,
                       w[kTokW].at(v * P2 * C), N, P2, C);
  }
}

double ClimaX::backward(int64_t B, float loss_scale) {
  const ModelConfig& c = config();
  const int64_t L = num_patches(c);
  const int G = c.n_layer + 1;
  ParamStore& st = *store_;
  const double sum = loss(B, loss_scale);
  const std::vector<CView> wb = layout_.group_ptrs(G, st.acquire(G));
  st.release(G);  // balances the acquire just above; forward's is still held
  back_backward(B, wb, layout_.group_ptrs(G, st.grads(G)));
  st.ready(G);
  for (int l = c.n_layer - 1; l >= 0; --l) {
    const LayerWeights lw = layer_weights(layout_, l, st.acquire(l + 1));
    const LayerPtrs lg = layer_ptrs(layout_, l, st.grads(l + 1));
    const float* x = l == 0 ? st_->encoded : st_->layers[static_cast<size_t>(l - 1)].res3.as_f32();
    block_.backward(lw, lg, x, st_->layers[static_cast<size_t>(l)], B, L, full_recompute(l),
                    {ws_->dres, ws_->dC, ws_->d3C, ws_->dF, nullptr});
    st.release(l + 1);
    st.ready(l + 1);
  }
  const std::vector<CView> wf = layout_.group_ptrs(0, st.acquire(0));
  st.release(0);
  front_backward(B, wf, layout_.group_ptrs(0, st.grads(0)));
  st.ready(0);
  st.release(G);
  st.release(0);
  return sum;
}

namespace {
// A FieldBatch (data/field_batch.h) as the model's host view.
ClimaxBatch view_of(const HostBatch& mb) {
  const FieldBatch& f = FieldBatch::of(mb);
  return {f.fields(), f.target_fields(), f.lead_hours()};
}
}  // namespace

double ClimaX::train_batch(const ClimaxBatch& mb, int64_t B, float loss_scale) {
  check_batch(mb, B, true);
  WEFT_CHECK(mb.y != nullptr, "ClimaX: a training micro-batch without targets");
  upload(mb, B);
  forward(B);
  return backward(B, loss_scale);
}

double ClimaX::batch_loss(const ClimaxBatch& mb, int64_t B) {
  check_batch(mb, B, false);
  WEFT_CHECK(mb.y != nullptr, "ClimaX: a loss without targets");
  upload(mb, B);
  forward(B);
  const double s = loss(B, 0.0f);
  store_->release(config().n_layer + 1);
  store_->release(0);
  return s;
}

double ClimaX::train_micro_batch(const HostBatch& mb, float loss_scale) {
  return train_batch(view_of(mb), mb.samples(), loss_scale);
}

double ClimaX::loss_sum(const HostBatch& mb) { return batch_loss(view_of(mb), mb.samples()); }

void ClimaX::forward_outputs(const HostBatch& mb, float* out) {
  const ClimaxBatch b = view_of(mb);
  predict(b.x, b.lead, mb.samples(), out);
}

double ClimaX::forward_backward(const ClimaxBatch& b, int64_t B, float loss_scale) {
  const double s = train_batch(b, B, loss_scale);
  return s / static_cast<double>(B * num_patches(config()));
}

double ClimaX::forward_loss(const ClimaxBatch& b, int64_t B) {
  return batch_loss(b, B) / static_cast<double>(B * num_patches(config()));
}

void ClimaX::predict(const float* x, const float* lead, int64_t B, float* out) {
  const ClimaxBatch mb{x, nullptr, lead};
  check_batch(mb, B, false);
  upload(mb, B);
  forward(B);
  store_->release(config().n_layer + 1);
  store_->release(0);
  const ModelConfig& c = config();
  const int64_t V = c.vars, H = c.img_h, W = c.img_w, p = climax_fields(c).patch, w = W / p, L = num_patches(c);
  const int64_t K = V * p * p;
  std::vector<float> pred(static_cast<size_t>(B * L * K));
  backend_.copy_to_host(pred.data(), st_->pred, 0, pred.size() * sizeof(float));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t l = 0; l < L; ++l) {
      const int64_t y0 = (l / w) * p, x0 = (l % w) * p;
      const float* src = pred.data() + (b * L + l) * K;
      for (int64_t v = 0; v < V; ++v) {
        float* dst = out + ((b * V + v) * H + y0) * W + x0;
        for (int64_t i = 0; i < p; ++i) {
          for (int64_t j = 0; j < p; ++j) dst[i * W + j] = src[(i * p + j) * V + v];
        }
      }
    }
  }
}

void ClimaX::stage_forward(int, const HostBatch&, CView, bool) {
  throw_input("model '{}': ClimaX models run without pipeline stages (pp 1)", config().name);
}
double ClimaX::stage_backward(int, const HostBatch&, CView, float) {
  throw_input("model '{}': ClimaX models run without pipeline stages (pp 1)", config().name);
}
double ClimaX::stage_loss(int, const HostBatch&) {
  throw_input("model '{}': ClimaX models run without pipeline stages (pp 1)", config().name);
}
CView ClimaX::stage_output(int) {
  throw_input("model '{}': ClimaX models run without pipeline stages (pp 1)", config().name);
}
CView ClimaX::stage_input_grad() const {
  throw_input("model '{}': ClimaX models run without pipeline stages (pp 1)", config().name);
}

}  // namespace weft
