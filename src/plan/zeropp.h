// ZeRO++ in the planner: the dp group's link hierarchy, the presets ("zero++", "3-level")
// resolved against a system, and the rules that refuse knobs that cannot work.
//
// Sources: Wang et al. 2023, "ZeRO++: Extremely Efficient Collective Communication for Giant
// Model Training" (arXiv 2306.10209): qwZ (int8 block-quantized weight all-gather), hpZ
// (secondary weight partition inside a node), qgZ (int4 hierarchical all-to-all gradient
// reduce-scatter); DeepSpeed's implementation (deepspeed/runtime/zero/partition_parameters.py,
// comm/coalesced_collectives.py: all_to_all_quant_reduce). Xu et al. 2025, "Scaling Large
// Language Model Training on Frontier with Low-Bandwidth Partitioning" (arXiv 2501.04266):
// the 3-level variant on Frontier (GCD pair, node, network). Which collective runs on which
// level in that paper could not be read (only its abstract was available); the "3-level"
// preset is this planner's reading of it (docs/planner.md, "ZeRO++").
#pragma once
#include <string>
#include <vector>

#include "plan/shape.h"
#include "plan/system.h"

namespace weft::plan {

// ZeRO++ works inside ZeRO's group: with HSDP (Layout::dp_replicate > 1) "dp" below is the
// dp_shard group of dp_shard consecutive dp ranks, whose replicas add one all-reduce per step.
//
// One level of the system as the dp group sees it: the dp ranks inside one unit of it
// (cumulative, as the system file's devices), placed by the rank order (dp peers in a unit of
// U devices: min(dp, U / dp stride), so with tp innermost U / (tp x pp-in-unit)).
struct DpLevel {
  std::string name;     // the system level's name
  int64_t dp_ranks = 1; // dp ranks per unit of this level
  // Why the level is not in the hierarchy (empty when it is): "1 dp peer" (the unit holds one
  // dp rank: empty), "as <level>" (no more dp ranks than the level inside it), "whole dp group"
  // (the unit holds all of dp: the top of the hierarchy), "does not divide dp <n>".
  std::string dropped;
};
// Every level of `sys` but the top (the machine), innermost first.
std::vector<DpLevel> dp_levels(const System& sys, const Layout& l);
// The hierarchy: the kept levels' dp ranks, innermost first (e.g. [2, 8] on Frontier with tp 1).
std::vector<int> dp_hierarchy(const System& sys, const Layout& l);

// `l` with its ZeRO++ knobs derived from its preset (kZeroPP, kThreeLevel; kNone: all off;
// kCustom: as given):
//   zero++  : qwz, hpz = the node's dp ranks, qgz over [node] (2 hops: node, the rest)
//   3-level : qwz, hpz = the innermost kept level's dp ranks (the GCD pair on Frontier),
//             qgz over every kept level up to the node ([pair, node]: 3 hops)
// "The node" is the level named "node" (else the outermost level under the machine). A level
// that the layout leaves empty is dropped, so with tp 2 on Frontier the pair holds one dp rank
// and "3-level" resolves to the same knobs as "zero++".
Layout resolve_zeropp(const Layout& l, const System& sys);

// The rule the ZeRO++ knobs break, naming the values, or "": they need zero 3; hpz >= 1 divides
// dp; the hierarchy (qgz only) increases, each level a multiple of the one inside it, dividing
// dp and below it; quant_block > 0.
std::string zeropp_error(const Layout& l);

}  // namespace weft::plan
