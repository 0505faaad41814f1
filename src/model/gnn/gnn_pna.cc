// PNA: principal neighbourhood aggregation (Corso et al. 2020), as PyG's PNAConv (towers 1, one
// pre and one post layer, edge features) inside HydraGNN's PNAStack, followed by BatchNorm and
// the family's activation (docs/model-gnn.md):
//   e_e  = rbf(d_e) W_enc + b_enc                                              (E, C)
//   m_e  = [h_r, h_s, e_e] W_pre + b_pre         r = receiver_e, s = source_e  (E, C)
//   A_i  = [mean, min, max, std] of m_e over node i's in-edges                  (N, 4C)
//   a_i  = [A_i, amp_i A_i, att_i A_i, lin_i A_i]  (the degree scalers)        (N, 16C)
//   y_i  = [h_i, a_i] W_post W_lin                                              (N, C)
//   h'_i = act(BatchNorm(y)_i)
// The concatenations are never formed: each input block multiplies its row block of the weight.
// PyG's post and lin biases are left out: ahead of BatchNorm they cancel (their exact gradient is
// 0 in training), and AdamW would only walk them on rounding noise (as a convolution before
// BatchNorm has no bias in ResNets).
// Tensors (PyG's names): edge_encoder.weight (G, C), edge_encoder.bias, pre_nns.0.0.weight (3C, C)
// (rows: receiver, source, edge), pre_nns.0.0.bias, post_nns.0.0.weight (17C, C) (rows: h, then
// per scaler identity, amplification, attenuation, linear the aggregators mean, min, max, std),
// lin.weight (C, C), norm.weight, norm.bias, norm.running_mean, norm.running_var (running
// statistics: ParamSpec::statistic_momentum).
#include <cmath>

#include "core/error.h"
#include "model/gnn/gnn_layers.h"

namespace weft {
namespace {

constexpr int kAggregators = 4;  // mean, min, max, std
constexpr int kScalers = 4;      // identity, amplification, attenuation, linear
constexpr float kStdFloor = 1e-5f;   // PyG's StdAggregation clamps the variance at 1e-5
constexpr float kNormEps = 1e-5f;    // torch.nn.BatchNorm1d's eps

class PnaConv final : public GnnConv {
 public:
  PnaConv(const GnnFields& f, int64_t C, Backend& be) : C_(C), G_(f.num_gaussians), act_(f.activation), be_(be) {}
  void reserve(int64_t N, int64_t E) override {
    Ncap_ = N;
    for (DeviceBuffer* b : {&enc_, &m_}) *b = DeviceBuffer(be_, DType::kF32, E * C_, MemCategory::kActivations);
    agg_ = DeviceBuffer(be_, DType::kF32, kAggregators * N * C_, MemCategory::kActivations);
    arg_ = DeviceBuffer(be_, DType::kI32, std::max<int64_t>(2 * N * C_, 1), MemCategory::kActivations);
    for (DeviceBuffer* b : {&t_, &y_, &z_}) *b = DeviceBuffer(be_, DType::kF32, N * C_, MemCategory::kActivations);
    for (DeviceBuffer* b : {&mean_, &rstd_}) *b = DeviceBuffer(be_, DType::kF32, C_, MemCategory::kActivations);
  }
  int64_t stash_bytes() const override {
    int64_t n = 0;
    for (const DeviceBuffer* b : {&enc_, &m_, &agg_, &arg_, &t_, &y_, &z_, &mean_, &rstd_}) n += static_cast<int64_t>(b->bytes());
    return n;
  }

  void forward(const GnnGraph& g, const float* h, float* out, const std::vector<CView>& wv, GnnScratch& s,
               bool training) override {
    const auto w = gnn_ops::weights_f32(wv, 10);
    const int64_t N = g.N, E = g.E, C = C_, CC = C * C;
    float *enc = enc_.data<float>(), *m = m_.data<float>(), *t = t_.data<float>(), *y = y_.data<float>();
    be_.matmul_forward_f32(enc, g.rbf, w[0], w[1], E, G_, C, false);
    be_.matmul_forward_f32(m, enc, w[2] + 2 * CC, w[3], E, C, C, false);  // pre's edge rows
    gnn_ops::add_endpoint_terms(be_, g, h, w[2], w[2] + CC, m, C, s);      // its receiver and source rows
    be_.segment_reduce_f32(agg(0), nullptr, m, nullptr, g.recv_offsets, N, C, SegmentOp::kMean, false);
    be_.segment_reduce_f32(agg(1), arg(0), m, nullptr, g.recv_offsets, N, C, SegmentOp::kMin, false);
    be_.segment_reduce_f32(agg(2), arg(1), m, nullptr, g.recv_offsets, N, C, SegmentOp::kMax, false);
    be_.segment_std_f32(agg(3), m, agg(0), nullptr, g.recv_offsets, N, C, kStdFloor);
    be_.matmul_forward_f32(t, h, w[4], nullptr, N, C, C, false);  // the node's own rows
    for (int k = 0; k < kAggregators; ++k) be_.matmul_forward_f32(t, agg(k), post(w[4], 0, k), nullptr, N, C, C, true);
    for (int sc = 1; sc < kScalers; ++sc) {  // sum_k A_k W_{s,k}, then scaled per node
      for (int k = 0; k < kAggregators; ++k) be_.matmul_forward_f32(s.n[0], agg(k), post(w[4], sc, k), nullptr, N, C, C, k > 0);
      be_.scale_rows_f32(t, s.n[0], scaler(g, sc), N, C, true);
    }
    be_.matmul_forward_f32(y, t, w[5], nullptr, N, C, C, false);
    if (training) {
      be_.batchnorm_forward_f32(z_.data<float>(), mean_.data<float>(), rstd_.data<float>(), y, w[6], w[7], N, C, kNormEps);
    } else {
      be_.batchnorm_inference_f32(z_.data<float>(), y, w[8], w[9], w[6], w[7], N, C, kNormEps);
    }
    be_.activation_forward_f32(out, z_.data<float>(), N * C, act_);
  }

  void backward(const GnnGraph& g, const float* h, float* dout, float* dh, const std::vector<CView>& wv,
                const std::vector<float*>& gr, GnnScratch& s) override {
    const auto w = gnn_ops::weights_f32(wv, 10);
    WEFT_CHECK(gr.size() == 10, "a PNA layer of 10 tensors received {} gradients", gr.size());
    const int64_t N = g.N, E = g.E, C = C_, CC = C * C;
    be_.activation_backward_f32(dout, z_.data<float>(), dout, N * C, act_, false);  // d(z)
    be_.fill(s.n[0], DType::kF32, 0, N * C, 0.0f);
    be_.batchnorm_backward_f32(s.n[0], gr[6], gr[7], dout, y_.data<float>(), w[6], mean_.data<float>(),
                               rstd_.data<float>(), N, C);  // d(y)
    add_batch_statistics(g, gr[8], gr[9]);
    be_.matmul_backward_f32(s.n[1], gr[5], nullptr, s.n[0], t_.data<float>(), w[5], N, C, C);  // d(t)
    const float* dt = s.n[1];
    be_.matmul_backward_f32(dh, gr[4], nullptr, dt, h, w[4], N, C, C);  // the node's own rows
    // Each aggregator's gradient d(A_k) = sum_s (scaler_s d(t)) W_{s,k}^T (in n[2]), then into
    // d(m) (e[0]) through its backward: the mean's broadcast writes every edge, the others add.
    for (int k = 0; k < kAggregators; ++k) {
      float* dA = s.n[2];
      be_.matmul_backward_f32(dA, post(gr[4], 0, k), nullptr, dt, agg(k), post(w[4], 0, k), N, C, C);
      for (int sc = 1; sc < kScalers; ++sc) {
        be_.scale_rows_f32(s.n[0], dt, scaler(g, sc), N, C, false);
        be_.gemm_f32(false, true, N, C, C, 1.0f, s.n[0], C, post(w[4], sc, k), C, 1.0f, dA, C);
        be_.matmul_backward_f32(nullptr, post(gr[4], sc, k), nullptr, s.n[0], agg(k), post(w[4], sc, k), N, C, C);
      }
      switch (k) {
        case 0: be_.segment_broadcast_f32(s.e[0], dA, nullptr, g.recv_offsets, N, C, true, false); break;
        case 1: be_.segment_arg_backward_f32(s.e[0], dA, arg(0), N, C); break;
        case 2: be_.segment_arg_backward_f32(s.e[0], dA, arg(1), N, C); break;
        default:
          be_.segment_std_backward_f32(s.e[0], dA, m_.data<float>(), agg(0), agg(3), nullptr, g.recv_offsets, N, C);
      }
    }
    const float* dm = s.e[0];
    be_.matmul_backward_f32(s.e[1], gr[2] + 2 * CC, gr[3], dm, enc_.data<float>(), w[2] + 2 * CC, E, C, C);  // d(e)
    be_.matmul_backward_f32(nullptr, gr[0], gr[1], s.e[1], g.rbf, w[0], E, G_, C);
    gnn_ops::endpoint_terms_backward(be_, g, h, dm, w[2], w[2] + CC, gr[2], gr[2] + CC, dh, C, s);
  }

 private:
  float* agg(int k) { return agg_.data<float>() + k * Ncap_ * C_; }
  int32_t* arg(int k) { return arg_.data<int32_t>() + k * Ncap_ * C_; }
  // The row block of post_nns.0.0.weight (or its gradient) for scaler sc and aggregator k.
  template <class T>
  T* post(T* w, int sc, int k) const {
    return w + (1 + sc * kAggregators + k) * C_ * C_;
  }
  static const float* scaler(const GnnGraph& g, int sc) { return g.degree_scalers + (sc - 1) * g.N; }

  // BatchNorm's running statistics: the batch's mean and unbiased variance (as torch's
  // BatchNorm1d keeps) weighted as the gradients are (GnnGraph::statistics_weight), added to the
  // running statistics' slots; the optimizer blends their sum over the step in.
  void add_batch_statistics(const GnnGraph& g, float* slot_mean, float* slot_var) {
    const size_t C = static_cast<size_t>(C_), bytes = C * sizeof(float);
    std::vector<float> mean(C), rstd(C), sm(C), sv(C);
    be_.copy_to_host(mean.data(), mean_.raw(), 0, bytes);
    be_.copy_to_host(rstd.data(), rstd_.raw(), 0, bytes);
    be_.copy_to_host(sm.data(), slot_mean, 0, bytes);
    be_.copy_to_host(sv.data(), slot_var, 0, bytes);
    const double n = static_cast<double>(g.N), unbiased = g.N > 1 ? n / (n - 1.0) : 1.0, wgt = g.statistics_weight;
    for (size_t c = 0; c < C; ++c) {
      const double r = rstd[c], var = std::max(0.0, 1.0 / (r * r) - static_cast<double>(kNormEps));
      sm[c] = static_cast<float>(sm[c] + wgt * mean[c]);
      sv[c] = static_cast<float>(sv[c] + wgt * var * unbiased);
    }
    be_.copy_to_device(slot_mean, 0, sm.data(), bytes);
    be_.copy_to_device(slot_var, 0, sv.data(), bytes);
  }

  int64_t C_, G_, Ncap_ = 0;
  Activation act_;
  Backend& be_;
  DeviceBuffer enc_, m_, agg_, arg_, t_, y_, z_, mean_, rstd_;
};

}  // namespace

std::unique_ptr<GnnConv> make_pna_conv(const GnnFields& f, int64_t C, Backend& be) {
  return std::make_unique<PnaConv>(f, C, be);
}

GnnLayerWork pna_conv_work(const GnnFields& f, double C, double n, double e) {
  using namespace gnn_kernels;
  const double G = f.num_gaussians;
  const Activation act = f.activation;
  GnnLayerWork w;
  std::vector<Kernel>& F = w.forward;
  std::vector<Kernel>& B = w.backward;
  F = {product_forward(e, G, C), product_forward(e, C, C)};
  endpoint_terms_forward(F, n, e, C);
  for (int k = 0; k < kAggregators; ++k) F.push_back(segment_sum(e, n, C));  // mean, min, max; std reads the mean
  F.push_back(product_forward(n, C, C));
  for (int k = 0; k < kScalers * kAggregators; ++k) F.push_back(product_forward(n, C, C));
  for (int sc = 1; sc < kScalers; ++sc) F.push_back(elementwise(n * C, 2));
  F.push_back(product_forward(n, C, C));
  F.push_back(elementwise(n * C, 1));  // batch normalisation: statistics and the affine map
  F.push_back(elementwise(n * C, 1));
  F.push_back(activation_forward(act, n * C));
  B.push_back(activation_backward(act, n * C));
  B.push_back(elementwise(n * C, 2));  // batch normalisation's backward: two column sums, then d(y)
  B.push_back(elementwise(n * C, 3));
  product_backward(B, n, C, C, true, false);  // lin
  product_backward(B, n, C, C, true, false);  // the node's own rows of post
  for (int k = 0; k < kAggregators; ++k) {
    product_backward(B, n, C, C, true, false);
    for (int sc = 1; sc < kScalers; ++sc) {
      B.push_back(elementwise(n * C, 1));
      product_backward(B, n, C, C, true, false);
    }
    B.push_back(segment_sum(n, e, C));  // into the edges
  }
  product_backward(B, e, C, C, true, true);   // the edge rows of pre
  product_backward(B, e, G, C, false, true);  // the edge encoder
  endpoint_terms_backward(B, n, e, C);
  return w;
}

}  // namespace weft
