// Tensor-parallel layers (Megatron-LM core, megatron/core/tensor_parallel/layers.py and
// cross_entropy.py; Shoeybi et al. 2019): each is the single-device op with the
// communication pair of its region (mappings.h) around it, so that a model written for one
// device uses them as it would use plain layers. With tp = 1 each is exactly the plain op (the
// same backend calls in the same order); a rank never holds more than its part of a split
// weight, and the model never sees a rank, a group size or a collective.
//
// Shapes: N = B*T rows, Nl = N/tp rows held here under sequence parallelism (else N), and
// `l` marks this rank's part of a split size (OUTl = OUT/tp, Vl = Vp/tp). What a layer writes
// is rounded to the storage precision (a 16-bit tensor by the op, an f32 one by
// TensorParallel::round). Activations and parameters are typed views (core/view.h: a
// parameter in the store's dtype, 16-bit working parameters in a bf16/fp16 run); the
// parameters' gradients are fp32. The layers keep no state of
// their own beyond a few sizes: every layer of a kind can share one object; they share the
// group's scratch, one micro-batch (and one layer) at a time.
#pragma once
#include <cstdint>

#include "parallel/tp/mappings.h"

namespace weft {

// LayerNorm in front of column-parallel layers (the sequence-parallel LayerNorm region): it
// normalises the rows held here and hands the column-parallel products all N rows, all-gathered
// under sequence parallelism (their input region's forward runs here, where the gathered rows
// are produced and kept for the products' backward). Under sequence parallelism its weights see
// only this rank's rows, so their gradient is summed over the ranks right away.
class SequenceParallelLayerNorm {
 public:
  // rms: RMSNorm (no mean, no bias: mean and b null, fp32 tensors; Zhang & Sennrich 2019).
  SequenceParallelLayerNorm(TensorParallel& tp, float eps, bool rms = false) : tp_(tp), eps_(eps), rms_(rms) {}
  float eps() const { return eps_; }
  bool rms() const { return rms_; }
  // A LayerNorm without bias (MPT's; not RMSNorm): a null bias reads `zeros` (C floats kept 0)
  // and a null bias gradient accumulates into `sink` (C floats never read), both DEVICE memory of
  // the model's workspace. Without them a null bias is an error.
  void set_missing_bias(const float* zeros, float* sink) {
    zeros_ = zeros;
    sink_ = sink;
  }
  // b, or the zeros when b is null (a LayerNorm's bias the model does not have).
  CView bias(CView b) const;
  // out (N,C) all rows normalised; mean, rstd (Nl) of the rows held here; x (Nl,C). writes.
  void forward(View out, float* mean, float* rstd, CView x, CView w, CView b, int64_t N, int64_t C);
  // dx (Nl,C), dw, db (C) accumulate; dout (Nl,C): the gradient of this rank's rows of out,
  // already summed over the ranks (ColumnParallelLinear::backward's result).
  void backward(View dx, float* dw, float* db, CView dout, CView x, CView w, const float* mean, const float* rstd,
                int64_t N, int64_t C);

 private:
  TensorParallel& tp_;
  float eps_;
  bool rms_;
  const float* zeros_ = nullptr;
  float* sink_ = nullptr;
};

// Linear layer with its output columns split over the ranks (ColumnParallelLinear,
// gather_output = false): out (N,OUTl) = inp (N,IN) @ w (IN,OUTl) + b (OUTl). Its input region
// (identity / all-reduce of the input gradient; all-gather / reduce-scatter under sequence
// parallelism) wraps it: the forward half runs where its input is produced
// (SequenceParallelLayerNorm), the backward half here.
class ColumnParallelLinear {
 public:
  explicit ColumnParallelLinear(TensorParallel& tp) : tp_(tp) {}
  // writes out (N,OUTl).
  void forward(View out, CView inp, CView w, CView b, int64_t N, int64_t IN, int64_t OUTl);
  // With the GELU epilogue: pre (N,OUTl) = the product as forward() writes it, out = gelu(pre),
  // both rounded (Backend::matmul_gelu_forward: one pass on a backend that fuses it).
  void forward_gelu(View out, View pre, CView inp, CView w, CView b, int64_t N, int64_t IN, int64_t OUTl);
  // dw (IN,OUTl), db (OUTl) accumulate; dinp (N,IN) is scratch for this rank's partial input
  // gradient. Returns the input gradient summed over the ranks: this rank's rows (Nl,IN),
  // in dinp or in the group's scratch.
  View backward(View dinp, float* dw, float* db, CView dout, CView inp, CView w, int64_t N, int64_t IN,
                int64_t OUTl);

 private:
  TensorParallel& tp_;
};

// Linear layer with its input rows split over the ranks (RowParallelLinear,
// input_is_parallel = true), followed by the residual add: out (Nl,OUT) = res (Nl,OUT) +
// inp (N,INl) @ w (INl,OUT) + b (OUT). The partial products are summed over the ranks before
// the residual (all-reduce; reduce-scatter to the rows held here under sequence parallelism):
// fp32 sums, then the bias; 16-bit sums (mappings.h) with the bias in rank 0's partial. With
// tp = 1 the residual and the bias ride on the product.
class RowParallelLinear {
 public:
  explicit RowParallelLinear(TensorParallel& tp) : tp_(tp) {}
  // writes out (Nl,OUT); out may alias neither res nor inp. With tp = 1 out is written in two steps (the
  // residual and bias, then the product): it must be f32 (InputError otherwise).
  void forward(View out, CView res, CView inp, CView w, CView b, int64_t N, int64_t INl, int64_t OUT);
  // forward() and then norm.forward(ln_out, mean, rstd, out, ln_w, ln_b, N, OUT) (the residual
  // stream's next LayerNorm), with the same writes, fused where the backend offers it: tp = 1,
  // product + residual + LayerNorm (Backend::matmul_residual_layernorm_forward); tp > 1 without
  // sequence parallelism, residual + LayerNorm after the reduction (residual_layernorm_forward);
  // under sequence parallelism the two calls.
  void forward_norm(SequenceParallelLayerNorm& norm, View out, View ln_out, float* mean, float* rstd, CView res,
                    CView inp, CView w, CView b, CView ln_w, CView ln_b, int64_t N,
                    int64_t INl, int64_t OUT);
  // dinp (N,INl) writes; dw (INl,OUT), db (OUT) accumulate; dout (Nl,OUT) the gradient of the
  // rows of out held here (= that of res: the residual passes it on unchanged).
  void backward(View dinp, float* dw, float* db, CView dout, CView inp, CView w, int64_t N, int64_t INl,
                int64_t OUT);
  // The backward of a layer whose input was gelu(pre) (ColumnParallelLinear::forward_gelu's
  // output): dinp = gelu'(pre) * (dout w^T), rounded (Backend::matmul_gelu_backward).
  void backward_gelu(View dinp, float* dw, float* db, CView dout, CView inp, CView w, CView pre, int64_t N,
                     int64_t INl, int64_t OUT);

 private:
  // tp > 1: inp @ w + b summed over the ranks, the rows held here (Nl,OUT), in the group's sum
  // dtype (its partial-sum or row scratch).
  CView reduced_product(CView inp, CView w, CView b, int64_t N, int64_t INl, int64_t OUT);
  TensorParallel& tp_;
};

// Token embedding with the vocabulary rows split over the ranks (VocabParallelEmbedding),
// plus the learned positions: each rank looks up the tokens it holds (positions on rank 0),
// and the lookups are summed like a row-parallel layer's partial outputs.
class VocabParallelEmbedding {
 public:
  // Vp: padded vocabulary; this rank holds wte rows [v0(), v0() + vocab_rows()).
  VocabParallelEmbedding(TensorParallel& tp, int64_t Vp) : tp_(tp), rows_(tp.part(Vp)), v0_(tp.rank() * rows_) {}
  int64_t v0() const { return v0_; }
  int64_t vocab_rows() const { return rows_; }
  // out (Nl,C) = wte[tokens] + wpe[t] for the rows held here; tokens (B,T). writes (rounded).
  void forward(View out, const int32_t* tokens, CView wte, CView wpe, int64_t B, int64_t T, int64_t C);
  // The gradient of all B*T rows of the lookup from that of the rows held here, dout (Nl,C).
  CView output_grad(CView dout, int64_t N, int64_t C) { return tp_.row_output_backward(dout, N, C); }
  // dwte (rows held here), dwpe accumulate the lookup's gradient dy (B,T,C) from output_grad().
  void backward(float* dwte, float* dwpe, CView dy, const int32_t* tokens, int64_t B, int64_t T, int64_t C);

 private:
  TensorParallel& tp_;
  int64_t rows_, v0_;
};

// The output head with the vocabulary split over the ranks: logits against this rank's rows of
// the tied embedding wte (a column-parallel product over the vocabulary, its input region that
// of ColumnParallelLinear) and the vocabulary-parallel cross-entropy (vocab_parallel_cross_entropy):
// the row max, then the sums of exp and the target logit, each reduced over the ranks, so that
// no rank ever holds a whole row of logits. Rows are processed in chunks (the caller's).
class VocabParallelHead {
 public:
  // V real and Vp padded vocabulary; this rank holds columns [v0, v0 + vocab_rows()).
  VocabParallelHead(TensorParallel& tp, int64_t V, int64_t Vp);
  int64_t vocab_rows() const { return rows_; }
  // logits (rows,Vl) = x (rows,C) @ wte (Vl,C)^T. writes (rounded).
  void logits(View logits, CView x, CView wte, int64_t rows, int64_t C);
  // losses (rows) = -log softmax(logits)[target] over the whole vocabulary, writes; with
  // dloss != 0 the logits become dlogits * dloss in place (0 on padding). stats (3*rows):
  // scratch for the row statistics.
  void cross_entropy(View logits, float* losses, const int32_t* targets, int64_t rows, float dloss, float* stats);
  // From dlogits (rows,Vl): dwte (Vl,C) accumulates dlogits^T x; dx (rows,C) = dlogits wte,
  // summed over the ranks where that can happen chunk by chunk (column_input_backward_rows).
  void backward(View dx, float* dwte, CView dlogits, CView x, CView wte, int64_t rows, int64_t C);
  // After backward() covered all N rows of dx (N,C): the input gradient of this rank's rows
  // (Nl,C), in dx or in the group's scratch.
  View input_grad(View dx, int64_t N, int64_t C) { return tp_.column_input_backward_scatter(dx, N, C); }
  // out (Vp, device) = the logits of one row x (C): every vocabulary entry in its first V
  // (generation; the padding columns are scratch).
  void row_logits(float* out, CView x, CView wte, int64_t C);

 private:
  TensorParallel& tp_;
  int64_t V_, Vp_, rows_, v0_, cols_;  // cols_: real (not padding) columns held here
};

}  // namespace weft
