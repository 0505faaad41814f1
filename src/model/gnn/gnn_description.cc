#include "model/gnn/gnn_description.h"

#include <algorithm>
#include <memory>

#include "model/gnn/gnn_config.h"
#include "model/gnn/gnn_layers.h"
#include "model/params.h"

namespace weft {

GnnFlops gnn_forward_flops(const ModelConfig& cfg) {
  const GnnFields& f = gnn_fields(cfg);
  const double C = cfg.n_embd, H = cfg.ffn, L = cfg.n_layer;
  GnnFlops out;
  switch (f.layer) {
    case GnnLayer::kSchnet:  // filter network per edge; lin1, lin2 per node
      out.per_edge = L * 2.0 * (f.num_gaussians * C + C * C);
      out.per_node = L * 2.0 * (2 * C * C);
      break;
    case GnnLayer::kEgnn:  // receiver/source projections, node MLP per node; radial + edge_mlp.2 per edge
      out.per_edge = L * 2.0 * (C + C * C);
      out.per_node = L * 2.0 * (5 * C * C);
      break;
    case GnnLayer::kPna:  // edge encoder and pre's edge rows per edge; pre's node rows, post (17 blocks), lin per node
      out.per_edge = L * 2.0 * (f.num_gaussians * C + C * C);
      out.per_node = L * 2.0 * (20 * C * C);
      break;
  }
  out.per_node += 2.0 * (2 * C * H);       // the force head: both ends' products
  out.per_edge += 2.0 * (2 * H);           // its distance term and scalar
  out.per_graph = 2.0 * (C * H + H);      // the energy head
  return out;
}

GnnCapacity gnn_capacity(const ModelConfig& cfg, int64_t graphs) {
  const GnnFields& f = gnn_fields(cfg);
  // Graphs bounded by the nodes only: a cost-balanced sampler may give a micro-batch more than
  // `graphs` small ones.
  const int64_t N = graphs * f.max_atoms;
  return {N, N * f.max_neighbours, N};
}

namespace {

// A micro-batch of B graphs as the data makes them on average: its atoms and edges from the
// data's statistics (the family's mean_atoms and mean_in_degree, which the data source sets),
// or the capacity's max_atoms and max_neighbours when they are unknown.
struct MeanGraph {
  double N = 0, E = 0, G = 0;
};
MeanGraph mean_graph(const ModelConfig& cfg, int64_t B) {
  const GnnFields& f = gnn_fields(cfg);
  const double atoms = f.mean_atoms > 0.0 ? f.mean_atoms : f.max_atoms;
  const double degree = f.mean_in_degree > 0.0 ? f.mean_in_degree : f.max_neighbours;
  const double G = static_cast<double>(B);
  return {G * atoms, G * atoms * degree, G};
}

// The heads' kernels (GnnModel::forward's pooling and energy head, force_head_forward, the loss;
// heads_backward), in their order.
void heads_work(const ModelConfig& cfg, const MeanGraph& g, EndsWork& w) {
  using namespace gnn_kernels;
  const GnnFields& f = gnn_fields(cfg);
  const double C = cfg.n_embd, H = cfg.ffn, N = g.N, E = g.E, G = g.G;
  const Activation act = f.activation;
  w.back_forward.kernels = {segment_sum(N, G, C), product_forward(G, C, H), activation_forward(act, G * H),
                            product_forward(G, H, 1), product_forward(N, C, H), product_forward(N, C, H),
                            product_forward(E, 1, H), gather(E, H), elementwise(E * H, 2), gather(E, H),
                            elementwise(E * H, 2), activation_forward(act, E * H), product_forward(E, H, 1),
                            elementwise(3 * E, 2), segment_sum(E, N, 3), segment_sum(E, N, 3),
                            elementwise(3 * N, 1), elementwise(3 * N, 2),
                            Kernel::memory(5 * 3 * N), Kernel::memory(5 * G)};  // the two weighted MSEs
  std::vector<Kernel>& B = w.back_backward.kernels;
  B = {segment_sum(N, E, 3), gather(E, 3), elementwise(3 * E, 1), elementwise(3 * E, 2), elementwise(3 * E, 2),
       product_forward(E, 3, 1)};
  product_backward(B, E, H, 1, true, true);
  B.push_back(activation_backward(act, E * H));
  product_backward(B, E, 1, H, false, true);
  B.push_back(segment_sum(E, N, H));
  B.push_back(segment_sum(E, N, H));
  product_backward(B, N, C, H, true, false);
  product_backward(B, N, C, H, true, false);
  B.push_back(elementwise(N * C, 2));
  product_backward(B, G, H, 1, true, true);
  B.push_back(activation_backward(act, G * H));
  product_backward(B, G, C, H, true, true);
  B.push_back(segment_sum(G, N, C));
}

// The front: the edge features the batch's upload computes on the host (SchNet's Gaussians and
// cosine cutoff; EGNN's squared distance; both the unit vectors) and copies, the species
// embedding, then every layer; its backward the layers' from the last and the embedding's
// gradient (a segment sum over the atoms by species).
void front_work(const ModelConfig& cfg, const MeanGraph& g, EndsWork& w) {
  using namespace gnn_kernels;
  const GnnFields& f = gnn_fields(cfg);
  const double C = cfg.n_embd, N = g.N, E = g.E;
  const bool schnet = f.layer == GnnLayer::kSchnet;
  const Kernel features = Kernel::memory(E * ((schnet ? f.num_gaussians + 1.0 : 1.0) + 5.0) + 4.0 * N);
  w.front_forward.kernels = {features, Kernel::memory(features.elems), gather(N, C)};
  const GnnLayerWork layer = gnn_conv_work(f, C, N, E);
  for (int l = 0; l < cfg.n_layer; ++l) {
    w.front_forward.kernels.insert(w.front_forward.kernels.end(), layer.forward.begin(), layer.forward.end());
    w.front_backward.kernels.insert(w.front_backward.kernels.end(), layer.backward.begin(), layer.backward.end());
  }
  w.front_backward.kernels.push_back(segment_sum(N, kGnnSpecies, C));
}

class GnnDescription final : public ModelDescription {
 public:
  explicit GnnDescription(const RunSpec& spec)
      : cfg_(spec.model),
        layout_(param_layout(spec.model)),
        cap_(gnn_capacity(spec.model, spec.B)),
        B_(spec.B),
        training_(spec.training) {}
  int64_t rank_params() const override { return layout_.total(); }
  int64_t total_params() const override { return layout_.total(); }
  int64_t layer_params() const override {
    return cfg_.n_layer > 0 ? layout_.group_range(1).second - layout_.group_range(1).first : 0;
  }
  int64_t front_params() const override { return layout_.group_range(0).second - layout_.group_range(0).first; }
  StoreGroups store_groups() const override {
    int64_t other = 1;
    for (int g = 1; g < layout_.num_groups(); ++g) {
      other = std::max(other, layout_.group_range(g).second - layout_.group_range(g).first);
    }
    return {layout_.total(), front_params(), other, 0};
  }
  // GnnModel::reserve's float buffers of the stash: the layers', the node states, the heads'.
  int64_t stash_elems() const override {
    const GnnStashElems s = gnn_conv_stash(gnn_fields(cfg_), cfg_.n_embd);
    const int64_t C = cfg_.n_embd, H = cfg_.ffn, L = cfg_.n_layer, N = cap_.N, E = cap_.E, G = cap_.G;
    const GnnFields& f = gnn_fields(cfg_);
    const int64_t layer_inputs = f.layer == GnnLayer::kSchnet ? E * (f.num_gaussians + 1)
                                 : f.layer == GnnLayer::kPna ? E * (f.num_gaussians + 1) + 3 * N
                                                             : E;
    const int64_t inputs = layer_inputs + 4 * E + G + 3 * N;
    const int64_t energy_head = G * C + 2 * G * H + G, force_head = 2 * E * H + E + 3 * E + 3 * N;
    return L * (s.per_node * N + s.per_edge * E + s.fixed) + (L + 1) * N * C + energy_head + force_head + inputs;
  }
  int64_t workspace_elems() const override {
    const int64_t C = cfg_.n_embd, H = cfg_.ffn, N = cap_.N, E = cap_.E, G = cap_.G;
    const int64_t force_head = 2 * N * H + E * H + 3 * E + E + 3 + 3 * N;
    return 3 * E * C + 3 * N * C + 2 * N * C + G * H + G * C + force_head + G + 3 * N + N + G + 4;
  }
  int64_t residual_elems() const override { return 0; }
  int64_t tokens() const override { return cap_.N; }
  int64_t part_layers() const override { return cfg_.n_layer; }
  int64_t recomputed_layers() const override { return 0; }
  std::vector<TpCall> tp_calls() const override { return {}; }
  double train_flops_per_position() const override {
    const GnnFlops f = gnn_forward_flops(cfg_);
    const GnnFields& g = gnn_fields(cfg_);
    const double degree = g.mean_in_degree > 0.0 ? g.mean_in_degree : g.max_neighbours;
    const double atoms = g.mean_atoms > 0.0 ? g.mean_atoms : g.max_atoms;
    return 3.0 * (f.per_node + degree * f.per_edge + f.per_graph / atoms);
  }
  // The whole model is its front (embedding and layers) and back (heads and loss): it has no
  // transformer blocks for the planner's block formulas. Priced at the data's mean graph.
  EndsWork ends_work() const override {
    EndsWork w;
    const MeanGraph g = mean_graph(cfg_, B_);
    front_work(cfg_, g, w);
    heads_work(cfg_, g, w);
    return w;
  }
  double mean_positions() const override { return mean_graph(cfg_, B_).N; }
  AcceleratorMemory accelerator_memory(const AcceleratorOptions& o) const override {
    AcceleratorMemory m;
    m.per_micro_batch = o.e * static_cast<double>(stash_elems());
    m.workspace = o.e * static_cast<double>(workspace_elems());
    m.slot = static_cast<double>(store_groups().max_other);
    return m;
  }

 private:
  ModelConfig cfg_;
  ParamLayout layout_;
  GnnCapacity cap_;
  int64_t B_;
  bool training_;
};

}  // namespace

std::unique_ptr<ModelDescription> describe_gnn(const RunSpec& spec) { return std::make_unique<GnnDescription>(spec); }

}  // namespace weft
