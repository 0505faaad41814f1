// GPT-2 forward and backward, written once for one device against the Backend interface.
// Computes exactly what Hugging Face's GPT2LMHeadModel computes (pre-LayerNorm blocks,
// learned positions, fused QKV, GELU tanh approximation, tied embeddings, final LayerNorm)
// with dropout 0. Parameters and gradients live in one flat buffer each (see params.h).
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "core/buffer.h"
#include "model/config.h"
#include "model/param_store.h"
#include "model/params.h"
#include "model/tp_ops.h"

namespace weft {

// Activations of one micro-batch (B, T), kept for the backward pass.
struct Activations {
  int64_t B = 0, T = 0;  // capacity
  struct Layer {
    float *ln1, *ln1_mean, *ln1_rstd;   // (N,C), (N), (N)
    float* qkv;                          // (N,3C)
    float* att;                          // (B,NH,T,T) softmax probabilities
    float* atty;                         // (N,C) attention output before c_proj
    float* res2;                         // (N,C) residual after attention
    float *ln2, *ln2_mean, *ln2_rstd;   // (N,C), (N), (N)
    float* fch;                          // (N,F) c_fc output (pre-GELU)
    float* fch_gelu;                     // (N,F)
    float* res3;                         // (N,C) residual after the MLP = next layer's input
  };
  float* encoded = nullptr;  // (N,C) embeddings = layer 0 input
  std::vector<Layer> layers;
  float *lnf = nullptr, *lnf_mean = nullptr, *lnf_rstd = nullptr;
  float* losses = nullptr;  // (N)
  float* logits = nullptr;  // (head_chunk, Vp)
  // Gradient scratch.
  float* dres = nullptr;    // (N,C) gradient of the residual stream
  float* dC = nullptr;      // (N,C)
  float* d3C = nullptr;     // (N,3C)
  float* dF = nullptr;      // (N,F)
  float* tmp = nullptr;     // (N,C) partial sums of row-parallel products (tp > 1)
  float* stats = nullptr;   // (3, head_chunk) row max, sum of exp, target logit
  float* loc = nullptr;     // (N/tp, C) sequence-parallel scratch
  float* lns = nullptr;     // (2C) LayerNorm gradient scratch (sequence parallel)
  Buffer<float> storage;
  int64_t head_chunk = 0;
  int64_t bytes() const { return static_cast<int64_t>(storage.bytes()); }
};

// Parameters and gradients in two whole flat buffers: the single-process store.
class LocalParamStore final : public ParamStore {
 public:
  explicit LocalParamStore(const ParamLayout& layout);
  const float* acquire(int g) override { return params_.data() + layout_.group_range(g).first; }
  void release(int) override {}
  float* grads(int g) override { return grads_.data() + layout_.group_range(g).first; }
  void ready(int) override {}
  float* params() { return params_.data(); }
  float* grad_buffer() { return grads_.data(); }

 private:
  const ParamLayout& layout_;
  Buffer<float> params_;
  Buffer<float> grads_;
};

class GPT {
 public:
  // local_store: allocate whole parameter and gradient buffers (the single-process store).
  // A data-parallel run passes false and installs its own store with set_store().
  // tp_size/tp_rank: this process holds tensor-parallel part tp_rank of tp_size (see
  // ParamLayout); set_tp() then provides the communication.
  GPT(const ModelConfig& cfg, Backend& backend, bool local_store = true, int tp_size = 1, int tp_rank = 0,
      const StageSpec& stage = {});
  // sequence_parallel: the LayerNorm/residual regions hold only this rank's B*T/tp rows;
  // all-gathers and reduce-scatters replace the all-reduces (Korthikanti et al. 2022).
  void set_tp(TensorParallelOps* tp, bool sequence_parallel = false) {
    tp_ = tp;
    sp_ = sequence_parallel && P_ > 1;
  }
  bool sequence_parallel() const { return sp_; }

  const ModelConfig& config() const { return layout_.config(); }
  const ParamLayout& layout() const { return layout_; }
  // The local store's whole buffers (null without a local store).
  float* params() { return local_ ? local_->params() : nullptr; }
  float* grads() { return local_ ? local_->grad_buffer() : nullptr; }
  int64_t num_params() const { return layout_.total(); }
  Backend& backend() { return backend_; }
  void set_store(ParamStore* store) { store_ = store; }
  ParamStore& store() { return *store_; }

  void init(uint64_t seed) { init_params(layout_, seed, params()); }
  void zero_grads() { std::fill(grads(), grads() + layout_.total(), 0.0f); }
  // Bytes of the activation storage (stashed activations + workspace).
  int64_t activation_bytes() const { return acts_.bytes(); }

  // Sizes the activation storage for micro-batches of up to (B, T); training also keeps
  // gradient scratch. head_chunk: rows of logits materialised at once (0: automatic).
  // slots: activation sets for that many micro-batches in flight (pipeline schedules).
  void reserve(int64_t B, int64_t T, bool training, int64_t head_chunk = 0, int slots = 1);

  // Forward and backward of one micro-batch: returns the mean loss over its B*T tokens and
  // accumulates d(loss_scale * sum of token losses)/d(params) into grads().
  // inputs, targets: (B,T).
  float forward_backward(const int32_t* inputs, const int32_t* targets, int64_t B, int64_t T,
                         float loss_scale);
  // Mean loss over B*T tokens, no gradients.
  float forward_loss(const int32_t* inputs, const int32_t* targets, int64_t B, int64_t T);
  // Logits (V real entries) of the last position of a single sequence of length T.
  void forward_last_logits(const int32_t* tokens, int64_t T, float* logits_out);

  // --- pipeline stages (this GPT holds a StageSpec part of the model) ---
  // Forward of one micro-batch in activation slot `slot`: the first stage reads `inputs`
  // (B,T), a later one the previous stage's output x_in (B*T rows of C; B*T/tp under sequence
  // parallelism). for_backward: keep what the backward needs (and the parameter holds).
  void stage_forward(int slot, const int32_t* inputs, const float* x_in, int64_t B, int64_t T, bool for_backward);
  // Backward of that micro-batch: the last stage computes the loss (returns the sum of its
  // token losses, gradients scaled by loss_scale), an earlier one takes dy, the gradient of
  // its output from the next stage. Then stage_input_grad(slot) is the gradient to send back.
  double stage_backward(int slot, const int32_t* inputs, const int32_t* targets, const float* dy, int64_t B,
                        int64_t T, float loss_scale);
  // Last stage, after stage_forward(..., false): the sum of the token losses.
  double stage_loss(int slot, const int32_t* targets, int64_t B, int64_t T);
  const float* stage_output(int slot);
  const float* stage_input_grad(int slot);

  // Model FLOPs per token for training at sequence length T: 6 * (matmul parameters)
  // + 12 * L * C * T for attention (PaLM, Chowdhery et al. 2022, appendix B).
  static double train_flops_per_token(const ModelConfig& cfg, int64_t T);

 private:
  void forward_blocks(const int32_t* inputs, int64_t B, int64_t T);
  // The backward from the stage's top (the loss on the last stage, dy otherwise) to its input.
  double backward_part(const int32_t* inputs, const int32_t* targets, const float* dy, int64_t B, int64_t T,
                       float loss_scale);
  void swap_slot(int slot);
  // The output head and loss over rows [0, N) of lnf, chunk by chunk; with dloss != 0 also
  // dwte and dlnf (into acts_.dC).
  double head(const int32_t* targets, int64_t N, const float* wte, float* dwte, float dloss);
  void check_tokens(const int32_t* tokens, int64_t n, const char* what) const;
  void check_shape(int64_t B, int64_t T, bool training) const;

  ParamLayout layout_;
  Backend& backend_;
  std::unique_ptr<LocalParamStore> local_;
  ParamStore* store_ = nullptr;
  TensorParallelOps* tp_ = nullptr;
  int P_ = 1;  // tensor-parallel size
  bool sp_ = false;
  // Adds this micro-batch's LayerNorm gradients (partial over the rank's rows under sequence
  // parallelism) summed over the tp ranks to dw, db.
  void ln_backward_sp(float* dres, float* dw, float* db, const float* dout, const float* inp, const float* w,
                      const float* mean, const float* rstd, int64_t rows, int64_t C);
  Activations acts_;
  bool acts_training_ = false;
  bool acts_sp_ = false;
  int acts_slots_ = 1;
  std::vector<Activations> slots_;  // slots 1.. (slot 0 is acts_); swapped into acts_ in use
};

}  // namespace weft
