// The pre-LayerNorm transformer block, written once for one device and shared by every model
// family (GPT-2's causal blocks, ClimaX's bidirectional ones):
//   x (Nl,C) -> LayerNorm -> qkv (column-parallel: this rank's heads) -> attention -> proj
//   (row-parallel) + x = res2 -> LayerNorm -> fc (column-parallel) -> GELU -> fc_proj
//   (row-parallel) + res2 = res3.
// Tensor parallelism comes in through the layers of parallel/tp (the block never sees a rank
// or a collective); the family decides only whether attention is causal. Letters: N = B*T rows,
// Nl = N/tp under sequence parallelism (else N), C hidden, Cl = C/tp, F = ffn/tp, NH = heads/tp.
#pragma once
#include <cstdint>

#include "backend/backend.h"
#include "model/config.h"
#include "model/params.h"
#include "parallel/tp/layers.h"

namespace weft {

// One layer's activations for its backward pass. The pointers lead into the micro-batch's
// stash or, for what the layer recomputes, into the shared workspace.
struct LayerActs {
  float *ln1, *ln1_mean, *ln1_rstd;   // (N,C) normalised input (gathered under SP), (Nl), (Nl)
  float* qkv;                          // (N,3Cl)
  float* att;                          // (B,NH,T,T) softmax probabilities, or with flash
                                       // attention the log-sum-exp (B,NH,T)
  float* atty;                         // (N,Cl) attention output before the projection
  float* res2;                         // (Nl,C) residual after attention
  float *ln2, *ln2_mean, *ln2_rstd;   // (N,C), (Nl), (Nl)
  float* fch;                          // (N,F) fc output (pre-GELU)
  float* fch_gelu;                     // (N,F)
  float* res3;                         // (Nl,C) residual after the MLP = next layer's input
};

// Points a layer's tensors at consecutive pieces taken by `take` (the probabilities at `att`;
// the output res3 only if `output`). ln1 and ln2 hold all N rows (gathered under sequence
// parallelism); the residuals and statistics the rank's Nl rows.
template <class Take>
void carve_layer(LayerActs& a, Take& take, int64_t N, int64_t Nl, int64_t C, int64_t Cl, int64_t F, float* att,
                 bool output) {
  a.ln1 = take(N * C);
  a.ln1_mean = take(Nl);
  a.ln1_rstd = take(Nl);
  a.qkv = take(N * 3 * Cl);
  a.att = att;
  a.atty = take(N * Cl);
  a.res2 = take(Nl * C);
  a.ln2 = take(N * C);
  a.ln2_mean = take(Nl);
  a.ln2_rstd = take(Nl);
  a.fch = take(N * F);
  a.fch_gelu = take(N * F);
  a.res3 = output ? take(Nl * C) : nullptr;
}

// The gradient scratch of one micro-batch that the block's backward works in.
struct BlockScratch {
  float* dres = nullptr;  // (Nl,C) gradient of the residual stream: d(res3) in, d(x) out
  float* dC = nullptr;    // (N,C)
  float* d3C = nullptr;   // (N,3Cl)
  float* dF = nullptr;    // (N,F)
  float* att = nullptr;   // selective recompute: the recomputed probabilities (B,NH,T,T)
};

class TransformerBlock {
 public:
  // The layers (and their group) belong to the model; causal: GPT's masked attention, else
  // every position attends to all T (the Vision Transformer's).
  TransformerBlock(const ModelConfig& cfg, Backend& backend, TensorParallel& tp, SequenceParallelLayerNorm& ln,
                   ColumnParallelLinear& column, RowParallelLinear& row, bool causal);
  bool causal() const { return causal_; }
  // Flash attention (the log-sum-exp instead of the probabilities; causal blocks only).
  void set_attention_lse(bool on);
  bool attention_lse() const { return lse_; }

  // Forward from x (Nl,C) into a; with `to_gelu` stop after the MLP's GELU (what the backward
  // needs: the full-recompute rematerialisation).
  void forward(const LayerPtrs& lw, const float* x, LayerActs& a, int64_t B, int64_t T, bool to_gelu);
  // Backward: s.dres holds d(res3) (this rank's rows) on entry and d(x) on return; the weight
  // gradients accumulate into lg. full: rematerialise the layer into `a` first (full
  // recompute); a.att == s.att: recompute the probabilities (selective recompute).
  void backward(const LayerPtrs& lw, const LayerPtrs& lg, const float* x, LayerActs& a, int64_t B, int64_t T,
                bool full, const BlockScratch& s);

 private:
  void attention_forward(float* out, float* att, const float* qkv, int64_t B, int64_t T);
  int64_t C_, F_, NH_, Cl_;  // F_, NH_, Cl_: this rank's parts
  Backend& be_;
  TensorParallel& tp_;
  SequenceParallelLayerNorm& ln_;
  ColumnParallelLinear& column_;
  RowParallelLinear& row_;
  bool causal_;
  bool lse_ = false;
};

}  // namespace weft
