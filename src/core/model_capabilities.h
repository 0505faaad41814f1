// What a model family supports, as plain facts that the layout rules, the planner and the trainer
// read instead of testing which family a model is (a family fills them in, model/<family>/ through model/family.h).
#pragma once

#include "core/dtype.h"

namespace weft {

struct ModelCapabilities {
  const char* family = "GPT";       // the family's display name, used in messages ("ClimaX models ...")
  bool tensor_parallel = true;      // its layers split between tp ranks (tp > 1)
  // Its layers are the shared transformer block, whose costs the planner's formulas price
  // (plan/): a family of other layers (graph networks) is not priced by `weft plan` yet.
  bool transformer_blocks = true;
  bool pipeline_stages = true;      // its layers cut into pipeline stages (pp > 1)
  bool sequence_parallel = true;    // activations split along the sequence between tp ranks
  bool full_recompute = true;       // a layer's forward run again in its backward (recompute 'full')
  bool selective_recompute = true;  // attention recomputed from stashed q, k, v
  bool mixed_precision = true;      // trains in bf16/fp16 with fp32 master weights (else fp32 only)
  bool causal_attention = true;     // causal (flash-style) attention, else bidirectional
  // Its first stage's embedding gradient is rows of the tokens used, exchanged between dp ranks
  // as (token, row) pairs at ZeRO 0/1 instead of reducing the whole table.
  bool sparse_embedding_grads = true;
  // Its output head reads the front group's embedding (GPT's tied wte): the head's backward
  // takes group 0 first, the loss holds it once more (the order of parameter accesses that
  // ZeRO-3's gathers follow, plan/comm_model.h); otherwise the head lives in the back group.
  bool tied_head = true;
  // It samples text (weft generate, the trainer's sample_tokens); when not, generation_note says
  // what the family offers instead (a sentence for the refusal).
  bool generation = true;
  // Its residual stream (a block's output, a pipeline stage's input and message, and their
  // gradient) is stored in the run's 16-bit precision (GPT); otherwise fp32 (ClimaX).
  bool residual_stream_16 = true;
  // Its blocks take the decoder variants of model/config.h's BlockOptions (rotary positions,
  // RMSNorm, no biases, SwiGLU, grouped-query attention, an untied head); otherwise GPT-2's block only.
  bool block_variants = true;
  // The data source its runs read (train/run_data.h): "tokens" (token shards), "fields" (NetCDF
  // weather fields).
  const char* data_source = "tokens";
  const char* generation_note = "";
  // How `weft plan --explain` names the compute of its front and back, and the legend under
  // `weft plan`'s table (the defaults are the GPT's).
  const char* front_ops = "embedding";
  const char* back_ops = "head (logits, cross-entropy)";
  const char* plan_legend = "times in seconds per step; memory in GB on the fullest pipeline stage; MFU = model FLOPs "
                            "(6N + 12LHS per token) / peak, HFU counts recomputation";
};

// The dtype of a family's residual stream in a run of precision p (a pipeline message's).
inline DType residual_stream_dtype(const ModelCapabilities& c, Precision p) {
  return c.residual_stream_16 ? dtype_of(p) : DType::kF32;
}

}  // namespace weft
