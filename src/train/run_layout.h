// A run's layout as the layout rules see it (parallel/layout_rules.h): the one validation of
// the layout that train() runs before anything is read or written, and that the tests apply
// to every layout the planner lists.
#pragma once

#include "parallel/grid.h"
#include "parallel/layout_rules.h"
#include "train/config.h"

namespace weft {

// The TOML binding of the one layout type (parallel/layout.h), both ways: [train] micro_batch,
// recompute, recompute_layers; [parallel] tp, pp, dp, dp_replicate, order, zero,
// sequence_parallel, schedule, virtual_stages; [zero] the ZeRO++ knobs (int8 weights, int4
// gradient hops: what the planner prices); [compression] the codecs.
// run_layout: the layout `cfg` asks for (dp 0 stays 0: world / (tp x pp); ZeRO++ kCustom when a
// knob is on; compression "custom" when a codec is). InputError naming the key for an unknown
// schedule, recompute mode or codec.
Layout run_layout(const RunConfig& cfg);
// set_run_layout: `cfg` with every key above set from `l` (dp_shard 0: dp / dp_replicate).
void set_run_layout(RunConfig& cfg, const Layout& l);
// layout_toml: the TOML text of those keys (weft tune's best.toml).
std::string layout_toml(const Layout& l);
// Those keys as "section.key", in the order above (the command line's binding of the layout,
// apps/cli_util.h, registers one option for each).
const std::vector<std::string>& run_layout_keys();

// The candidate of `cfg` on `world_size` ranks: its model shape, batch and [parallel] keys
// (dp 0 stays 0: the rules derive it as world / (tp x pp); dp_shard 0 likewise, as
// dp / dp_replicate). InputError for an unknown
// schedule, recompute mode or precision name.
LayoutCandidate run_layout_candidate(const RunConfig& cfg, int world_size);
// The same for a model given apart from the config's preset (a checkpoint's).
LayoutCandidate run_layout_candidate(const RunConfig& cfg, const ModelConfig& mc, int world_size);

// Every layout rule, then the grid's own check of the rank order. InputError naming the values.
// The candidate returned has dp and dp_shard resolved (its grid(): tp, pp, dp, the rank order
// and dp_replicate).
LayoutCandidate validate_run_layout(const RunConfig& cfg, int world_size);
LayoutCandidate validate_run_layout(const RunConfig& cfg, const ModelConfig& mc, int world_size);

}  // namespace weft
