// The planner's models of a ClimaX Vision Transformer (model/climax.h, docs/climax.md), beside the
// GPT's: its shape, its memory per rank, and the tensor-parallel calls of its variable
// aggregation (the compute of its front and back: plan/vit_compute.h). Every count of the model
// (parameters per tensor-parallel rank and group, FLOPs per patch token, the stash and workspace
// elements of ClimaX::reserve, the aggregation's all-reduce) is read from ClimaxDescription
// (model/climax_description.h), not recomputed; what stays here is what lies around the model
// (ZeRO shards, gathered groups, 16-bit storage, FlashAttention).
//
// What a ClimaX micro-batch of B samples runs on one of t tensor-parallel ranks (L patches,
// N = B L tokens, V variables, C hidden, p patch, K = V p^2 outputs per patch):
//   front   V patch-embedding products (N, p^2) x (p^2, C), replicated; the variable
//           aggregation: k|v of the V N tokens, column-parallel (V N, C) x (C, 2C/t), the query
//           on one row, attention of each token's query over its V keys, out_proj row-parallel
//           (N, C/t) x (C/t, C) with a forward all-reduce of N C
//   blocks  the GPT's pre-LN blocks with bidirectional attention over the L patches
//   back    final LayerNorm, decoder_depth x (N, C) x (C, C) + GELU, (N, C) x (C, K), the
//           latitude-weighted MSE: replicated
// Tensor parallelism (ORBIT's Hybrid-STOP): per block 2 all-reduces of N C forward and 2
// backward (a fully recomputed block 1 more), and the aggregation's forward all-reduce of N C,
// its backward all-reduces of the V N C token gradient (V times a block's) and of the C query
// gradient. No pipeline stages, no sequence parallelism, no selective recompute (the layout
// rules refuse them: parallel/layout_rules.h, family rule).
#pragma once
#include <cstdint>

#include "model/climax/climax_description.h"
#include "model/config.h"
#include "plan/memory.h"
#include "plan/shape.h"

namespace weft::plan {

// One rank of layout `l` training micro-batches of l.micro_batch samples of model `mc`.
ClimaxDescription describe_vit(const ModelConfig& mc, const Layout& l);

// Tensor-parallel all-reduces of one micro-batch outside the blocks, in elements (weft's calls,
// model/climax.cc): forward out_proj's row-parallel output (N C); backward the k|v product's
// input gradient, the V N C variable tokens' (ClimaxDescription::aggregation_grad_elems), and
// the query product's, C.
struct VitAggregationComm {
  int64_t forward = 0;      // N C, one call
  int64_t token_grad = 0;   // V N C, one call
  int64_t query_grad = 0;   // C, one call
};
VitAggregationComm vit_aggregation_comm(const ClimaxDescription& d);

// Memory of one rank (a ClimaX model has one pipeline stage) in the 16-bit mixed-precision model
// of plan/memory.h for GPU systems (o.memory_model "weft" is plan/weft_memory.h's, any family):
// the ZeRO formulas on the rank's parameters (add_zero_states); activations = the model's
// stash elements (one micro-batch: no pipeline keeps more) at the compute precision's bytes,
// where FlashAttention (o.flash_attention) keeps each layer's fp32 log-sum-exp (B NH/t L)
// instead of its probabilities (B NH/t L^2); workspace = the model's workspace elements the
// same way; comm: plan/memory.cc's comm_buffers, with the front held through the step under
// ZeRO-3 (as ClimaX acquires it). Dropout is not counted (weft's ClimaX has none).
MemoryBreakdown vit_stage_memory(const ModelShape& m, const Layout& l, const MemoryOptions& o);

}  // namespace weft::plan
