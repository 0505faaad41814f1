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
    case GnnLayer::kPna: break;
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

class GnnDescription final : public ModelDescription {
 public:
  explicit GnnDescription(const RunSpec& spec)
      : cfg_(spec.model), layout_(param_layout(spec.model)), cap_(gnn_capacity(spec.model, spec.B)), training_(spec.training) {}
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
    const int64_t inputs = (f.layer == GnnLayer::kSchnet ? E * (f.num_gaussians + 1) : E) + 4 * E + G + 3 * N;
    const int64_t energy_head = G * C + 2 * G * H + G, force_head = 2 * E * H + E + 3 * E + 3 * N;
    return L * (s.per_node * N + s.per_edge * E) + (L + 1) * N * C + energy_head + force_head + inputs;
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
  // The accelerator model does not price graph networks yet (issue 33 item 8): no kernels.
  EndsWork ends_work() const override { return {}; }
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
  bool training_;
};

}  // namespace

std::unique_ptr<ModelDescription> describe_gnn(const RunSpec& spec) { return std::make_unique<GnnDescription>(spec); }

}  // namespace weft
