// The ClimaX model's one description of itself (DESIGN.md principle 4, as GptDescription is the
// GPT's): for one rank's part of a run, its parameter counts, the model FLOPs per patch token and
// the elements of every buffer ClimaX::reserve allocates. The planner reads it (plan/shape.cc,
// plan/weft_memory.cc); tests/model/climax_test.cc holds the model's buffers equal to it.
//
// Letters (model/climax.h): B micro-batch, V variables, H x W grid, p patch, L = (H/p)(W/p)
// patches, N = B L tokens, C hidden, F MLP size, NH heads, K = V p^2 outputs per patch, t the
// tensor-parallel size; Cl = C/t, Fl = F/t, NHl = NH/t.
#pragma once
#include <cstdint>

#include "core/precision.h"
#include "model/block.h"
#include "model/config.h"
#include "model/description.h"
#include "parallel/recompute.h"

namespace weft {

struct ClimaxRunSpec {
  ModelConfig model{};
  int64_t B = 1;                   // samples per micro-batch
  int tp = 1;                      // tensor-parallel size t
  Recompute recompute = Recompute::kNone;
  int recompute_layers = -1;       // kFull: the first layers recomputed; -1: all
  Precision precision = Precision::kFp32;
  bool training = true;            // false: forward only (no gradient scratch)
  DType param_dtype = DType::kF32;  // the working parameters' storage (RunSpec::param_dtype)
  int64_t staging_chunk = kStagingChunk;  // RunSpec::staging_chunk
  bool native_products = false;           // RunSpec::native_products
};

class ClimaxDescription {
 public:
  // InputError naming the values when tp does not divide the heads or the MLP size, or the
  // shapes are inconsistent (ModelConfig::validate).
  explicit ClimaxDescription(const ClimaxRunSpec& spec);
  const ClimaxRunSpec& spec() const { return s_; }

  // --- parameters ---
  int64_t front_params(int tp) const;  // group 0 on one tensor-parallel rank
  int64_t layer_params(int tp) const;  // one block
  int64_t back_params() const;         // the final norm and the decoder head (replicated)
  int64_t rank_params() const { return front_params(s_.tp) + s_.model.n_layer * layer_params(s_.tp) + back_params(); }
  int64_t total_params() const { return front_params(1) + s_.model.n_layer * layer_params(1) + back_params(); }

  // --- FLOPs per patch token (whole tensors, summed over the tp ranks) ---
  // A training step: 3x the forward's products (2 FLOPs per multiply-add): patch embeddings
  // 2 V p^2 C, the variable aggregation's k, v 4 V C^2 + scores and sums 4 V C + out 2 C^2,
  // the blocks L (2 (4C^2 + 2CF) + 4 C L), the decoder 2 (decoder_depth C^2 + C K).
  static double train_flops_per_token(const ModelConfig& m);
  double forward_flops_per_token() const;
  double recompute_flops_per_token() const;  // full recompute: a block's forward per recomputed layer
  double layer_forward_flops_per_token() const;

  // --- activations and workspace: elements of one micro-batch on this rank ---
  int64_t tokens() const { return N_; }
  // The blocks' tensors follow model/block.h's storage policy (LayerDtypes: the storage
  // precision for what their ops write once); ClimaX's own tensors (front, back) and the
  // gradient scratch are f32 (rounded where written in a 16-bit run).
  LayerDtypes layer_dtypes() const { return LayerDtypes::of(s_.precision, false, s_.model.capabilities().residual_stream_16); }
  DType act_dtype() const { return dtype_of(s_.precision); }
  int64_t front_stash_elems() const;
  // The typed ops' staging of the front's and the back's calls (their 16-bit weights).
  int64_t ends_staging_elems() const;
  int64_t layer_stash_elems(int64_t i) const { return layer_stash(i).total(); }  // local layer i
  TypedElems layer_stash(int64_t i) const;
  int64_t back_stash_elems() const;
  TypedElems stash() const;
  TypedElems workspace_tensors() const;  // the model's own scratch
  int64_t stash_elems() const { return stash().total(); }
  int64_t workspace_tensor_elems() const { return workspace_tensors().total(); }
  int64_t tp_scratch_elems() const;        // the tensor-parallel layers' scratch
  int64_t workspace_elems() const { return workspace_tensor_elems() + tp_scratch_elems(); }
  int64_t recomputed_layers() const { return rf_; }
  // The typed ops' staging arena of a 16-bit run (the blocks' calls; GptDescription's).
  int64_t staging_elems() const;
  int64_t stash_bytes() const { return stash().bytes(act_dtype()); }
  int64_t workspace_bytes() const { return workspace_tensors().bytes(act_dtype()) + 4 * tp_scratch_elems(); }
  int64_t staging_bytes() const { return 4 * staging_elems(); }
  // The variable aggregation's tensor-parallel all-reduce in backward: V N C elements (V times a
  // block's), the gradient of the variable tokens.
  int64_t aggregation_grad_elems() const { return int64_t{s_.model.vars} * N_ * s_.model.n_embd; }

  // --- the planner's accelerator model (model/description.h) ---
  // What a micro-batch runs on one of t tensor-parallel ranks outside the blocks (the blocks are
  // the shared ones, with bidirectional attention over the L patches):
  //   front  V patch-embedding products (N, p^2) x (p^2, C), replicated; the variable
  //          aggregation: k|v of the V N tokens, column-parallel (V N, C) x (C, 2C/t), the query
  //          on one row, attention of each token's query over its V keys (4 N V C/t FLOPs,
  //          memory-bound: k|v, the probabilities, the output; twice that backward), out_proj
  //          row-parallel (N, C/t) x (C/t, C) with a forward all-reduce of N C; backward the
  //          all-reduces of the V N C token gradient and of the C query gradient (exact); the
  //          patch embeddings' backward is dW only (their input is the data)
  //   back   final LayerNorm, decoder_depth x (N, C) x (C, C) + GELU, (N, C) x (C, K), the
  //          latitude-weighted MSE: replicated
  EndsWork ends_work() const;
  // One rank (ClimaX has one pipeline stage): the model's own stash and workspace elements at
  // `e` bytes, counted as one micro-batch's (no pipeline keeps more), where flash attention
  // keeps each layer's fp32 log-sum-exp (B NH/t L) instead of its probabilities (B NH/t L^2);
  // ZeRO-3 holds the front through the step and gathers a block (or the back) at a time.
  AcceleratorMemory accelerator_memory(const AcceleratorOptions& o) const;

 private:
  TypedElems layer_elems(bool output) const;  // a layer's stash without recompute (its output if `output`)
  ClimaxRunSpec s_;
  int64_t N_ = 0, L_ = 0, C_ = 0, Cl_ = 0, Fl_ = 0, NHl_ = 0, V_ = 0, K_ = 0, P2_ = 0, rf_ = 0;
};

}  // namespace weft
