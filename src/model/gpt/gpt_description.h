// The GPT's one description of itself (DESIGN.md principle 4, "one source of truth for
// counts"): for one rank's part of a run, its parameter counts, the model FLOPs per token and
// the elements of every buffer the model allocates for a micro-batch. Who reads it:
//   - the planner: plan/shape.cc (whole-model counts and FLOPs), plan/weft_memory.cc (weft's
//     own buffers, byte for byte) and plan/memory.cc (the parameters of a stage);
//   - GPT::train_flops_per_token (the trainer's and bench's model FLOP rate).
// What it describes: ParamLayout (params.h) lays out rank_params().part elements and
// GPT::reserve (gpt.h) allocates stash_elems() per activation slot and workspace_elems() once;
// tests/model/gpt_description_test.cc holds them equal over a table of layouts.
//
// Letters as in gpt.h: B micro-batch, T sequence, N = B T tokens, C hidden, F MLP size,
// NH heads, Vp padded vocabulary, L layers, t tensor-parallel size; Cl = C/t, Fl = F/t,
// NHl = NH/t, Vl = Vp/t; Nl = N/t under sequence parallelism, else N.
#pragma once
#include <cstdint>

#include "core/precision.h"
#include "model/config.h"
#include "model/block.h"
#include "model/description.h"
#include "model/params.h"
#include "parallel/recompute.h"

namespace weft {

// What one rank runs (model/description.h's RunSpec), as GPT takes it (constructor, set_tp,
// set_recompute, set_precision, reserve). attention_lse: the backend offers flash attention
// (Backend::offers(FusedOp::kAttentionLse) and attention_lse_supports(Cl, NHl, precision);
// GPT::reserve asks it): a layer stashes the log-sum-exp (B,NHl,T) instead of the probabilities
// (B,NHl,T,T); selective recompute has nothing to recompute and acts as none.
using GptRunSpec = RunSpec;

// Parameter elements, as ParamLayout lays them out.
struct GptParamCounts {
  int64_t layer = 0;       // one block: ln_1, c_attn, attn.c_proj, ln_2, c_fc, mlp.c_proj
  int64_t embedding = 0;   // the embedding group: wte (Vp rows) + wpe (n_ctx rows; none with rotary positions)
  int64_t final_norm = 0;  // ln_f (weight and bias; RMSNorm: the weight)
  int64_t head = 0;        // an untied output head (Vp rows; a tied one reads wte: 0)
  // The part: its layers, the embedding group if it holds the embedding or a tied head, ln_f
  // and an untied head if it holds the head (StageSpec).
  int64_t part = 0;
  int64_t back() const { return final_norm + head; }  // the back group
};

class GptDescription {
 public:
  // InputError naming the values when tp does not divide the heads, the MLP size or the
  // padded vocabulary (ParamLayout's rules), or, under sequence parallelism, the B T tokens
  // (GPT::reserve's), or when the part lies outside the model.
  explicit GptDescription(const GptRunSpec& spec);
  const GptRunSpec& spec() const { return s_; }

  // --- parameters ---
  // This tensor-parallel rank's part: column-parallel tensors hold F/t (c_fc) or whole heads
  // (c_attn: 3 C/t) columns, row-parallel ones C/t or F/t rows, the embedding Vp/t rows;
  // LayerNorms, wpe and the row-parallel biases are replicated (Shoeybi et al. 2019, sec. 3).
  const GptParamCounts& rank_params() const { return rank_; }
  // The same tensors whole (tp 1): ParamLayout::total_full() of the part.
  const GptParamCounts& full_params() const { return full_; }
  // The whole model, every tensor once (L layers, the embedding group, ln_f).
  int64_t total_params() const;
  int64_t part_layers() const { return nl_; }

  // --- FLOPs per token, whole tensors (summed over the tp ranks) ---
  // Model FLOPs of a training step at sequence length T: 6 N_mm + 12 L C T with N_mm =
  // L (C QKV + C^2 + C FC + F C) + Vp C the parameters in matrix products (PaLM, Chowdhery et al.
  // 2022, appendix B; attention scores and weighted sums without discounting the mask); GPT-2:
  // QKV = 3C, FC = F; grouped-query attention QKV = C + 2 KV, SwiGLU FC = 2F.
  static double train_flops_per_token(const ModelConfig& m, int64_t T);
  double train_flops_per_token() const { return train_flops_per_token(s_.model, s_.T); }
  // One layer's forward: 2 (C QKV + C^2 + C FC + F C) for its products + 4 C T for Q K^T and P V.
  double layer_forward_flops_per_token() const;
  double attention_core_forward_flops_per_token() const;  // 4 C T
  // What the part's recompute adds to the backward pass (Korthikanti et al. 2022): full, a
  // forward per recomputed layer (sec. 3); selective, the attention core per layer (sec. 4.2;
  // nothing with attention_lse, where selective acts as none).
  double recompute_flops_per_token() const;

  // --- activations and workspace: elements of one micro-batch on this rank ---
  int64_t tokens() const { return N_; }              // N
  int64_t residual_elems() const { return Nl_ * C_; }  // Nl C: a part's input, output, a pipeline message
  int64_t head_chunk() const { return head_chunk_; }  // rows of logits at once
  int64_t recomputed_layers() const { return rf_; }    // layers of the part fully recomputed
  // The storage of what the layers keep (model/block.h's policy) and of the head's input.
  LayerDtypes layer_dtypes() const {
    return LayerDtypes::of(s_.precision, s_.attention_lse, s_.model.capabilities().residual_stream_16);
  }
  // The residual stream's (a part's input and output, their gradient, a pipeline message).
  DType residual_dtype() const { return layer_dtypes().res; }
  DType act_dtype() const { return dtype_of(s_.precision); }
  // The tensor-parallel group's sums (parallel/tp/mappings.h): the residual stream's dtype.
  DType tp_sum_dtype() const { return residual_dtype(); }
  // The activation-gradient scratch dC: act at tp 1, the sum dtype at tp > 1 (a partial sum
  // all-reduced over the group).
  DType dC_dtype() const { return s_.tp > 1 ? tp_sum_dtype() : act_dtype(); }
  // What local layer i (0 .. part_layers()-1) stashes for its backward pass (elements, all
  // storages; layer_stash(i) by storage).
  int64_t layer_stash_elems(int64_t i) const { return layer_stash(i).total(); }
  TypedElems layer_stash(int64_t i) const;
  TypedElems stash() const;            // one micro-batch (one activation slot of GPT)
  TypedElems workspace_tensors() const;  // the model's scratch tensors (gpt.h's Workspace)
  int64_t stash_elems() const { return stash().total(); }
  int64_t workspace_elems() const;  // shared by every micro-batch in flight: the three below
  // The variants' pieces of the workspace (after the GPT-2 ones, in GPT::build_workspace's order):
  // grouped-query attention's compact q, k, v (N, QKVl) and, training, SwiGLU's fc gradient
  // (N, FCl), both in the activations' dtype; rotary positions' cos and sin tables (T, rot/2) f32.
  int64_t qkvc_elems() const { return gqa_ ? N_ * QKVl_ : 0; }
  int64_t dfc_elems() const { return swiglu_ && s_.training ? N_ * FCl_ : 0; }
  // Training with a parallel residual: d(res3) kept for the attention branch (Nl, C) in the
  // residual stream's dtype.
  int64_t dpar_elems() const { return parallel_ && s_.training ? Nl_ * C_ : 0; }
  int64_t rope_table_elems() const { return rot_ > 0 ? s_.T * (rot_ / 2) : 0; }
  // Training with fewer kv heads than tp ranks: the scratch (f32) in which the replicated kv
  // columns' gradients are summed (TensorParallel::replica_scratch_elems of c_attn's C rows).
  int64_t kv_sum_elems() const;
  // ALiBi positions: the slopes of this rank's heads (NH/tp, f32).
  int64_t alibi_elems() const { return alibi_ ? NHl_ : 0; }
  // A LayerNorm without bias (MPT's): C zeros its forward reads as the bias and C floats its
  // backward's bias gradient goes to (f32).
  int64_t ln_bias_elems() const { return !rms_ && !s_.model.block.bias ? 2 * C_ : 0; }
  int64_t workspace_tensor_elems() const { return workspace_tensors().total(); }
  int64_t token_elems() const;             // the micro-batch's token ids (int32)
  int64_t tp_scratch_elems() const;        // the tensor-parallel layers' scratch
  int64_t tp_scratch_bytes() const;        // its bytes (2C f32, the rest in tp_sum_dtype())
  // The typed ops' staging arena (backend.h): the largest sum of one call's 16-bit operands
  // over the part's forward and backward (fp32 elements; 0 in an fp32 run). GPT::reserve
  // reserves it on the backend, so that the arena does not grow during a step. It is the
  // backend's (one per backend, shared by the chunks on it), counted as workspace, and not
  // part of workspace_elems().
  int64_t staging_elems() const;
  int64_t staging_bytes() const { return 4 * staging_elems(); }
  // Bytes: 16-bit tensors 2 per element, f32 ones, token ids (int32) and the tensor-parallel
  // scratch (f32) 4.
  int64_t stash_bytes() const { return stash().bytes(act_dtype()); }
  int64_t workspace_bytes() const;

  // --- the planner's accelerator model (model/description.h) ---
  // The embedding (stage 0) and the head (the last stage), as Megatron-LM runs them: the rows'
  // gather + positions and the vocabulary-parallel embedding's all-reduce of N C; the final
  // LayerNorm, the logits (N, C) x (C, Vl), the softmax cross-entropy over the vocabulary shard
  // in fp32, and backward the head's two products, the loss's 3 fp32 statistics per token and
  // the input gradient's all-reduce of N C.
  EndsWork ends_work() const;
  // Korthikanti's block stash (model/block_memory.h), the final LayerNorm's input and output on
  // the last stage, one layer's activation gradients as workspace (+ the rematerialised layer,
  // the recomputed scores, the fp32 logits of one micro-batch), the pipeline's send + receive of
  // activations and gradients; ZeRO-3 gathers a block at a time.
  AcceleratorMemory accelerator_memory(const AcceleratorOptions& o) const;

 private:
  TypedElems layer_elems() const;  // a layer's stash without recompute
  TypedElems layer_elems(bool with_att, bool output) const;
  // The staging of one layer's calls (forward and backward) and of the head's.
  int64_t block_staging_elems() const;
  int64_t head_staging_elems() const;
  int64_t embedding_staging_elems() const;
  // What attention keeps for its backward: the probabilities (B NHl T T), or with
  // attention_lse the log-sum-exp per query row (B NHl T).
  int64_t att_stats_elems() const;

  GptRunSpec s_;
  GptParamCounts rank_, full_;
  int64_t nl_ = 0, rf_ = 0;  // the part's layers, those fully recomputed
  int64_t N_ = 0, Nl_ = 0, C_ = 0, Cl_ = 0, Fl_ = 0, NHl_ = 0, Vl_ = 0, head_chunk_ = 0;
  // The variant's (model/config.h's BlockOptions): this rank's fused q, k, v columns (C + 2 KV)/t,
  // its fc columns (F or 2F)/t, the rotary dimensions of a head (0: none).
  int64_t QKVl_ = 0, FCl_ = 0, rot_ = 0;
  int kv_rep_ = 1;
  bool alibi_ = false;
  bool rms_ = false, gqa_ = false, swiglu_ = false, parallel_ = false;
  bool sp_ = false, selective_ = false;  // sequence parallel; selective recompute in effect (not with lse)
};

}  // namespace weft
