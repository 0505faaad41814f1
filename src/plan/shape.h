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
#include "model/climax/climax_config.h"
#include "model/config.h"
#include "model/family.h"
#include "model/gpt/gpt_description.h"
#include "model/recompute.h"
#include "parallel/layout_rules.h"
#include "parallel/pp/schedule.h"

namespace weft::plan {

// A model's shape as the planner sweeps it: the transformer sizes every family shares, over the
// config it was made from (`base`, which keeps the family's own keys: ClimaX's grid, patch,
// variables and decoder). A GPT decoder (pre-LayerNorm blocks, learned positions, tied
// embeddings: weft's model, which is also Megatron-LM's GPT), or a ClimaX Vision Transformer
// (model/climax/climax.h; its planner models are plan/vit_shape.h).
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
  bool climax() const { return family == &climax_family(); }

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

  // The counts below are the model's own (model/gpt_description.h), read, not recomputed.
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
// weft's recompute modes (model/recompute.h): "none", "selective", "full".
using weft::Recompute;
using weft::parse_recompute;
using weft::recompute_name;

// ZeRO++ (Wang et al. 2023, "ZeRO++: Extremely Efficient Collective Communication for Giant
// Model Training", arXiv 2306.10209) and the Frontier 3-level variant (Xu et al. 2025,
// "Scaling Large Language Model Training on Frontier with Low-Bandwidth Partitioning",
// arXiv 2501.04266): settings of a ZeRO-3 layout. A preset names where its knobs come from
// (plan/zeropp.h resolve_zeropp derives them from the system's link levels and the layout):
//   kNone       plain ZeRO-3 (every knob off)
//   kZeroPP     "zero++": qwZ + hpZ over the node's dp peers + qgZ in 2 hops (node, the rest)
//   kThreeLevel "3-level": qwZ + hpZ over the innermost level's dp peers (the GCD pair on
//               Frontier) + qgZ in one hop per level (pair, node, the rest)
//   kCustom     the knobs as given
enum class ZeroPP { kNone, kZeroPP, kThreeLevel, kCustom };
const char* zeropp_name(ZeroPP z);                 // "none", "zero++", "3-level", "custom"
ZeroPP parse_zeropp(const std::string& s);         // InputError naming the known names

struct Layout {
  int tp = 1;  // tensor-parallel size (t)
  int pp = 1;  // pipeline stages (p)
  int dp = 1;  // data-parallel replicas
  // HSDP (parallel/grid.h): dp = dp_shard x dp_replicate, dp_shard consecutive dp ranks; ZeRO
  // shards (and ZeRO++ works) inside dp_shard, the dp_replicate groups all-reduce the shards'
  // gradients once per step. 1: plain dp.
  int dp_replicate = 1;
  int64_t micro_batch = 1;  // sequences per micro-batch (b)
  int zero = 0;             // ZeRO stage 0..3 over the dp axis (Rajbhandari et al. 2020)
  Recompute recompute = Recompute::kNone;
  // With full recompute: layers of each stage that are recomputed (Megatron's
  // --recompute-num-layers, "block" method); -1: all of them.
  int recompute_layers = -1;
  bool sequence_parallel = false;  // Korthikanti et al. 2022 sec. 4.2.2 (a layout rule: tp > 1)
  PipeSchedule schedule = PipeSchedule::k1F1B;
  int virtual_stages = 1;  // v: model chunks per stage (interleaved 1F1B)
  // ZeRO++ (zero 3 only; plan/zeropp.h checks the rules and prices nothing else):
  ZeroPP zeropp = ZeroPP::kNone;  // the preset the knobs below come from
  bool qwz = false;  // quantized weights: the gathers over the whole dp group carry int8 + an fp32 scale per block
  int hpz = 1;       // secondary partition of alpha dp ranks (1: off): later gathers of a step stay inside it
  bool qgz = false;  // quantized gradients: the reduce-scatter as int4 all-to-all hops, one per hierarchy level
  // qgZ's hops: the dp group's inner levels as cumulative sizes in dp ranks, innermost first
  // ([2, 8]: pairs inside groups of 8, the whole dp group above); empty: one flat hop.
  std::vector<int> hierarchy;
  int quant_block = 2048;  // G: elements per quantization block (one fp32 scale each)
  // Compressed collectives (issue 18; plan/compression.h prices them): one codec per kind of
  // traffic (dp gradients, params gathers, tp activations, pp transfers), and the name of the
  // preset it came from ("none", "hybrid", "uniform-int8", ...; "custom" for one given axis by
  // axis).
  CompressionPolicy compression;
  std::string compression_name = "none";

  int world() const { return tp * pp * dp; }
  int dp_shard() const { return dp_replicate > 0 ? dp / dp_replicate : dp; }
  bool zeropp_on() const { return qwz || hpz > 1 || qgz; }
  // "tp 4 pp 16 dp 2 mb 1 zero 1 full sp 1f1b"; HSDP: "tp 2 pp 1 dp 4 (dp_shard 2 x dp_replicate 2) mb 1 ...";
  // ZeRO++: "... zero++(qwz hpz 8 qgz 8)";
  // compression: "... hybrid(dp=int4 params=int8 tp=bf16)"
  std::string describe() const;
};

// Micro-batches per pipeline per optimizer step: global_batch / (dp * micro_batch).
int64_t micro_batches(int64_t global_batch, const Layout& l);

// The layout rules' candidate (parallel/layout_rules.h) for layout `l` of model `m`: the rules
// the trainer applies decide what the planner lists and prices. gpus 0: l.world().
LayoutCandidate layout_candidate(const ModelShape& m, const Layout& l, int64_t global_batch, Precision p,
                                 int64_t gpus = 0);

// The model's description (model/gpt_description.h) of one rank of layout `l` holding `part`
// of model `mc`, micro-batches of l.micro_batch sequences of `seq` tokens: the parameter counts,
// FLOPs and buffer sizes the planner reads. head_chunk 0: automatic, as GPT::reserve.
// The description of that part, as the family describes it (model/description.h).
RunSpec part_spec(const ModelConfig& mc, int64_t seq, const Layout& l, const StageSpec& part, int64_t head_chunk = 0);
GptDescription describe_part(const ModelConfig& mc, int64_t seq, const Layout& l, const StageSpec& part,
                             int64_t head_chunk = 0);

// Layers held by each pipeline stage: the chunks of parallel/pp/partition.h's
// partition_layers with the head's cost (gpt_head_cost_in_layers), the split the trainer runs
// (stage s holds chunks s, s + p, ...). Uneven when L % (p v) != 0 or the head is costly.
std::vector<int64_t> stage_layer_counts(const ModelShape& m, const Layout& l);
// Layers held by pipeline stage `stage` (one entry of stage_layer_counts).
int64_t stage_layers(const ModelShape& m, const Layout& l, int stage);

}  // namespace weft::plan
