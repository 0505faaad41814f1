// The planner's inputs: the model shape, the layout (how the model is split over ranks) and
// the numeric precision; parameter counts and FLOPs per token/micro-batch.
//
// Notation (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
// Models", Table 1): s sequence length, b micro-batch size, h hidden size, a attention heads,
// L layers, V (padded) vocabulary, f MLP hidden size (4h for GPT), t tensor-parallel size,
// p pipeline-parallel size, m micro-batches per pipeline per step, v virtual stages.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "comm/codec_spec.h"
#include "core/precision.h"
#include "model/config.h"
#include "model/family.h"
#include "model/description.h"
#include "parallel/recompute.h"
#include "parallel/layout.h"
#include "parallel/layout_rules.h"
#include "parallel/pp/schedule.h"

namespace weft::plan {

// A model's shape as the planner sweeps it: the transformer sizes every family shares, over the
// config it was made from (`base`, which keeps the family's own keys: ClimaX's grid, patch,
// variables and decoder). A GPT decoder (pre-LayerNorm blocks, learned positions, tied
// embeddings: weft's model, which is also Megatron-LM's GPT), or a ClimaX Vision Transformer
// (model/climax/climax.h). What the planner prices of a family it reads from the family's
// description (model/description.h).
struct ModelShape {
  std::string name = "custom";
  int64_t layers = 0;  // L
  int64_t hidden = 0;  // h
  int64_t heads = 0;   // a
  int64_t seq = 0;     // s: training sequence length (<= context)
  int64_t vocab = 0;   // V: padded vocabulary (rows of the embedding/head)
  int64_t ffn = 0;     // f: MLP hidden size
  int64_t context = 0; // rows of the learned position embedding (>= seq)
  // A family that fixes a sample's positions (ClimaX: its L patches) has seq = context = them;
  // vocab 0 for a family without a vocabulary.
  const Family* family = &default_family();
  ModelConfig base{};

  // From a weft model config (padded vocabulary, its context; seq 0 means the context; a
  // family that fixes the positions has them, whatever seq says).
  static ModelShape from_config(const ModelConfig& c, int64_t seq = 0);
  // InputError naming the values when a size is not positive, hidden % heads != 0 or the
  // context is shorter than seq; for a family that fixes the positions, the family's own rules
  // (Family::validate) and seq equal to them.
  void validate() const;
  // The weft model of this shape: `base` with the shape's sizes (its vocabulary is the padded
  // one: the shape knows no other).
  ModelConfig config() const;

  // The counts below are the model's own (its family's description), read, not recomputed.
  // Parameters of one transformer layer (weights and biases, both LayerNorms).
  double layer_params() const;
  // Token + position embedding (the head is tied to the token embedding); ClimaX: its front
  // (patch, variable, position and lead-time embeddings and the variable aggregation).
  double embedding_params() const;
  // The whole model, counted once (the tied head not twice).
  double total_params() const;
  // Model FLOPs per token of a training step (forward + backward), as
  // GPT::train_flops_per_token: 6 * matmul params + 12 L h s (PaLM, Chowdhery et al. 2022,
  // appendix B; equal to Megatron's 72 B s L h^2 (1 + s/6h + V/12hL) per sequence).
  // ClimaX: ClimaxDescription::train_flops_per_token per patch token.
  double model_flops_per_token() const;
};

// weft's precision type (core/precision.h): "fp32", "bf16", "fp16".
using weft::Precision;
using weft::parse_precision;
using weft::precision_name;
// Bytes of one activation/parameter element in compute: 4 for fp32, 2 otherwise.
int elem_bytes(Precision p);

// Activation recomputation (Korthikanti et al. 2022 sec. 4-5): none; selective (recompute
// the attention core: softmax, its dropout and the attention over values); full (keep each
// layer's input only and recompute the layer in the backward pass).
// weft's recompute modes (parallel/recompute.h): "none", "selective", "full".
using weft::Recompute;
using weft::parse_recompute;
using weft::recompute_name;

// The one layout type (parallel/layout.h) and its ZeRO++ presets.
using weft::Layout;
using weft::parse_zeropp;
using weft::ZeroPP;
using weft::zeropp_name;

// Micro-batches per pipeline per optimizer step: global_batch / (dp * micro_batch).
int64_t micro_batches(int64_t global_batch, const Layout& l);

// The layout rules' candidate (parallel/layout_rules.h) for layout `l` of model `m`: the rules
// the trainer applies decide what the planner lists and prices. gpus 0: l.world().
LayoutCandidate layout_candidate(const ModelShape& m, const Layout& l, int64_t global_batch, Precision p,
                                 int64_t gpus = 0);

// What one rank of layout `l` holding `part` of model `mc` runs (model/description.h's RunSpec):
// micro-batches of l.micro_batch samples of `seq` positions; Family::describe of it gives the
// parameter counts, FLOPs and buffer sizes the planner reads. head_chunk 0: automatic.
RunSpec part_spec(const ModelConfig& mc, int64_t seq, const Layout& l, const StageSpec& part, int64_t head_chunk = 0,
                  Precision precision = Precision::kFp32);

// Layers held by each pipeline stage: the chunks of parallel/pp/partition.h's
// partition_layers with the head's cost (Family::pipeline_head_cost), the split the trainer runs
// (stage s holds chunks s, s + p, ...). Uneven when L % (p v) != 0 or the head is costly.
std::vector<int64_t> stage_layer_counts(const ModelShape& m, const Layout& l);
// Layers held by pipeline stage `stage` (one entry of stage_layer_counts).
int64_t stage_layers(const ModelShape& m, const Layout& l, int stage);

}  // namespace weft::plan
