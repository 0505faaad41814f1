// A HydraGNN-style graph network for atomistic structures (issue 33; Lupo Pasini et al., seed
// 003; docs/model-gnn.md), written once for one device against the Backend:
//   h_0 = embedding[species]                                     (N, C)
//   L message-passing layers (SchNet or EGNN: model/gnn/gnn_layers.h)
//   energy head (graph level): pool (mean or add) over each graph's nodes, Linear(C, H), act,
//     Linear(H, 1): the graph's normalised energy per atom
//   force head (node level, equivariant): a scalar per edge from both ends' states and the
//     distance, f_i = sum over i's in-edges of scalar x the unit vector towards the source: its
//     normalised force (the direct-force form of OCP's models; HydraGNN's node MLP on invariant
//     states cannot give a force a direction)
//   loss: w_F sum over atoms of the mean squared force-component error + w_E (atoms / graphs of
//     the global batch) sum over graphs of the squared energy error: after the engine divides by
//     the global batch's atoms, w_F MSE(forces) + w_E MSE(energy per atom), the task weights
//     normalised to sum to 1 (HydraGNN's multi-task loss).
// Data parallelism only (the family's capabilities refuse tp and pp): the store's groups are
// the embedding (0), the layers (1..L) and the heads (L+1). fp32 only.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/device_buffer.h"
#include "model/config.h"
#include "model/gnn/gnn_graph.h"
#include "model/gnn/gnn_layers.h"
#include "model/model.h"
#include "model/params.h"
#include "params/param_store.h"

namespace weft {

class LocalParamStore;
class GraphBatch;

class GnnModel final : public Model {
 public:
  GnnModel(const ModelConfig& cfg, Backend& backend, bool local_store = true);
  ~GnnModel() override;
  GnnModel(const GnnModel&) = delete;
  GnnModel& operator=(const GnnModel&) = delete;

  const ModelConfig& config() const override { return cfg_; }
  const ParamLayout& layout() const override { return layout_; }
  void set_tp(TensorParallelOps* tp, bool sequence_parallel) override;
  void set_store(ParamStore* store) override { store_ = store; }
  void set_recompute(Recompute mode, int full_layers) override;
  void set_precision(Precision p) override;
  // A GraphBatch's budget (nodes, edges, graphs) sizes every buffer.
  void reserve(const HostBatch& capacity, bool training, int64_t head_chunk, int slots) override;
  int64_t activation_bytes() const override;
  int64_t workspace_bytes() const override;
  // {atoms, graphs} of the global batch: the energy term is scaled by atoms / graphs.
  void set_term_totals(const std::vector<int64_t>& totals) override;

  double train_micro_batch(const HostBatch& mb, float loss_scale) override;
  double loss_sum(const HostBatch& mb) override;

  void stage_forward(int, const HostBatch&, CView, bool) override;
  double stage_backward(int, const HostBatch&, CView, float) override;
  double stage_loss(int, const HostBatch&) override;
  CView stage_output(int) override;
  CView stage_input_grad() const override;

  // The outputs of a GraphBatch (physical units): its graphs' energies, then its atoms' forces
  // (3 each).
  int64_t outputs_of(const HostBatch& mb) const override;
  void forward_outputs(const HostBatch& mb, float* out) override;

  // --- the single-process conveniences (reference tests, eval) ---
  float* params();  // the local store's buffers (null without one): device memory
  float* grads();
  void init(uint64_t seed);
  void zero_grads();
  // Forward only: each graph's predicted energy (eV or the data's unit, not normalised) and each
  // atom's force (3 per atom), host memory.
  void predict(const GraphBatch& b, std::vector<double>* energy, std::vector<float>* forces);

 private:
  struct Buffers;
  void upload(const GraphBatch& b);
  void forward(const std::vector<CView>& front, const std::vector<CView>& back, bool training);
  double loss(float dloss);  // the loss sum of the uploaded batch; dloss != 0: the heads' output gradients
  void heads_backward(const std::vector<CView>& back, const std::vector<float*>& g);
  void force_head_forward(const std::vector<const float*>& wb);
  void force_head_backward(const std::vector<const float*>& wb, const std::vector<float*>& g);
  double run(const HostBatch& mb, float loss_scale, bool training);

  ModelConfig cfg_;
  GnnFields f_;
  ParamLayout layout_;
  Backend& backend_;
  std::unique_ptr<LocalParamStore> local_;
  ParamStore* store_ = nullptr;
  std::vector<std::unique_ptr<GnnConv>> convs_;
  std::unique_ptr<Buffers> buf_;
  GnnHostGraph host_;
  GnnGraph graph_;
  double energy_ratio_ = 0.0;  // atoms / graphs of the global batch (set_term_totals)
  bool training_ = false;
};

}  // namespace weft
