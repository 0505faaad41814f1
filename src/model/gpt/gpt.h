// GPT-2 forward and backward, written once for one device against the Backend interface.
// Computes exactly what Hugging Face's GPT2LMHeadModel computes (pre-LayerNorm blocks,
// learned positions, fused QKV, GELU tanh approximation, tied embeddings, final LayerNorm)
// with dropout 0. Parameters and gradients live in one flat buffer each (see params/param_layout.h).
//
// Tensor parallelism comes in through the layers of src/parallel/tp (layers.h), as Megatron's
// GPT uses tensor_parallel's ColumnParallelLinear and RowParallelLinear: the block is the
// single-device block (ln -> c_attn -> attention -> c_proj + residual -> ln -> c_fc -> gelu ->
// c_proj + residual) and names only the role each product plays in it (column- or
// row-parallel, vocabulary-parallel), a property of the architecture like "this product feeds
// the attention". Which ranks, how many, whether the residual stream is sequence-parallel and
// every collective stay inside those layers and their group (TensorParallel); the model only
// sizes its buffers by the group's part() and local_rows(). With tp = 1 each layer is the plain
// op. The dependency goes model -> parallel/tp; parallel/tp knows nothing of the model.
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/device_buffer.h"
#include "data/token_batch.h"
#include "model/block.h"
#include "model/config.h"
#include "model/local_store.h"
#include "model/model.h"
#include "params/param_store.h"
#include "model/params.h"
#include "parallel/recompute.h"
#include "parallel/tp/layers.h"

namespace weft {

// Activation recompute (parallel/recompute.h): full recompute runs a layer's forward again up to
// the MLP's GELU output (the last product's output is not needed). Recomputing runs the same
// code on the same inputs, so the results are bitwise identical.

// Activations of one micro-batch kept for the backward pass: one set per micro-batch in
// flight (pipeline schedules keep several). Counted as `activations` in core/memory.h.
// Dtypes: model/block.h's LayerDtypes (what the layers' ops write once in the storage precision,
// the rest f32).
struct Activations {
  View encoded;  // (Nl,C) the stage's input: embeddings, or the previous stage's output (LayerDtypes::res)
  std::vector<LayerActs> layers;
  View lnf;  // last stage: (N,C), the LayerNorm outputs' storage
  float *lnf_mean = nullptr, *lnf_rstd = nullptr;  // last stage: (Nl), (Nl)
  // Device memory of the model's backend, under kActivations: the storage precision's tensors
  // (all of them in an fp32 run) and the f32 ones of a 16-bit run.
  DeviceBuffer storage, storage32;
  bool built = false;  // carved (either buffer may be empty)
  int64_t bytes() const { return static_cast<int64_t>(storage.bytes() + storage32.bytes()); }
};

// Scratch of one micro-batch, shared by every micro-batch in flight: activation gradients,
// the head's logits chunk, and the recompute buffers. Counted as `workspace`, with the
// tensor-parallel layers' scratch (TensorParallel::reserve).
struct Workspace {
  int64_t B = 0, T = 0;      // capacity
  int64_t head_chunk = 0;    // rows of logits materialised at once
  float* losses = nullptr;   // (N) per-token losses (last stage)
  View logits;               // (head_chunk, Vp/tp) (last stage), the storage precision
  float* stats = nullptr;    // (3, head_chunk) row max, sum of exp, target logit (last stage)
  View dres;                 // (Nl,C) gradient of the residual stream (training; LayerDtypes::res)
  View dC;                   // (N,C): the storage precision at tp 1, f32 at tp > 1
  View d3C;                  // (N,3Cl)
  View dF;                   // (N,F)
  View att;                  // recomputed attention statistics: (B,NH,T,T) probabilities (selective
                             // or full recompute), or the (B,NH,T) log-sum-exp (full, flash attention)
  LayerActs layer{};         // the rematerialised layer (full recompute)
  // The block's variants (model/block.h's VariantWorkspace): grouped-query attention's compact
  // q, k, v (N, QKVl), SwiGLU's fc gradient (N, FCl, training), the rotary cos and sin tables
  // (T, rot/2 each, f32, filled at reserve).
  View qkvc, dfc, dpar;  // dpar: a parallel residual's d(res3) (Nl, C, training)
  float *rope_cos = nullptr, *rope_sin = nullptr;
  float* kv_sum = nullptr;  // fewer kv heads than tp ranks, training: their gradient sums (f32)
  float* alibi = nullptr;   // ALiBi positions: this rank's heads' slopes (f32)
  float* ln_zeros = nullptr;  // a LayerNorm without bias: C zeros it reads, then C floats its gradient sinks into
  int32_t* inputs = nullptr;   // (N) the micro-batch's input token ids (a stage with the embedding)
  int32_t* targets = nullptr;  // (N) its target token ids (a stage with the head)
  DeviceBuffer storage, storage32;  // the float tensors above by storage (as Activations), under kWorkspace
  DeviceBuffer tokens;              // int32: inputs then targets, under kWorkspace
  int64_t bytes() const { return static_cast<int64_t>(storage.bytes() + storage32.bytes() + tokens.bytes()); }
};

class GptDescription;

class GPT final : public Model {
 public:
  // local_store: allocate whole parameter and gradient buffers (the single-process store).
  // A data-parallel run passes false and installs its own store with set_store().
  // tp_size/tp_rank: this process holds tensor-parallel part tp_rank of tp_size (see
  // ParamLayout); set_tp() then provides the communication.
  GPT(const ModelConfig& cfg, Backend& backend, bool local_store = true, int tp_size = 1, int tp_rank = 0,
      const StageSpec& stage = {});
  GPT(const GPT&) = delete;  // the layers refer to tp_: a GPT stays where it was built
  GPT& operator=(const GPT&) = delete;
  // sequence_parallel: the LayerNorm/residual regions hold only this rank's B*T/tp rows;
  // all-gathers and reduce-scatters replace the all-reduces (Korthikanti et al. 2022).
  void set_tp(TensorParallelOps* tp, bool sequence_parallel = false) override { tp_.set_ops(tp, sequence_parallel); }
  bool sequence_parallel() const { return tp_.sequence_parallel(); }

  const ModelConfig& config() const override { return cfg_; }
  const ParamLayout& layout() const override { return layout_; }
  // The local store's whole buffers (null without a local store): DEVICE memory of the
  // backend (read them with Backend::copy_to_host; set them with upload_params).
  float* params() { return local_ ? local_->params() : nullptr; }
  float* grads() { return local_ ? local_->grad_buffer() : nullptr; }
  // The local store's parameters from host memory, its gradients to host memory
  // (layout().total() floats).
  void upload_params(const float* host);
  void download_grads(float* host);
  int64_t num_params() const { return layout_.total(); }
  Backend& backend() { return backend_; }
  void set_store(ParamStore* store) override { store_ = store; }
  ParamStore& store() { return *store_; }

  // The local store: GPT-2's initialisation (init_params), computed on the host and uploaded.
  void init(uint64_t seed);
  void zero_grads();
  // Bytes of the stashed activations allocated so far (every slot used) and of the workspace.
  int64_t activation_bytes() const override;
  int64_t workspace_bytes() const override { return ws_.bytes() + tp_.scratch_bytes(); }
  // Bytes one micro-batch's stash takes (one slot).
  int64_t stash_bytes_per_slot() const { return slot_.bytes(act_dtype_); }

  // Recompute mode for training; kFull applies to the first `full_layers` layers of this part
  // (< 0: all), the others recompute nothing (Megatron's "block" method). Before reserve().
  void set_recompute(Recompute mode, int full_layers = -1) override;
  // Storage precision of activations and activation gradients (core/precision.h): the tensors
  // of model/block.h's LayerDtypes are stored in it (16-bit buffers that the ops round as they
  // write), the others rounded to it where they are written (TensorParallel::round); weight
  // gradients accumulate in fp32 and LayerNorm statistics and losses stay fp32. The
  // parameters' rounding is the optimizer's (master weights, optim.h). Before reserve().
  void set_precision(Precision p) override {
    prec_ = p;
    tp_.set_precision(p);
  }
  Precision precision() const { return prec_; }
  Recompute recompute() const { return recompute_; }
  // Whether the layers use the backend's flash attention (Backend::offers(FusedOp::kAttentionLse)
  // and attention_lse_supports(C/tp, heads/tp, precision)), decided at reserve(): attention keeps the
  // log-sum-exp (B,NH,T) instead of the probabilities (B,NH,T,T), and selective recompute
  // acts as none (GptRunSpec::attention_lse).
  bool attention_lse() const { return attn_lse_; }
  // Sizes the activation storage for micro-batches of up to (B, T); training also keeps
  // gradient scratch. head_chunk: rows of logits materialised at once (0: automatic).
  // slots: activation sets for up to that many micro-batches in flight (pipeline schedules);
  // slot 0 is allocated now, the others when first used.
  void reserve(int64_t B, int64_t T, bool training, int64_t head_chunk = 0, int slots = 1);
  // The Model interface: a TokenBatch's capacity (data/token_batch.h).
  void reserve(const HostBatch& capacity, bool training, int64_t head_chunk, int slots) override {
    const TokenBatch& t = TokenBatch::of(capacity);
    reserve(t.capacity(), t.seq(), training, head_chunk, slots);
  }
  void reserve_generation(int64_t T) override { reserve(1, T, false, 0, 1); }

  // Token ids (inputs, targets, tokens) are HOST memory: the model checks them and uploads
  // them to its workspace. Activations (x_in, dy, what stage_output and stage_input_grad
  // return) are DEVICE memory of the backend; logits_out and the returned losses are host.
  //
  // Forward and backward of one micro-batch: returns the mean loss over its B*T tokens and
  // accumulates d(loss_scale * sum of token losses)/d(params) into grads().
  // inputs, targets: (B,T).
  float forward_backward(const int32_t* inputs, const int32_t* targets, int64_t B, int64_t T,
                         float loss_scale);
  // Mean loss over B*T tokens, no gradients.
  float forward_loss(const int32_t* inputs, const int32_t* targets, int64_t B, int64_t T);
  // Logits (V real entries) of the last position of a single sequence of length T.
  void forward_last_logits(const int32_t* tokens, int64_t T, float* logits_out);
  // Logits of positions [from, T) of a single sequence of length T: (T - from) rows of V.
  void forward_logits(const int32_t* tokens, int64_t T, int64_t from, float* logits_out) override;

  // --- pipeline stages (this GPT holds a StageSpec part of the model) ---
  // Forward of one micro-batch in activation slot `slot`: the first stage reads `inputs`
  // (B,T), a later one the previous stage's output x_in (B*T rows of C; B*T/tp under sequence
  // parallelism). for_backward: keep what the backward needs (and the parameter holds).
  void stage_forward(int slot, const int32_t* inputs, CView x_in, int64_t B, int64_t T, bool for_backward);
  // Backward of that micro-batch: the last stage computes the loss (returns the sum of its
  // token losses, gradients scaled by loss_scale), an earlier one takes dy, the gradient of
  // its output from the next stage. Then stage_input_grad() is the gradient to send back.
  double stage_backward(int slot, const int32_t* inputs, const int32_t* targets, CView dy, int64_t B,
                        int64_t T, float loss_scale);
  // Last stage, after stage_forward(..., false): the sum of the token losses.
  double stage_loss(int slot, const int32_t* targets, int64_t B, int64_t T);
  CView stage_output(int slot) override;
  // Last stage, after stage_forward(slot, ..., 1, T, false) of one sequence: the logits (V real
  // entries) of positions [from, T), (T - from) rows of V (generation through a pipeline).
  void stage_logits(int slot, int64_t T, int64_t from, float* logits_out) override;
  // The gradient of the stage's input after stage_backward: valid until the next backward.
  CView stage_input_grad() const override { return ws_.dres; }

  // --- the Model interface (model/model.h): a TokenBatch (data/token_batch.h) ---
  // The sum of the B*T token losses (the mean that forward_backward returns, times B*T).
  double train_micro_batch(const HostBatch& mb, float loss_scale) override {
    const TokenBatch& t = TokenBatch::of(mb);
    const int64_t B = t.samples(), T = t.seq();
    return static_cast<double>(forward_backward(t.inputs(), t.targets(), B, T, loss_scale)) * static_cast<double>(B * T);
  }
  double loss_sum(const HostBatch& mb) override {
    const TokenBatch& t = TokenBatch::of(mb);
    const int64_t B = t.samples(), T = t.seq();
    return forward_loss(t.inputs(), t.targets(), B, T) * static_cast<double>(B * T);
  }
  void stage_forward(int slot, const HostBatch& mb, CView x_in, bool for_backward) override {
    const TokenBatch& t = TokenBatch::of(mb);
    stage_forward(slot, t.inputs(), x_in, t.samples(), t.seq(), for_backward);
  }
  double stage_backward(int slot, const HostBatch& mb, CView dy, float loss_scale) override {
    const TokenBatch& t = TokenBatch::of(mb);
    return stage_backward(slot, t.inputs(), t.targets(), dy, t.samples(), t.seq(), loss_scale);
  }
  double stage_loss(int slot, const HostBatch& mb) override {
    const TokenBatch& t = TokenBatch::of(mb);
    return stage_loss(slot, t.targets(), t.samples(), t.seq());
  }
  void stage_forward_tokens(int slot, const int32_t* tokens, CView x_in, int64_t T) override {
    stage_forward(slot, tokens, x_in, 1, T, false);
  }

  // Model FLOPs per token for training at sequence length T: 6 * (matmul parameters)
  // + 12 * L * C * T for attention (PaLM, Chowdhery et al. 2022, appendix B).
  static double train_flops_per_token(const ModelConfig& cfg, int64_t T);

 private:
  // Checks host token ids and copies them into the workspace (ws_.inputs / ws_.targets).
  void upload_tokens(const int32_t* inputs, const int32_t* targets, int64_t n);
  // forward_blocks, backward_part and head read the token ids from the workspace.
  void forward_blocks(int64_t B, int64_t T);
  // Whether local layer i is fully recomputed.
  bool full_recompute(int i) const { return recompute_ == Recompute::kFull && (full_layers_ < 0 || i < full_layers_); }
  // The backward from the stage's top (the loss on the last stage, dy otherwise) to its input.
  double backward_part(CView dy, int64_t B, int64_t T, float loss_scale);
  void use_slot(int slot);  // makes slot `slot` current, allocating it on first use
  // The output head and loss over rows [0, N) of lnf, chunk by chunk; with dloss != 0 also
  // dwte and dlnf (into ws_.dC, summed over tp as far as head_.input_grad() leaves it).
  double head(int64_t N, CView wte, float* dwte, float dloss);
  // The output head's weights (Vp/tp rows of C): the token embedding (group 0) when tied, else the
  // back group's lm_head; acquired (release_head() balances it).
  CView acquire_head();
  void release_head();
  bool tied() const { return cfg_.block.tie_embeddings; }
  // The rotary tables for positions 0..T-1 into the workspace (reserve).
  void upload_rope_tables(int64_t T);
  void upload_alibi_slopes();
  void row_logits(CView lnf_row, float* logits_out);
  void check_tokens(const int32_t* tokens, int64_t n, const char* what) const;  // host tokens
  void check_shape(int64_t B, int64_t T, bool training) const;

  ModelConfig cfg_;
  ParamLayout layout_;
  Backend& backend_;
  std::unique_ptr<LocalParamStore> local_;
  ParamStore* store_ = nullptr;
  // The tensor-parallel group and the layers that use it (one object per kind: they keep no
  // per-layer state). Declared in this order: each layer holds a reference to tp_.
  TensorParallel tp_;
  SequenceParallelLayerNorm ln_;
  ColumnParallelLinear column_;
  RowParallelLinear row_;
  VocabParallelEmbedding embedding_;
  VocabParallelHead head_;
  TransformerBlock block_;  // causal
  CView head_w_;            // an untied head's weights, acquired with the back group (forward_blocks)
  void build_stash(Activations& A);
  // Allocates and carves the workspace (and the tensor-parallel layers' scratch) that the
  // description sizes for the reserved shape.
  void build_workspace(const GptDescription& d);
  std::vector<float> host_losses_;  // the head's token losses, read back to sum them
  DeviceBuffer row_logits_;         // generation: one row's logits (Vp), allocated on first use
  std::vector<Activations> stash_;  // one per slot; allocated on first use
  Activations* cur_ = nullptr;      // the current slot's stash
  Workspace ws_;
  TypedElems slot_;                   // one activation slot, by storage
  DType act_dtype_ = DType::kF32;     // the storage precision's dtype (reserve)
  LayerDtypes dtypes_;                // the layers' (reserve)
  bool acts_training_ = false;
  int64_t acts_rows_ = 0;  // rows of the residual stream held here at reserve()
  int acts_slots_ = 0;
  Recompute recompute_ = Recompute::kNone;
  Precision prec_ = Precision::kFp32;
  void rnd(View x, int64_t n) { tp_.round(x, n); }
  int full_layers_ = -1;
  Recompute acts_recompute_ = Recompute::kNone;
  bool attn_lse_ = false;  // flash attention in use (reserve)
  int acts_full_layers_ = -1;
};

}  // namespace weft
