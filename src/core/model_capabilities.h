// What a model family supports, as plain facts that the layout rules, the planner and the trainer
// read instead of testing which family a model is (a family fills them in, model/<family>/ through model/family.h).
#pragma once

namespace weft {

struct ModelCapabilities {
  const char* family = "GPT";       // the family's display name, used in messages ("ClimaX models ...")
  bool pipeline_stages = true;      // its layers cut into pipeline stages (pp > 1)
  bool sequence_parallel = true;    // activations split along the sequence between tp ranks
  bool selective_recompute = true;  // attention recomputed from stashed q, k, v
  bool causal_attention = true;     // causal (flash-style) attention, else bidirectional
  // Its first stage's embedding gradient is rows of the tokens used, exchanged between dp ranks
  // as (token, row) pairs at ZeRO 0/1 instead of reducing the whole table.
  bool sparse_embedding_grads = true;
  // It samples text (weft generate, the trainer's sample_tokens); when not, generation_note says
  // what the family offers instead (a sentence for the refusal).
  bool generation = true;
  // The data source its runs read (train/run_data.h): "tokens" (token shards), "fields" (NetCDF
  // weather fields).
  const char* data_source = "tokens";
  const char* generation_note = "";
};

}  // namespace weft
