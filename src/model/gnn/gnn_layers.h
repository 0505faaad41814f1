// The graph network's message-passing layers (docs/model-gnn.md), written once against the
// Backend's indexed and pointwise ops: every sum over a node's in-edges is a segment sum over
// the receivers (the edges are ordered by receiver), every sum over a node's out-edges (a
// gather's backward) a segment sum over the edges permuted by source; no atomics, so a run is
// bitwise reproducible on any backend.
//
// A layer maps node states h (N, C) to h' (N, C) and keeps what its backward needs (its stash,
// sized for the micro-batch's capacity). Parameters come as the group's tensors in the family's
// table order (gnn_family.cc), matrices (in, out): y = x W + b.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/device_buffer.h"
#include "core/view.h"
#include "model/description.h"
#include "model/gnn/gnn_config.h"

namespace weft {

// One micro-batch's graph on the device: N nodes, E edges (ordered by receiver), G graphs.
struct GnnGraph {
  int64_t N = 0, E = 0, G = 0;
  const int32_t* source = nullptr;     // E
  const int32_t* receiver = nullptr;   // E
  const int32_t* recv_offsets = nullptr;  // N + 1: node i's in-edges [o[i], o[i+1])
  const int32_t* src_perm = nullptr;   // E: the edges ordered by source (stable)
  const int32_t* src_offsets = nullptr;   // N + 1: node i's out-edges src_perm[o[i] .. o[i+1])
  const int32_t* graph_offsets = nullptr; // G + 1: graph g's nodes
  // Edge features computed from the geometry when the batch is uploaded (no gradient flows into
  // the positions: forces are a head's output, HydraGNN's direct force heads).
  const float* rbf = nullptr;     // (E, num_gaussians): SchNet's Gaussians of the distance
  const float* cutoff = nullptr;  // (E): 0.5 (cos(pi d / r_c) + 1)
  const float* dist2 = nullptr;   // (E): EGNN's squared distance
  const float* degree_scalers = nullptr;  // (3, N): PNA's amplification, attenuation, linear scalers
  // Training: the weight of this micro-batch's batch statistics (BatchNorm's) in the step's, as
  // its gradients are scaled: the loss scale times its nodes (the engine's loss scale holds 1 /
  // the global batch's atoms, so the slots of all micro-batches sum to the node-weighted mean).
  double statistics_weight = 0.0;
};

// Scratch shared by the layers of a model (sized for the capacity): three (E, C) and three (N, C).
struct GnnScratch {
  float* e[3] = {nullptr, nullptr, nullptr};
  float* n[3] = {nullptr, nullptr, nullptr};
};

class GnnConv {
 public:
  virtual ~GnnConv() = default;
  // Stash for up to N nodes and E edges.
  virtual void reserve(int64_t N, int64_t E) = 0;
  virtual int64_t stash_bytes() const = 0;
  // out (N, C) = the layer's output for node states h (N, C); keeps its stash. Evaluation
  // (!training) normalises with the running statistics instead of the batch's.
  virtual void forward(const GnnGraph& g, const float* h, float* out, const std::vector<CView>& w, GnnScratch& s,
                       bool training) = 0;
  // From dout (N, C) (read; may be overwritten): dh (N, C) written, the parameters' gradients
  // accumulated into grads. h is the forward's input.
  virtual void backward(const GnnGraph& g, const float* h, float* dout, float* dh, const std::vector<CView>& w,
                        const std::vector<float*>& grads, GnnScratch& s) = 0;
};

// The layer of the family's type for width C.
std::unique_ptr<GnnConv> make_gnn_conv(const GnnFields& f, int64_t C, Backend& be);
// PNA's layer (gnn_pna.cc), which make_gnn_conv returns for "pna".
std::unique_ptr<GnnConv> make_pna_conv(const GnnFields& f, int64_t C, Backend& be);

// Helpers the layers share (gnn_layers.cc).
namespace gnn_ops {
// The f32 pointers of a layer's `expect` tensors (a check that the group holds that many).
std::vector<const float*> weights_f32(const std::vector<CView>& w, size_t expect);
// The endpoint terms of an edge MLP's first product, [h_r, h_s] W = (h W_r)[r] + (h W_s)[s]
// (W_r, W_s the receiver's and source's row blocks, C x C): the nodes are multiplied before
// their rows are gathered, and both terms are added to the edge rows m (E, C), receiver first.
// Uses s.n[0], s.n[1], s.e[0].
void add_endpoint_terms(Backend& be, const GnnGraph& g, const float* h, const float* wr, const float* ws, float* m,
                        int64_t C, GnnScratch& s);
// Its backward from dm (E, C): dW_r, dW_s accumulated, the nodes' share added to dh (N, C).
// Uses s.n[0], s.n[1], s.n[2].
void endpoint_terms_backward(Backend& be, const GnnGraph& g, const float* h, const float* dm, const float* wr,
                             const float* ws, float* dwr, float* dws, float* dh, int64_t C, GnnScratch& s);
}  // namespace gnn_ops

// Elements of the stash one layer keeps per node and per edge (the memory model's counts).
struct GnnStashElems {
  int64_t per_node = 0, per_edge = 0, fixed = 0;  // fixed: whatever the graph (a norm's statistics)
};
GnnStashElems gnn_conv_stash(const GnnFields& f, int64_t C);

// The kernels one layer runs for n nodes and e edges (model/description.h's Kernel, in the
// order of the layer's forward and backward above): the planner prices them. A product
// y = x W (m x k @ k x n) is Kernel::product(m, n, k); its backward lists dX = dY W^T and
// dW = X^T dY; a memory-bound op the elements it reads and writes, an activation also its
// function (Kernel::function) and elements. Their products' FLOPs equal the layer's
// part of gnn_forward_flops (tested).
struct GnnLayerWork {
  std::vector<Kernel> forward, backward;
};
GnnLayerWork gnn_conv_work(const GnnFields& f, double C, double n, double e);
GnnLayerWork pna_conv_work(const GnnFields& f, double C, double n, double e);  // gnn_conv_work's for "pna"

// Kernel helpers shared with the heads' lists (gnn_description.cc): a product's forward
// (m x k) @ (k x n); its backward (with dX when `dx`, the bias sum when `db`); an activation's
// forward and backward over `elems`; segment sums, gathers and elementwise products.
namespace gnn_kernels {
Kernel product_forward(double m, double k, double n);
void product_backward(std::vector<Kernel>& out, double m, double k, double n, bool dx, bool db);
Kernel activation_forward(Activation a, double elems);
Kernel activation_backward(Activation a, double elems);
Kernel gather(double rows, double cols);            // rows gathered from a table
Kernel segment_sum(double in_rows, double out_rows, double cols);
Kernel elementwise(double elems, int operands);     // operands read, one written
// gnn_ops::add_endpoint_terms's kernels and endpoint_terms_backward's, appended to `out`.
void endpoint_terms_forward(std::vector<Kernel>& out, double n, double e, double C);
void endpoint_terms_backward(std::vector<Kernel>& out, double n, double e, double C);
}  // namespace gnn_kernels

}  // namespace weft
