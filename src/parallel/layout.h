// One parallel layout (issue 31): how a run splits its model and batch over ranks, as one value
// type that the layout rules (parallel/layout_rules.h), the planner (plan/), the tuner (tune/) and
// the trainer's TOML binding (train/run_layout.h) all take. What a layout is checked against
// (the world, the global batch, the model) is not part of it: LayoutCandidate pairs the two.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "comm/codec_spec.h"
#include "parallel/grid.h"
#include "parallel/recompute.h"
#include "parallel/pp/schedule.h"

namespace weft {

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
const char* zeropp_name(ZeroPP z);          // "none", "zero++", "3-level", "custom"
ZeroPP parse_zeropp(const std::string& s);  // InputError naming the known names

struct Layout {
  int tp = 1;  // tensor-parallel size (t)
  int pp = 1;  // pipeline stages (p)
  int dp = 1;  // data-parallel replicas; 0 (a request only): world / (tp x pp), resolved by the rules
  // HSDP (parallel/grid.h): dp = dp_shard x dp_replicate, dp_shard consecutive dp ranks; ZeRO
  // shards (and ZeRO++ works) inside dp_shard, the dp_replicate groups all-reduce the shards'
  // gradients once per step. 1: plain dp.
  int dp_replicate = 1;
  std::string order = "tp-dp-pp";  // rank order, first axis varies fastest (tp inside a node)
  int64_t micro_batch = 1;  // samples per micro-batch (b)
  int zero = 0;             // ZeRO stage 0..3 over the dp axis (Rajbhandari et al. 2020)
  Recompute recompute = Recompute::kNone;
  // With full recompute: layers of each stage that are recomputed (Megatron's
  // --recompute-num-layers, "block" method); -1: all of them.
  int recompute_layers = -1;
  bool sequence_parallel = false;  // Korthikanti et al. 2022 sec. 4.2.2 (a layout rule: tp > 1)
  PipeSchedule schedule = PipeSchedule::k1F1B;
  int virtual_stages = 1;  // v: model chunks per stage (interleaved 1F1B)
  // ZeRO++ (zero 3 only; plan/zeropp.h checks the rules):
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
  // The process grid of this layout (tp, pp, dp, the rank order, the HSDP split).
  GridSpec grid() const { return GridSpec{tp, pp, dp, order, dp_replicate}; }
  // Sequence parallelism as it runs: on only where there is a tp group to split over.
  bool sp() const { return sequence_parallel && tp > 1; }
  // Model chunks per stage as they run: 1 without a pipeline.
  int chunks() const { return pp > 1 ? virtual_stages : 1; }
  // "tp 4 pp 16 dp 2 mb 1 zero 1 full sp 1f1b"; HSDP: "tp 2 pp 1 dp 4 (dp_shard 2 x dp_replicate 2) mb 1 ...";
  // ZeRO++: "... zero++(qwz hpz 8 qgz 8)";
  // compression: "... hybrid(dp=int4 params=bf16 tp=bf16)". The rank order is not named.
  std::string describe() const;
};

}  // namespace weft
