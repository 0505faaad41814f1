// One trial of `weft tune`: a layout built in-process through the engine on every rank of the
// world, run for a few steps after a warm-up, measured, and torn down (no process restart).
//
// A trial that cannot run (the layout does not fit in this machine's memory, the engine
// refuses it) fails on every rank together: each rank catches what its set-up threw, the ranks
// agree on the first failure (the lowest rank's message), and the search goes on. A failure
// inside a collective on one rank only (out of memory in the middle of a step) is beyond that:
// the others wait until the communicator's timeout ([parallel] comm_timeout) and the command
// stops with that error.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "plan/shape.h"
#include "train/config.h"
#include "train/run_data.h"

namespace weft::tune {

struct TrialSettings {
  int64_t warmup = 2;  // steps run before the timing (first-touch allocations, caches)
  int64_t steps = 5;   // steps timed
};

struct TrialResult {
  bool failed = false;
  std::string reason;       // why it failed (the first failing rank's message); "" when it ran
  double step_s = 0;        // median over the timed steps of the slowest rank's step time
  double tokens_per_s = 0;  // global batch x sequence length / step_s
  int64_t peak_bytes = 0;   // the largest rank's peak of tracked device memory in the timed steps
  double loss = 0;          // the last step's loss (a sanity figure: finite)
  double setup_s = 0;       // engine construction and initialisation
};

// The median of `seconds` (the upper one of an even count: the slower, as a trial's timed steps
// are summarised); 0 when empty.
double median_seconds(std::vector<double> seconds);

// `base` with the layout's knobs (tp, pp, dp, micro-batch, ZeRO, recompute, sp, schedule, v).
RunConfig trial_config(const RunConfig& base, const plan::Layout& l);

// Runs layout `l` of the run `base` on the ranks of `world` (collective) on the training batches
// of `data` (the family's data source, train/run_data.h: token shards, weather fields).
TrialResult run_trial(const RunConfig& base, const plan::Layout& l, const RunData& data, Communicator& world,
                      const TrialSettings& s);

}  // namespace weft::tune
