// The layout rules: which layouts of a model and a batch weft accepts. One set, used by
//   - the trainer (train/run_layout.h builds the candidate from a RunConfig and the world),
//   - the planner's search and `weft plan`'s pins (plan/search.h) and plan::predict,
//   - the process grid, which keeps only what it needs itself (parallel/grid.h: axis sizes,
//     rank order, world product) and whose two non-throwing checks the rules call.
// A layout is valid when the trainer runs it correctly and the planner prices what the
// trainer runs; each rule below says which side needs it. The messages name the values.
//
// The rules, in the order they are applied (the first broken one is reported):
//  axes   tp, pp >= 1 and dp >= 0 (0: world / (tp x pp))        "tp size 0 must be at least 1"
//         heads, MLP size and padded vocabulary divide by tp: the column/row-parallel split
//         and the vocabulary-parallel embedding (model/params.cc check_tp_split)
//                                                  "4 attention heads are not divisible by tp 3"
//         at least pp layers (pp x 1 chunks, see the pipeline rule)
//         dp = world / (tp x pp) is a whole number when dp is derived
//         world = tp x pp x dp      "world size 6 does not equal tp 2 x pp 2 x dp 2 = 8"
//         the dp split (HSDP, parallel/grid.h): dp_replicate >= 1 dividing dp; dp_shard 0 is
//         derived as dp / dp_replicate, a given one must make dp_shard x dp_replicate = dp
//                                  "dp_replicate 3 does not divide dp 4 (dp = dp_shard x dp_replicate)"
//                                  "dp 4 does not equal dp_shard 4 x dp_replicate 2 = 8"
//  batch  micro-batch and global batch >= 1; global batch divides by micro-batch x dp (every
//         replica runs the same number of micro-batches)
//                     "global batch 10 is not divisible by micro batch 2 x dp 3 = 6"
//  tensor sequence parallelism needs tp > 1 (with tp 1 it would change nothing: refused
//         rather than ignored) and micro-batch x sequence tokens dividing by tp (each tp rank
//         holds B*T/tp rows, model/gpt.cc)
//  pipe   the schedule needs pp > 1 unless it is 1f1b (one stage runs each micro-batch's
//         forward and backward together whatever the schedule says: gpipe or interleaved
//         there would be ignored, and the planner would price gpipe's stash of m
//         micro-batches that the trainer never keeps); virtual_stages >= 1, > 1 only with the
//         interleaved schedule and pp > 1, and the interleaved schedule needs >= 2 (with v = 1
//         it is 1F1B with a longer warm-up, which the planner's closed forms do not price);
//         pp x v model chunks need at least that many layers; interleaved needs m % pp == 0
//         (Megatron's schedule, parallel/pp/schedule.h).
//         Layers need NOT divide by pp x v: the trainer's partition (parallel/pp/partition.h,
//         balanced with the head's cost) splits any L >= pp x v, and the planner prices the
//         stages through the same partition_layers (plan/shape.h stage_layer_counts), so an
//         uneven split is what both run and price.
//  zero   stage 0..3; with pp > 1 only 0 or 1 (ZeRO-2/3 reduce gradients every micro-batch and
//         gather parameters per use; the pipeline runtime refuses them, data_parallel.cc).
//         ZeRO > 0 with dp 1 is valid: the trainer runs the sharded path over one rank.
//         ZeRO shards over dp_shard; with dp_replicate > 1 each dp_shard group's reductions are
//         then all-reduced across the replicas (any stage: zero 0 makes it a two-level
//         all-reduce).
//  family what the model's family supports (ModelCapabilities, filled in by model/config.h):
//         a family without pipeline stages runs with pp 1, one without sequence parallelism or
//         selective recompute is refused them (ClimaX has none of the three)
//                     "ClimaX models run without pipeline stages: pp must be 1, got 2"
//  recompute  recompute_layers is -1 (every layer of a stage) or >= 1, and only with 'full'.
//  Precision constrains no layout today; it is part of the candidate so a rule can use it.
#pragma once
#include <cstdint>
#include <string>

#include "core/model_capabilities.h"
#include "core/precision.h"
#include "parallel/recompute.h"
#include "parallel/layout.h"
#include "parallel/pp/schedule.h"

namespace weft {

// The model shape a layout has to fit.
struct LayoutModel {
  int64_t layers = 0;  // L
  int64_t heads = 0;   // NH
  int64_t hidden = 0;  // C
  int64_t ffn = 0;     // F: MLP size
  int64_t vocab = 0;   // Vp: the padded vocabulary (rows of the embedding)
  int64_t seq = 0;     // T: training sequence length (ClimaX: its patches)
  ModelCapabilities caps;  // what its family supports (the family rule above)
  int64_t kv_heads = 0;    // key/value heads (grouped-query attention); 0: heads
};

// One layout (parallel/layout.h) of one model on `world` ranks: the layout with what it is
// checked against. As a request, dp may be 0 (world / (tp x pp)) and a dp_shard may be given on
// its own ([parallel] dp_shard, --dp-shard), which must agree with dp / dp_replicate.
struct LayoutCandidate : Layout {
  LayoutCandidate() { dp = 0; }
  explicit LayoutCandidate(const Layout& l) : Layout(l) {}
  int64_t world = 1;               // ranks
  int dp_shard_request = 0;        // HSDP: a dp_shard given on its own; 0: dp / dp_replicate
  int64_t global_batch = 1;        // samples per optimizer step
  Precision precision = Precision::kFp32;
  LayoutModel model;

  // dp as given, or world / (tp x pp) when 0 (valid once the axes rules pass).
  int resolved_dp() const;
  // dp_shard as given, or resolved_dp() / dp_replicate when 0 (valid once the axes rules pass).
  int resolved_dp_shard() const;
  // Micro-batches per pipeline and step: global / (micro x dp) (valid once the rules pass).
  int64_t micro_batches() const;
  // The layout with dp resolved (valid once the rules pass).
  Layout resolved() const;
};

// "" when the layout is valid; otherwise the message of the first rule it breaks.
std::string layout_error(const LayoutCandidate& c);
// InputError with layout_error's message when the layout is invalid.
void check_layout(const LayoutCandidate& c);

// The first two groups of layout_error on their own, for a search that fixes the axes and
// then the micro-batch before the rest (what they read: world, tp, pp, dp, its split and the model;
// then micro_batch and global_batch). layout_error applies them first.
std::string axes_error(const LayoutCandidate& c);
std::string batch_error(const LayoutCandidate& c);

}  // namespace weft
