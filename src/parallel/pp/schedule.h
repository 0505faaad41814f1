// Pipeline schedules: the ordered compute actions each pipeline stage runs in one optimizer
// step, and a dependency-driven timing simulator. Pure and communication-free: the
// pipeline runtime executes these lists and sends/receives activations between them.
//
// Notation: p stages, m micro-batches, v virtual chunks per stage (K = p*v model chunks;
// global chunk c lives on stage c % p as local chunk c / p, see partition.h).
//
// Schedules
// - kGpipe (Huang et al. 2019; Megatron's "all-forward-all-backward"): forwards of
//   micro-batches 0..m-1, then backwards in the same order 0..m-1 (FIFO, as Megatron; the
//   step time is the same as with the reverse order). Stash peak: m.
// - k1F1B (PipeDream-Flush, Megatron `forward_backward_pipelining_without_interleaving`):
//   warm-up of W = min(p - s - 1, m) forwards on stage s, then m - W rounds of (forward
//   W+i, backward i), then the W remaining backwards. Stash peak: min(p - s, m).
// - kInterleaved (Megatron `forward_backward_pipelining_with_interleaving`, Narayanan et al.
//   2021 sec. 2.2): needs m % p == 0. The m*v forward "virtual micro-batches" k = 0..m*v-1
//   of a stage run in groups of p*v: k -> local chunk (k % (p*v)) / p, micro-batch
//   (k / (p*v)) * p + k % p; backward k takes chunk v - 1 - (k % (p*v)) / p and the same
//   micro-batch formula. Warm-up W = min((p - s - 1) * 2 + (v - 1) * p, m*v), except that
//   m == p runs all m*v forwards first (Megatron's all_warmup_microbatches); then rounds of
//   (forward W+i, backward i), then the remaining backwards. Stash peak: min(W + 1, m*v).
//
// Simulator: a forward of a chunk takes t_forward / v, a backward t_backward / v (t_* are
// per micro-batch for one whole stage). F(mb, c) waits for F(mb, c-1), B(mb, c) for
// B(mb, c+1) and F(mb, c); t_p2p is added to a dependency that crosses stages. Each stage
// runs its list in order, one action at a time, as early as its dependencies allow. With
// t_p2p = 0 it reproduces the bubble fractions of Narayanan et al. 2021 (sec. 2.2):
//   GPipe, 1F1B:  (step - ideal) / ideal = (p - 1) / m
//   interleaved:  (p - 1) / (v * m)
// where ideal = m * (t_forward + t_backward) (the busy time of every stage).
#pragma once
#include <string>
#include <vector>

namespace weft {

enum class PipeSchedule { kGpipe, k1F1B, kInterleaved };

// The pipeline runtime keeps this many receives posted ahead of the action that needs them
// (plus one buffer being consumed): a message travels while the stage computes.
constexpr int kPipeRecvAhead = 2;

// "gpipe", "1f1b", "interleaved"; InputError listing the names otherwise.
PipeSchedule parse_schedule(const std::string& name);
std::string schedule_name(PipeSchedule s);

struct PipeAction {
  enum Kind { kForward, kBackward } kind;
  int micro_batch;
  int chunk;  // virtual chunk index on this stage, 0..v-1

  bool operator==(const PipeAction&) const = default;
};

// The ordered compute actions of `stage` in one optimizer step. InputError for stages < 1,
// stage outside [0, stages), micro_batches < 1, virtual_stages < 1, virtual_stages != 1 with
// kGpipe/k1F1B, and micro_batches % stages != 0 with kInterleaved.
std::vector<PipeAction> stage_schedule(PipeSchedule s, int stages, int stage, int micro_batches,
                                       int virtual_stages = 1);

// The forwards `stage` runs before its first backward (W in the header comment): its action
// list is W forwards, then (forward, backward) pairs, then W backwards. Same InputErrors as
// stage_schedule.
int warmup_forwards(PipeSchedule s, int stages, int stage, int micro_batches, int virtual_stages = 1);

// Peak number of (micro-batch, chunk) pairs whose forward has run and backward has not: the
// activations stashed at once.
// chunk >= 0: counts only that virtual chunk's pairs (one chunk's activation slots).
int max_in_flight(const std::vector<PipeAction>& actions, int chunk = -1);

struct PipeSimResult {
  double step_time = 0;       // end of the last action on any stage (start at 0)
  std::vector<double> busy;   // per stage: sum of its action times
  std::vector<double> idle;   // per stage: step_time - busy
  double bubble_fraction = 0; // (step_time - ideal) / ideal, ideal = m * (t_f + t_b)
};

// Simulates the schedule `s` on all stages (see the header comment).
PipeSimResult simulate_pipeline(PipeSchedule s, int stages, int micro_batches,
                                int virtual_stages, double t_forward, double t_backward,
                                double t_p2p = 0);

// Simulates explicit per-stage action lists (actions[s] for stage s). InputError when a list
// does not contain every (micro-batch, chunk) forward and backward exactly once or the times
// are negative; RuntimeError naming the stuck stages when the dependency graph deadlocks.
PipeSimResult simulate_actions(const std::vector<std::vector<PipeAction>>& actions,
                               int micro_batches, int virtual_stages, double t_forward,
                               double t_backward, double t_p2p = 0);

}  // namespace weft
