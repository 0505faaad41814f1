#include "model/gnn/gnn_layers.h"

#include "core/error.h"

namespace weft {

namespace gnn_ops {

std::vector<const float*> weights_f32(const std::vector<CView>& w, size_t expect) {
  WEFT_CHECK(w.size() == expect, "a graph layer of {} tensors received {}", expect, w.size());
  std::vector<const float*> out;
  for (const CView& v : w) out.push_back(v.as_f32("a graph network's parameter"));
  return out;
}

void add_endpoint_terms(Backend& be, const GnnGraph& g, const float* h, const float* wr, const float* ws, float* m,
                        int64_t C, GnnScratch& s) {
  const int64_t N = g.N, E = g.E;
  be.matmul_forward_f32(s.n[0], h, wr, nullptr, N, C, C, false);  // receiver part
  be.matmul_forward_f32(s.n[1], h, ws, nullptr, N, C, C, false);  // source part
  be.gather_rows_f32(s.e[0], s.n[0], g.receiver, E, C);
  be.add_f32(m, m, s.e[0], E * C);
  be.gather_rows_f32(s.e[0], s.n[1], g.source, E, C);
  be.add_f32(m, m, s.e[0], E * C);
}

void endpoint_terms_backward(Backend& be, const GnnGraph& g, const float* h, const float* dm, const float* wr,
                             const float* ws, float* dwr, float* dws, float* dh, int64_t C, GnnScratch& s) {
  const int64_t N = g.N;
  be.segment_reduce_f32(s.n[0], nullptr, dm, nullptr, g.recv_offsets, N, C, SegmentOp::kSum, false);
  be.segment_reduce_f32(s.n[1], nullptr, dm, g.src_perm, g.src_offsets, N, C, SegmentOp::kSum, false);
  be.matmul_backward_f32(s.n[2], dwr, nullptr, s.n[0], h, wr, N, C, C);
  be.add_f32(dh, dh, s.n[2], N * C);
  be.matmul_backward_f32(s.n[2], dws, nullptr, s.n[1], h, ws, N, C, C);
  be.add_f32(dh, dh, s.n[2], N * C);
}

}  // namespace gnn_ops

namespace {

using gnn_ops::weights_f32;

// SchNet's continuous-filter convolution (Schuett et al. 2017; PyG's CFConv, as HydraGNN's
// SCFStack uses it), followed by the family's activation:
//   W_e  = (ssp(rbf(d_e) W0 + b1) W2 + b3) * cutoff(d_e)           (E, C)
//   m_e  = (h W4)[source_e] * W_e                                   (E, C)
//   h'_i = act(sum_{e: receiver_e = i} m_e W5 + b6)                 (N, C)
// Tensors: filter.0.weight (G, C), filter.0.bias, filter.2.weight (C, C), filter.2.bias,
// lin1.weight (C, C) (no bias, as PyG), lin2.weight (C, C), lin2.bias.
class SchnetConv final : public GnnConv {
 public:
  SchnetConv(const GnnFields& f, int64_t C, Backend& be) : C_(C), G_(f.num_gaussians), act_(f.activation), be_(be) {}
  void reserve(int64_t N, int64_t E) override {
    for (DeviceBuffer* b : {&f1_, &a_, &wc_, &xs_}) *b = DeviceBuffer(be_, DType::kF32, E * C_, MemCategory::kActivations);
    for (DeviceBuffer* b : {&agg_, &o_}) *b = DeviceBuffer(be_, DType::kF32, N * C_, MemCategory::kActivations);
  }
  int64_t stash_bytes() const override {
    return static_cast<int64_t>(f1_.bytes() + a_.bytes() + wc_.bytes() + xs_.bytes() + agg_.bytes() + o_.bytes());
  }

  void forward(const GnnGraph& g, const float* h, float* out, const std::vector<CView>& wv, GnnScratch& s,
               bool) override {
    const auto w = weights_f32(wv, 7);
    const int64_t N = g.N, E = g.E, C = C_;
    float *f1 = f1_.data<float>(), *a = a_.data<float>(), *wc = wc_.data<float>(), *xs = xs_.data<float>();
    be_.matmul_forward_f32(f1, g.rbf, w[0], w[1], E, G_, C, false);
    be_.activation_forward_f32(a, f1, E * C, Activation::kShiftedSoftplus);
    be_.matmul_forward_f32(wc, a, w[2], w[3], E, C, C, false);
    be_.scale_rows_f32(wc, wc, g.cutoff, E, C, false);
    be_.matmul_forward_f32(s.n[0], h, w[4], nullptr, N, C, C, false);
    be_.gather_rows_f32(xs, s.n[0], g.source, E, C);
    be_.mul_f32(s.e[0], xs, wc, E * C, false);
    be_.segment_reduce_f32(agg_.data<float>(), nullptr, s.e[0], nullptr, g.recv_offsets, N, C, SegmentOp::kSum, false);
    be_.matmul_forward_f32(o_.data<float>(), agg_.data<float>(), w[5], w[6], N, C, C, false);
    be_.activation_forward_f32(out, o_.data<float>(), N * C, act_);
  }

  void backward(const GnnGraph& g, const float* h, float* dout, float* dh, const std::vector<CView>& wv,
                const std::vector<float*>& gr, GnnScratch& s) override {
    const auto w = weights_f32(wv, 7);
    const int64_t N = g.N, E = g.E, C = C_;
    be_.activation_backward_f32(dout, o_.data<float>(), dout, N * C, act_, false);  // d(o)
    be_.matmul_backward_f32(s.n[0], gr[5], gr[6], dout, agg_.data<float>(), w[5], N, C, C);  // d(agg)
    be_.segment_broadcast_f32(s.e[0], s.n[0], nullptr, g.recv_offsets, N, C, false, false);  // d(m)
    be_.mul_f32(s.e[1], s.e[0], wc_.data<float>(), E * C, false);                          // d(xs)
    be_.mul_f32(s.e[2], s.e[0], xs_.data<float>(), E * C, false);                          // d(W_e)
    be_.segment_reduce_f32(s.n[1], nullptr, s.e[1], g.src_perm, g.src_offsets, N, C, SegmentOp::kSum, false);
    be_.matmul_backward_f32(dh, gr[4], nullptr, s.n[1], h, w[4], N, C, C);
    be_.scale_rows_f32(s.e[2], s.e[2], g.cutoff, E, C, false);
    be_.matmul_backward_f32(s.e[0], gr[2], gr[3], s.e[2], a_.data<float>(), w[2], E, C, C);  // d(a)
    be_.activation_backward_f32(s.e[0], f1_.data<float>(), s.e[0], E * C, Activation::kShiftedSoftplus, false);
    be_.matmul_backward_f32(nullptr, gr[0], gr[1], s.e[0], g.rbf, w[0], E, G_, C);
  }

 private:
  int64_t C_, G_;
  Activation act_;
  Backend& be_;
  DeviceBuffer f1_, a_, wc_, xs_, agg_, o_;
};

// EGNN's equivariant graph convolutional layer (Satorras et al. 2021; HydraGNN's E_GCL, without
// the coordinate update, with its residual), followed by the family's activation:
//   m_e  = act(act([h_r, h_s, d_e^2] W_e + b) W_m + b_m)   r = receiver_e, s = source_e  (E, C)
//   a_i  = sum_{e: receiver_e = i} m_e                                                   (N, C)
//   h'_i = act(h_i + act([h_i, a_i] W_n + b_n) W_o + b_o)                                (N, C)
// The concatenated inputs' weights are held as their row blocks. Tensors:
// edge_mlp.0.weight_receiver (C, C), edge_mlp.0.weight_source (C, C), edge_mlp.0.weight_radial
// (1, C), edge_mlp.0.bias, edge_mlp.2.weight (C, C), edge_mlp.2.bias, node_mlp.0.weight_node
// (C, C), node_mlp.0.weight_message (C, C), node_mlp.0.bias, node_mlp.2.weight (C, C),
// node_mlp.2.bias.
class EgnnConv final : public GnnConv {
 public:
  EgnnConv(const GnnFields& f, int64_t C, Backend& be) : C_(C), act_(f.activation), be_(be) {}
  void reserve(int64_t N, int64_t E) override {
    for (DeviceBuffer* b : {&pre_, &a1_, &m1_, &m_}) *b = DeviceBuffer(be_, DType::kF32, E * C_, MemCategory::kActivations);
    for (DeviceBuffer* b : {&agg_, &u_, &ua_, &r_}) *b = DeviceBuffer(be_, DType::kF32, N * C_, MemCategory::kActivations);
  }
  int64_t stash_bytes() const override {
    return static_cast<int64_t>(pre_.bytes() + a1_.bytes() + m1_.bytes() + m_.bytes() + agg_.bytes() + u_.bytes() +
                                ua_.bytes() + r_.bytes());
  }

  void forward(const GnnGraph& g, const float* h, float* out, const std::vector<CView>& wv, GnnScratch& s,
               bool) override {
    const auto w = weights_f32(wv, 11);
    const int64_t N = g.N, E = g.E, C = C_;
    float *pre = pre_.data<float>(), *a1 = a1_.data<float>(), *m1 = m1_.data<float>(), *m = m_.data<float>();
    float *agg = agg_.data<float>(), *u = u_.data<float>(), *ua = ua_.data<float>(), *r = r_.data<float>();
    be_.matmul_forward_f32(pre, g.dist2, w[2], w[3], E, 1, C, false);
    gnn_ops::add_endpoint_terms(be_, g, h, w[0], w[1], pre, C, s);
    be_.activation_forward_f32(a1, pre, E * C, act_);
    be_.matmul_forward_f32(m1, a1, w[4], w[5], E, C, C, false);
    be_.activation_forward_f32(m, m1, E * C, act_);
    be_.segment_reduce_f32(agg, nullptr, m, nullptr, g.recv_offsets, N, C, SegmentOp::kSum, false);
    be_.matmul_forward_f32(u, h, w[6], w[8], N, C, C, false);
    be_.matmul_forward_f32(u, agg, w[7], nullptr, N, C, C, true);
    be_.activation_forward_f32(ua, u, N * C, act_);
    be_.matmul_forward_f32(s.n[0], ua, w[9], w[10], N, C, C, false);
    be_.add_f32(r, h, s.n[0], N * C);
    be_.activation_forward_f32(out, r, N * C, act_);
  }

  void backward(const GnnGraph& g, const float* h, float* dout, float* dh, const std::vector<CView>& wv,
                const std::vector<float*>& gr, GnnScratch& s) override {
    const auto w = weights_f32(wv, 11);
    const int64_t N = g.N, E = g.E, C = C_;
    be_.activation_backward_f32(dout, r_.data<float>(), dout, N * C, act_, false);  // d(r): residual and update
    be_.matmul_backward_f32(s.n[0], gr[9], gr[10], dout, ua_.data<float>(), w[9], N, C, C);
    be_.activation_backward_f32(s.n[0], u_.data<float>(), s.n[0], N * C, act_, false);  // d(u)
    be_.matmul_backward_f32(dh, gr[6], gr[8], s.n[0], h, w[6], N, C, C);
    be_.add_f32(dh, dh, dout, N * C);
    be_.matmul_backward_f32(s.n[1], gr[7], nullptr, s.n[0], agg_.data<float>(), w[7], N, C, C);  // d(agg)
    be_.segment_broadcast_f32(s.e[0], s.n[1], nullptr, g.recv_offsets, N, C, false, false);  // d(m)
    be_.activation_backward_f32(s.e[0], m1_.data<float>(), s.e[0], E * C, act_, false);
    be_.matmul_backward_f32(s.e[1], gr[4], gr[5], s.e[0], a1_.data<float>(), w[4], E, C, C);
    be_.activation_backward_f32(s.e[1], pre_.data<float>(), s.e[1], E * C, act_, false);  // d(pre)
    be_.matmul_backward_f32(nullptr, gr[2], gr[3], s.e[1], g.dist2, w[2], E, 1, C);
    gnn_ops::endpoint_terms_backward(be_, g, h, s.e[1], w[0], w[1], gr[0], gr[1], dh, C, s);
  }

 private:
  int64_t C_;
  Activation act_;
  Backend& be_;
  DeviceBuffer pre_, a1_, m1_, m_, agg_, u_, ua_, r_;
};

}  // namespace

std::unique_ptr<GnnConv> make_gnn_conv(const GnnFields& f, int64_t C, Backend& be) {
  switch (f.layer) {
    case GnnLayer::kSchnet: return std::make_unique<SchnetConv>(f, C, be);
    case GnnLayer::kEgnn: return std::make_unique<EgnnConv>(f, C, be);
    case GnnLayer::kPna: return make_pna_conv(f, C, be);
  }
  throw_input("graph layer '{}' is not available", gnn_layer_name(f.layer));
}

namespace gnn_kernels {

Kernel product_forward(double m, double k, double n) { return Kernel::product(m, n, k); }

void product_backward(std::vector<Kernel>& out, double m, double k, double n, bool dx, bool db) {
  if (dx) out.push_back(Kernel::product_abt(m, k, n));  // dX = dY W^T
  out.push_back(Kernel::product_atb(k, n, m));          // dW = X^T dY
  if (db) out.push_back(Kernel::memory(m * n + n));  // the bias: column sums of dY
}

Kernel activation_forward(Activation a, double elems) {
  Kernel k = Kernel::memory(2 * elems);
  k.function = activation_name(a);
  k.functions = elems;
  return k;
}
Kernel activation_backward(Activation a, double elems) {
  Kernel k = Kernel::memory(3 * elems);
  k.function = activation_backward_name(a);
  k.functions = elems;
  return k;
}
Kernel gather(double rows, double cols) { return Kernel::memory(2 * rows * cols + rows); }
Kernel segment_sum(double in_rows, double out_rows, double cols) {
  return Kernel::memory((in_rows + out_rows) * cols + in_rows);
}
Kernel elementwise(double elems, int operands) { return Kernel::memory((operands + 1) * elems); }

void endpoint_terms_forward(std::vector<Kernel>& out, double n, double e, double C) {
  out.push_back(product_forward(n, C, C));
  out.push_back(product_forward(n, C, C));
  for (int i = 0; i < 2; ++i) {
    out.push_back(gather(e, C));
    out.push_back(elementwise(e * C, 2));
  }
}

void endpoint_terms_backward(std::vector<Kernel>& out, double n, double e, double C) {
  out.push_back(segment_sum(e, n, C));
  out.push_back(segment_sum(e, n, C));
  for (int i = 0; i < 2; ++i) {  // the receiver and source rows
    product_backward(out, n, C, C, true, false);
    out.push_back(elementwise(n * C, 2));
  }
}

}  // namespace gnn_kernels

GnnLayerWork gnn_conv_work(const GnnFields& f, double C, double n, double e) {
  using namespace gnn_kernels;
  GnnLayerWork w;
  std::vector<Kernel>& F = w.forward;
  std::vector<Kernel>& B = w.backward;
  const Activation act = f.activation;
  switch (f.layer) {
    case GnnLayer::kSchnet: {
      const double G = f.num_gaussians;
      F = {product_forward(e, G, C), activation_forward(Activation::kShiftedSoftplus, e * C), product_forward(e, C, C),
           elementwise(e * C, 1), product_forward(n, C, C), gather(e, C), elementwise(e * C, 2),
           segment_sum(e, n, C), product_forward(n, C, C), activation_forward(act, n * C)};
      B.push_back(activation_backward(act, n * C));
      product_backward(B, n, C, C, true, true);  // lin2
      B.push_back(segment_sum(n, e, C));         // the receivers' gradient broadcast to their edges
      B.push_back(elementwise(e * C, 2));
      B.push_back(elementwise(e * C, 2));
      B.push_back(segment_sum(e, n, C));         // over the edges by source
      product_backward(B, n, C, C, true, false);  // lin1
      B.push_back(elementwise(e * C, 1));         // the cutoff
      product_backward(B, e, C, C, true, true);   // filter.2
      B.push_back(activation_backward(Activation::kShiftedSoftplus, e * C));
      product_backward(B, e, G, C, false, true);  // filter.0
      return w;
    }
    case GnnLayer::kEgnn: {
      F = {product_forward(e, 1, C)};
      endpoint_terms_forward(F, n, e, C);
      F.insert(F.end(), {activation_forward(act, e * C), product_forward(e, C, C), activation_forward(act, e * C),
                         segment_sum(e, n, C), product_forward(n, C, C), product_forward(n, C, C),
                         activation_forward(act, n * C), product_forward(n, C, C), elementwise(n * C, 2),
                         activation_forward(act, n * C)});
      B.push_back(activation_backward(act, n * C));
      product_backward(B, n, C, C, true, true);  // node_mlp.2
      B.push_back(activation_backward(act, n * C));
      product_backward(B, n, C, C, true, true);  // node_mlp.0 (node rows)
      B.push_back(elementwise(n * C, 2));
      product_backward(B, n, C, C, true, false);  // node_mlp.0 (message rows)
      B.push_back(segment_sum(n, e, C));
      B.push_back(activation_backward(act, e * C));
      product_backward(B, e, C, C, true, true);  // edge_mlp.2
      B.push_back(activation_backward(act, e * C));
      product_backward(B, e, 1, C, false, true);  // the radial row
      endpoint_terms_backward(B, n, e, C);
      return w;
    }
    case GnnLayer::kPna: return pna_conv_work(f, C, n, e);
  }
  throw_input("graph layer '{}' is not available", gnn_layer_name(f.layer));
}

GnnStashElems gnn_conv_stash(const GnnFields& f, int64_t C) {
  switch (f.layer) {
    case GnnLayer::kSchnet: return {2 * C, 4 * C};
    case GnnLayer::kEgnn: return {4 * C, 4 * C};
    // four aggregators, their min/max rows (int32), post's and lin's outputs, the norm's; the
    // edge features and messages; the batch's mean and 1/std
    case GnnLayer::kPna: return {9 * C, 2 * C, 2 * C};
  }
  return {};
}

}  // namespace weft
