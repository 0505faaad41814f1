// A run's layout as the layout rules see it (parallel/layout_rules.h): the one validation of
// the layout that train() runs before anything is read or written, and that the tests apply
// to every layout the planner lists.
#pragma once

#include "parallel/grid.h"
#include "parallel/layout_rules.h"
#include "train/config.h"

namespace weft {

// The candidate of `cfg` on `world_size` ranks: its model shape, batch and [parallel] keys
// (dp 0 stays 0: the rules derive it as world / (tp x pp); dp_shard 0 likewise, as
// dp / dp_replicate). InputError for an unknown
// schedule, recompute mode or precision name.
LayoutCandidate run_layout_candidate(const RunConfig& cfg, int world_size);
// The same for a model given apart from the config's preset (a checkpoint's).
LayoutCandidate run_layout_candidate(const RunConfig& cfg, const ModelConfig& mc, int world_size);

struct RunLayout {
  GridSpec grid;           // tp, pp, dp (resolved), the rank order and dp_replicate
  LayoutCandidate layout;  // dp and dp_shard resolved
};

// Every layout rule, then the grid's own check of the rank order. InputError naming the values.
RunLayout validate_run_layout(const RunConfig& cfg, int world_size);
RunLayout validate_run_layout(const RunConfig& cfg, const ModelConfig& mc, int world_size);

}  // namespace weft
