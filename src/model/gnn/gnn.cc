#include "model/gnn/gnn.h"

#include <algorithm>

#include "core/error.h"
#include "data/atoms/graph_batch.h"
#include "model/local_store.h"

namespace weft {

// Index arrays, edge features and targets of the uploaded batch; the node states h_0 .. h_L, the
// heads' tensors, the loss rows and the backward's scratch, all sized for the capacity.
struct GnnModel::Buffers {
  int64_t N = 0, E = 0, G = 0, C = 0, H = 0;
  DeviceBuffer species, source, receiver, recv_off, src_perm, src_off, species_perm, species_off, graph_off;
  DeviceBuffer rbf, cutoff, dist2, scalers, dist, unit, y_energy, y_forces, ones3;
  std::vector<DeviceBuffer> h;  // L + 1 node states (N, C)
  DeviceBuffer pool, ez, ea, e;   // the energy head: (G,C) (G,H) (G,H) (G)
  DeviceBuffer fpre, fa, fs, ft, f, fsrc;  // the force head: (E,H) (E,H) (E) (E,3) (N,3) (N,3)
  DeviceBuffer row_f, row_e, w_f, w_e, de, df;
  DeviceBuffer scratch_e, scratch_n, d0, d1, dgh, dgc;  // backward
  DeviceBuffer hn, he, e3, es;  // the force head: (2,N,H) node products / gradients, (E,H), (E,3), (E)
  GnnScratch scratch() {
    GnnScratch s;
    for (int k = 0; k < 3; ++k) s.e[k] = scratch_e.data<float>() + k * E * C, s.n[k] = scratch_n.data<float>() + k * N * C;
    return s;
  }
};

namespace {
// A buffer of n floats (none for n = 0: a layer type's unused input).
DeviceBuffer f32(Backend& be, int64_t n, MemCategory c = MemCategory::kActivations) {
  return n > 0 ? DeviceBuffer(be, DType::kF32, n, c) : DeviceBuffer();
}
DeviceBuffer i32(Backend& be, int64_t n) { return DeviceBuffer(be, DType::kI32, std::max<int64_t>(n, 1), MemCategory::kOther); }
template <class T>
void put(Backend& be, DeviceBuffer& d, const std::vector<T>& v) {
  WEFT_CHECK(static_cast<int64_t>(v.size()) <= d.count(), "graph upload: {} values for a buffer of {}", v.size(), d.count());
  if (!v.empty()) be.copy_to_device(d.raw(), 0, v.data(), v.size() * sizeof(T));
}
std::vector<const float*> f32_views(const std::vector<CView>& w) {
  std::vector<const float*> out;
  for (const CView& v : w) out.push_back(v.as_f32("a graph network's parameter"));
  return out;
}
}  // namespace

GnnModel::GnnModel(const ModelConfig& cfg, Backend& backend, bool local_store)
    : cfg_(cfg), f_(gnn_fields(cfg)), layout_(param_layout(cfg)), backend_(backend) {
  if (local_store) {
    local_ = std::make_unique<LocalParamStore>(layout_, backend_);
    store_ = local_.get();
  }
  for (int l = 0; l < cfg.n_layer; ++l) convs_.push_back(make_gnn_conv(f_, cfg.n_embd, backend_));
}

GnnModel::~GnnModel() = default;

void GnnModel::set_tp(TensorParallelOps*, bool sequence_parallel) {
  (void)sequence_parallel;  // tp > 1 is refused by the family's capabilities before a model exists
}

void GnnModel::set_recompute(Recompute mode, int) {
  if (mode != Recompute::kNone) throw_input("model '{}': graph networks have no activation recompute", cfg_.name);
}

void GnnModel::set_precision(Precision p) {
  if (p != Precision::kFp32) {
    throw_input("model '{}': graph networks train in fp32 (precision '{}' is not available for them)", cfg_.name,
                precision_name(p));
  }
}

void GnnModel::set_term_totals(const std::vector<int64_t>& totals) {
  WEFT_CHECK(totals.size() == 2, "a graph network's loss has 2 terms, {} totals given", totals.size());
  energy_ratio_ = totals[1] > 0 ? static_cast<double>(totals[0]) / static_cast<double>(totals[1]) : 0.0;
}

void GnnModel::reserve(const HostBatch& capacity, bool training, int64_t, int) {
  const GraphBudget& bud = batch_as<GraphBatch>(capacity, "graphs").budget();
  if (bud.max_nodes <= 0 || bud.max_edges <= 0 || bud.max_graphs <= 0) {
    throw_input("model '{}': a graph micro-batch needs a budget of nodes, edges and graphs (given {}, {}, {})",
                cfg_.name, bud.max_nodes, bud.max_edges, bud.max_graphs);
  }
  training_ = training;
  auto b = std::make_unique<Buffers>();
  const int64_t N = bud.max_nodes, E = bud.max_edges, G = bud.max_graphs, C = cfg_.n_embd, H = cfg_.ffn;
  b->N = N, b->E = E, b->G = G, b->C = C, b->H = H;
  Backend& be = backend_;
  for (DeviceBuffer* d : {&b->species, &b->recv_off, &b->src_off, &b->species_perm}) *d = i32(be, N + 1);
  for (DeviceBuffer* d : {&b->source, &b->receiver, &b->src_perm}) *d = i32(be, E);
  b->species_off = i32(be, kGnnSpecies + 1);
  b->graph_off = i32(be, G + 1);
  const bool gaussians = f_.layer == GnnLayer::kSchnet || f_.layer == GnnLayer::kPna, pna = f_.layer == GnnLayer::kPna;
  b->rbf = f32(be, gaussians ? E * f_.num_gaussians : 0);
  b->cutoff = f32(be, gaussians ? E : 0), b->dist2 = f32(be, f_.layer == GnnLayer::kEgnn ? E : 0);
  b->scalers = f32(be, pna ? 3 * N : 0);
  b->dist = f32(be, E), b->unit = f32(be, 3 * E);
  b->y_energy = f32(be, G), b->y_forces = f32(be, 3 * N);
  for (int l = 0; l <= cfg_.n_layer; ++l) b->h.push_back(f32(be, N * C));
  b->pool = f32(be, G * C), b->ez = f32(be, G * H), b->ea = f32(be, G * H), b->e = f32(be, G);
  b->fpre = f32(be, E * H), b->fa = f32(be, E * H), b->fs = f32(be, E), b->ft = f32(be, 3 * E), b->f = f32(be, 3 * N);
  b->fsrc = f32(be, 3 * N, MemCategory::kWorkspace);
  const MemCategory ws = MemCategory::kWorkspace;
  b->row_f = f32(be, N, ws), b->row_e = f32(be, G, ws), b->w_f = f32(be, 3, ws), b->w_e = f32(be, 1, ws);
  b->de = f32(be, G, ws), b->df = f32(be, 3 * N, ws);
  b->scratch_e = f32(be, 3 * E * C, MemCategory::kWorkspace), b->scratch_n = f32(be, 3 * N * C, MemCategory::kWorkspace);
  b->d0 = f32(be, N * C, MemCategory::kWorkspace), b->d1 = f32(be, N * C, MemCategory::kWorkspace);
  b->dgh = f32(be, G * H, MemCategory::kWorkspace), b->dgc = f32(be, G * C, MemCategory::kWorkspace);
  b->hn = f32(be, 2 * N * H, ws), b->he = f32(be, E * H, ws), b->e3 = f32(be, 3 * E, ws), b->es = f32(be, E, ws);
  b->ones3 = f32(be, 3, ws);
  put(be, b->ones3, std::vector<float>{1.0f, 1.0f, 1.0f});
  const float w3 = static_cast<float>(gnn_task_weights(f_).second / 3.0);  // the forces' per-component weight
  put(be, b->w_f, std::vector<float>{w3, w3, w3});
  for (auto& conv : convs_) conv->reserve(N, E);
  buf_ = std::move(b);
}

int64_t GnnModel::activation_bytes() const {
  if (!buf_) return 0;
  int64_t n = 0;
  for (const auto& conv : convs_) n += conv->stash_bytes();
  for (const DeviceBuffer& d : buf_->h) n += static_cast<int64_t>(d.bytes());
  for (const DeviceBuffer* d : {&buf_->pool, &buf_->ez, &buf_->ea, &buf_->e, &buf_->fpre, &buf_->fa, &buf_->fs,
                                &buf_->ft, &buf_->f, &buf_->rbf, &buf_->cutoff, &buf_->dist2, &buf_->scalers, &buf_->dist, &buf_->unit,
                                &buf_->y_energy, &buf_->y_forces}) {
    n += static_cast<int64_t>(d->bytes());
  }
  return n;
}

int64_t GnnModel::workspace_bytes() const {
  if (!buf_) return 0;
  int64_t n = 0;
  for (const DeviceBuffer* d : {&buf_->scratch_e, &buf_->scratch_n, &buf_->d0, &buf_->d1, &buf_->dgh, &buf_->dgc,
                                &buf_->hn, &buf_->he, &buf_->e3, &buf_->es, &buf_->ones3, &buf_->de, &buf_->df, &buf_->fsrc,
                                &buf_->row_f, &buf_->row_e, &buf_->w_f, &buf_->w_e}) {
    n += static_cast<int64_t>(d->bytes());
  }
  return n;
}

void GnnModel::upload(const GraphBatch& b) {
  WEFT_CHECK(buf_ != nullptr, "model '{}': forward before reserve", cfg_.name);
  if (b.nodes() > buf_->N || b.edges() > buf_->E || b.graphs() > buf_->G) {
    throw_input("model '{}': a graph micro-batch of {} nodes, {} edges, {} graphs passes the reserved {}, {}, {}",
                cfg_.name, b.nodes(), b.edges(), b.graphs(), buf_->N, buf_->E, buf_->G);
  }
  host_ = build_host_graph(b, f_);
  Backend& be = backend_;
  Buffers& d = *buf_;
  put(be, d.species, host_.species), put(be, d.source, host_.source), put(be, d.receiver, host_.receiver);
  put(be, d.recv_off, host_.recv_offsets), put(be, d.src_perm, host_.src_perm), put(be, d.src_off, host_.src_offsets);
  put(be, d.species_perm, host_.species_perm), put(be, d.species_off, host_.species_offsets);
  put(be, d.graph_off, host_.graph_offsets);
  put(be, d.rbf, host_.rbf), put(be, d.cutoff, host_.cutoff), put(be, d.dist2, host_.dist2);
  put(be, d.scalers, host_.degree_scalers);
  put(be, d.dist, host_.dist), put(be, d.unit, host_.unit);
  put(be, d.y_energy, host_.energy), put(be, d.y_forces, host_.forces);
  graph_ = GnnGraph{.N = host_.N, .E = host_.E, .G = host_.G,
                    .source = d.source.data<int32_t>(), .receiver = d.receiver.data<int32_t>(),
                    .recv_offsets = d.recv_off.data<int32_t>(), .src_perm = d.src_perm.data<int32_t>(),
                    .src_offsets = d.src_off.data<int32_t>(), .graph_offsets = d.graph_off.data<int32_t>(),
                    .rbf = d.rbf.data<float>(), .cutoff = d.cutoff.data<float>(), .dist2 = d.dist2.data<float>(),
                    .degree_scalers = d.scalers.data<float>()};
}

// The embedding, the layers (their groups acquired and released one at a time) and both heads.
void GnnModel::forward(const std::vector<CView>& front, const std::vector<CView>& back, bool training) {
  Buffers& d = *buf_;
  const int64_t N = graph_.N, G = graph_.G, C = d.C, H = d.H;
  GnnScratch s = d.scratch();
  const bool work = N > 0;
  if (work) backend_.gather_rows_f32(d.h[0].data<float>(), front[0].as_f32(), d.species.data<int32_t>(), N, C);
  for (int l = 0; l < cfg_.n_layer; ++l) {
    const std::vector<CView> w = layout_.group_ptrs(l + 1, store_->acquire(l + 1));
    if (work) convs_[static_cast<size_t>(l)]->forward(graph_, d.h[l].data<float>(), d.h[l + 1].data<float>(), w, s, training);
    store_->release(l + 1);
  }
  if (!work) return;
  const auto wb = f32_views(back);
  const float* hl = d.h[static_cast<size_t>(cfg_.n_layer)].data<float>();
  const SegmentOp pool = f_.pooling == GnnPooling::kMean ? SegmentOp::kMean : SegmentOp::kSum;
  backend_.segment_reduce_f32(d.pool.data<float>(), nullptr, hl, nullptr, d.graph_off.data<int32_t>(), G, C, pool, false);
  backend_.matmul_forward_f32(d.ez.data<float>(), d.pool.data<float>(), wb[0], wb[1], G, C, H, false);
  backend_.activation_forward_f32(d.ea.data<float>(), d.ez.data<float>(), G * H, f_.activation);
  backend_.matmul_forward_f32(d.e.data<float>(), d.ea.data<float>(), wb[2], wb[3], G, H, 1, false);
  force_head_forward(wb);
}

// The force head (equivariant, Newton's third law): per edge e: j -> i a scalar s_e = act((h W_r)[i]
// + (h W_s)[j] + d_e w_d + b_0) W_2 + b_2 and its pair force s_e u_e (u_e the unit vector from i to
// j), added to i and subtracted from j: f_i = sum_{e: j -> i} s_e u_e - sum_{e: i -> k} s_e u_e.
void GnnModel::force_head_forward(const std::vector<const float*>& wb) {
  Buffers& d = *buf_;
  const int64_t N = graph_.N, E = graph_.E, C = d.C, H = d.H;
  const float* hl = d.h[static_cast<size_t>(cfg_.n_layer)].data<float>();
  float *hr = d.hn.data<float>(), *hs = hr + N * H, *pre = d.fpre.data<float>(), *tmp = d.he.data<float>();
  backend_.matmul_forward_f32(hr, hl, wb[4], nullptr, N, C, H, false);
  backend_.matmul_forward_f32(hs, hl, wb[5], nullptr, N, C, H, false);
  backend_.matmul_forward_f32(pre, d.dist.data<float>(), wb[6], wb[7], E, 1, H, false);
  backend_.gather_rows_f32(tmp, hr, d.receiver.data<int32_t>(), E, H);
  backend_.add_f32(pre, pre, tmp, E * H);
  backend_.gather_rows_f32(tmp, hs, d.source.data<int32_t>(), E, H);
  backend_.add_f32(pre, pre, tmp, E * H);
  backend_.activation_forward_f32(d.fa.data<float>(), pre, E * H, f_.activation);
  backend_.matmul_forward_f32(d.fs.data<float>(), d.fa.data<float>(), wb[8], wb[9], E, H, 1, false);
  backend_.scale_rows_f32(d.ft.data<float>(), d.unit.data<float>(), d.fs.data<float>(), E, 3, false);
  float* f = d.f.data<float>();
  backend_.segment_reduce_f32(f, nullptr, d.ft.data<float>(), nullptr, d.recv_off.data<int32_t>(), N, 3, SegmentOp::kSum,
                              false);
  backend_.segment_reduce_f32(d.fsrc.data<float>(), nullptr, d.ft.data<float>(), d.src_perm.data<int32_t>(),
                              d.src_off.data<int32_t>(), N, 3, SegmentOp::kSum, false);
  backend_.scale(d.fsrc.data<float>(), -1.0f, 3 * N);
  backend_.add_f32(f, f, d.fsrc.data<float>(), 3 * N);
}

// Its backward from d.df: the head's gradients, and d0 (the last node states' gradient) written.
void GnnModel::force_head_backward(const std::vector<const float*>& wb, const std::vector<float*>& g) {
  Buffers& d = *buf_;
  const int64_t N = graph_.N, E = graph_.E, C = d.C, H = d.H;
  const float* hl = d.h[static_cast<size_t>(cfg_.n_layer)].data<float>();
  float *e3 = d.e3.data<float>(), *es = d.es.data<float>(), *he = d.he.data<float>();
  float *dhr = d.hn.data<float>(), *dhs = dhr + N * H, *dh = d.d0.data<float>(), *tmp = d.d1.data<float>();
  const int32_t* recv = d.recv_off.data<int32_t>();
  backend_.segment_broadcast_f32(e3, d.df.data<float>(), nullptr, recv, N, 3, false, false);  // d(t_e) = df_i - df_j
  backend_.gather_rows_f32(d.ft.data<float>(), d.df.data<float>(), d.source.data<int32_t>(), E, 3);  // (forward's t_e done)
  backend_.scale(d.ft.data<float>(), -1.0f, 3 * E);
  backend_.add_f32(e3, e3, d.ft.data<float>(), 3 * E);
  backend_.mul_f32(e3, e3, d.unit.data<float>(), 3 * E, false);
  backend_.matmul_forward_f32(es, e3, d.ones3.data<float>(), nullptr, E, 3, 1, false);  // d(s_e) = d(t_e) . u_e
  backend_.matmul_backward_f32(he, g[8], g[9], es, d.fa.data<float>(), wb[8], E, H, 1);
  backend_.activation_backward_f32(he, d.fpre.data<float>(), he, E * H, f_.activation, false);  // d(pre)
  backend_.matmul_backward_f32(nullptr, g[6], g[7], he, d.dist.data<float>(), wb[6], E, 1, H);
  backend_.segment_reduce_f32(dhr, nullptr, he, nullptr, recv, N, H, SegmentOp::kSum, false);
  backend_.segment_reduce_f32(dhs, nullptr, he, d.src_perm.data<int32_t>(), d.src_off.data<int32_t>(), N, H,
                              SegmentOp::kSum, false);
  backend_.matmul_backward_f32(dh, g[4], nullptr, dhr, hl, wb[4], N, C, H);
  backend_.matmul_backward_f32(tmp, g[5], nullptr, dhs, hl, wb[5], N, C, H);
  backend_.add_f32(dh, dh, tmp, N * C);
}

double GnnModel::loss(float dloss) {
  Buffers& d = *buf_;
  const int64_t N = graph_.N, G = graph_.G;
  if (N == 0) return 0.0;
  const double we = gnn_task_weights(f_).first;
  double sum = 0.0;
  auto rows = [&](DeviceBuffer& row, int64_t n) {
    std::vector<float> host(static_cast<size_t>(n));
    backend_.copy_to_host(host.data(), row.raw(), 0, host.size() * sizeof(float));
    double s = 0.0;
    for (float v : host) s += v;
    return s;
  };
  backend_.fill(d.df.raw(), DType::kF32, 0, 3 * N, 0.0f);
  backend_.fill(d.de.raw(), DType::kF32, 0, G, 0.0f);
  if (host_.has_forces) {
    backend_.weighted_mse_f32(d.row_f.data<float>(), dloss != 0.0f ? d.df.data<float>() : nullptr, d.f.data<float>(),
                              d.y_forces.data<float>(), d.w_f.data<float>(), N, 3, dloss);
    sum += rows(d.row_f, N);
  }
  if (host_.has_energy) {
    WEFT_CHECK(energy_ratio_ > 0.0, "model '{}': the energy term needs the global batch's counts (set_term_totals)",
               cfg_.name);
    const std::vector<float> w{static_cast<float>(we * energy_ratio_)};
    put(backend_, d.w_e, w);
    backend_.weighted_mse_f32(d.row_e.data<float>(), dloss != 0.0f ? d.de.data<float>() : nullptr, d.e.data<float>(),
                              d.y_energy.data<float>(), d.w_e.data<float>(), G, 1, dloss);
    sum += rows(d.row_e, G);
  }
  return sum;
}

// The heads' backward into d0 (the last node states' gradient, written) and the back group's grads.
void GnnModel::heads_backward(const std::vector<CView>& back, const std::vector<float*>& g) {
  Buffers& d = *buf_;
  const int64_t G = graph_.G, C = d.C, H = d.H;
  const auto wb = f32_views(back);
  float *dgh = d.dgh.data<float>(), *dgc = d.dgc.data<float>(), *dh = d.d0.data<float>();
  force_head_backward(wb, g);
  backend_.matmul_backward_f32(dgh, g[2], g[3], d.de.data<float>(), d.ea.data<float>(), wb[2], G, H, 1);
  backend_.activation_backward_f32(dgh, d.ez.data<float>(), dgh, G * H, f_.activation, false);
  backend_.matmul_backward_f32(dgc, g[0], g[1], dgh, d.pool.data<float>(), wb[0], G, C, H);
  backend_.segment_broadcast_f32(dh, dgc, nullptr, d.graph_off.data<int32_t>(), G, C, f_.pooling == GnnPooling::kMean,
                                 true);
}

// The store's order (params/param_store.h): the embedding held from the forward to the end, the
// layers acquired one at a time, the heads' group held from its forward to the end; the
// backward readies the heads, the layers from the last, then the embedding.
double GnnModel::run(const HostBatch& hb, float loss_scale, bool training) {
  const auto& mb = batch_as<GraphBatch>(hb, "graphs");
  WEFT_CHECK(store_ != nullptr, "model '{}' has no parameter store", cfg_.name);
  WEFT_CHECK(!training || training_, "model '{}': a training step on buffers reserved for evaluation", cfg_.name);
  upload(mb);
  const int L = cfg_.n_layer;
  const std::vector<CView> front = layout_.group_ptrs(0, store_->acquire(0));
  const std::vector<CView> back_w = layout_.group_ptrs(L + 1, store_->acquire(L + 1));
  forward(front, back_w, training);
  const double sum = loss(training ? loss_scale : 0.0f);
  if (training) {
    Buffers& d = *buf_;
    graph_.statistics_weight = static_cast<double>(loss_scale) * static_cast<double>(graph_.N);
    const bool work = graph_.N > 0;
    const std::vector<float*> gb = layout_.group_ptrs(L + 1, store_->grads(L + 1));
    if (work) heads_backward(back_w, gb);
    store_->ready(L + 1);
    GnnScratch s = d.scratch();
    float *dcur = d.d0.data<float>(), *dnext = d.d1.data<float>();
    for (int l = L - 1; l >= 0; --l) {
      const std::vector<CView> w = layout_.group_ptrs(l + 1, store_->acquire(l + 1));
      const std::vector<float*> g = layout_.group_ptrs(l + 1, store_->grads(l + 1));
      if (work) {
        convs_[static_cast<size_t>(l)]->backward(graph_, d.h[static_cast<size_t>(l)].data<float>(), dcur, dnext, w, g, s);
        std::swap(dcur, dnext);
      }
      store_->release(l + 1);
      store_->ready(l + 1);
    }
    if (work) {
      backend_.segment_reduce_f32(store_->grads(0), nullptr, dcur, d.species_perm.data<int32_t>(),
                                  d.species_off.data<int32_t>(), kGnnSpecies, d.C, SegmentOp::kSum, true);
    }
    store_->ready(0);
  }
  store_->release(L + 1);
  store_->release(0);
  return sum;
}

double GnnModel::train_micro_batch(const HostBatch& mb, float loss_scale) { return run(mb, loss_scale, true); }
double GnnModel::loss_sum(const HostBatch& mb) { return run(mb, 0.0f, false); }

namespace {
[[noreturn]] void no_stages() { throw_input("graph networks have no pipeline stages"); }
}  // namespace
void GnnModel::stage_forward(int, const HostBatch&, CView, bool) { no_stages(); }
double GnnModel::stage_backward(int, const HostBatch&, CView, float) { no_stages(); }
double GnnModel::stage_loss(int, const HostBatch&) { no_stages(); }
CView GnnModel::stage_output(int) { no_stages(); }
CView GnnModel::stage_input_grad() const { no_stages(); }

float* GnnModel::params() { return local_ ? local_->params() : nullptr; }
float* GnnModel::grads() { return local_ ? local_->grad_buffer() : nullptr; }

void GnnModel::init(uint64_t seed) {
  WEFT_CHECK(local_ != nullptr, "init without a local store");
  std::vector<float> host(static_cast<size_t>(layout_.total()));
  init_params(layout_, seed, host.data());
  backend_.copy_to_device(params(), 0, host.data(), host.size() * sizeof(float));
}

void GnnModel::zero_grads() {
  WEFT_CHECK(local_ != nullptr, "zero_grads without a local store");
  backend_.fill(grads(), DType::kF32, 0, layout_.total(), 0.0f);
}

void GnnModel::predict(const GraphBatch& b, std::vector<double>* energy, std::vector<float>* forces) {
  upload(b);
  const int L = cfg_.n_layer;
  const std::vector<CView> front = layout_.group_ptrs(0, store_->acquire(0));
  const std::vector<CView> back_w = layout_.group_ptrs(L + 1, store_->acquire(L + 1));
  forward(front, back_w, false);
  store_->release(L + 1);
  store_->release(0);
  std::vector<float> e(static_cast<size_t>(graph_.G)), f(static_cast<size_t>(3 * graph_.N));
  if (graph_.N > 0) {
    backend_.copy_to_host(e.data(), buf_->e.raw(), 0, e.size() * sizeof(float));
    backend_.copy_to_host(f.data(), buf_->f.raw(), 0, f.size() * sizeof(float));
  }
  energy->clear();
  for (int64_t g = 0; g < graph_.G; ++g) {
    const double atoms = host_.atoms[static_cast<size_t>(g)];
    energy->push_back(atoms * (e[static_cast<size_t>(g)] * f_.energy_std + f_.energy_mean));
  }
  forces->resize(f.size());
  for (size_t i = 0; i < f.size(); ++i) (*forces)[i] = static_cast<float>(f[i] * f_.force_scale);
}

int64_t GnnModel::outputs_of(const HostBatch& mb) const {
  const auto& b = batch_as<GraphBatch>(mb, "graphs");
  return b.graphs() + 3 * b.nodes();
}

void GnnModel::forward_outputs(const HostBatch& mb, float* out) {
  std::vector<double> energy;
  std::vector<float> forces;
  predict(batch_as<GraphBatch>(mb, "graphs"), &energy, &forces);
  for (size_t g = 0; g < energy.size(); ++g) out[g] = static_cast<float>(energy[g]);
  std::copy(forces.begin(), forces.end(), out + energy.size());
}

}  // namespace weft
