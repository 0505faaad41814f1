// The time of a ClimaX micro-batch outside its blocks (its blocks are the GPT's, priced by
// plan/predict.cc with bidirectional attention): the front (patch embeddings and the variable
// aggregation) and the back (final LayerNorm, decoder, latitude-weighted MSE) on one rank, with
// the aggregation's tensor-parallel collectives (plan/vit_shape.h lists what a micro-batch runs).
//
// Products are priced per shape (plan/kernel_model.h, gemm_time) forward and backward with their
// own shapes as predict.cc's are: dX = dY W^T (m x k, inner n) and dW = X^T dY (k x n, inner m);
// the patch embeddings' backward is dW only (their input is the data). The aggregation's
// attention of one query over V keys per token (4 N V C/t FLOPs: d_head-long dot products and
// sums) is memory-bound: its bytes (k|v, the probabilities, the output) over the memory
// bandwidth, twice that backward. Element-wise work (bias and embedding adds, LayerNorm, GELU,
// the loss) is memory-bound as predict.cc prices it. Collectives are priced at the compute
// precision's bytes per element with the layout's tp codec (the query's C-element gradient
// stays exact), as the blocks' are.
#pragma once
#include <utility>
#include <vector>

#include "plan/compression.h"
#include "plan/predict.h"

namespace weft::plan {

struct VitEndsCost {
  double front_fwd = 0, front_bwd = 0, back_fwd = 0, back_bwd = 0;  // seconds of one micro-batch on one rank
  double front_flops = 0, back_flops = 0;  // forward + backward FLOPs of one micro-batch on one rank
  // The aggregation's tensor-parallel collectives of one micro-batch: (priced call, calls).
  std::vector<std::pair<PricedCall, double>> tp_forward, tp_backward;
};

VitEndsCost vit_ends_cost(const ModelShape& m, const System& sys, const Layout& l, const Options& o);

}  // namespace weft::plan
