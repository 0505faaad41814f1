// What grows with the number of devices in a synchronous step (the planner's scale effects).
//
// - Stragglers: every step ends in collectives that wait for the slowest rank, and a
//   pipeline runs at the pace of its slowest stage, so a step lasts as long as the slowest of
//   its N devices. With each device's busy time drawn around its mean with coefficient of
//   variation `jitter` (per-device and per-step variability: clocks, thermals, memory,
//   placement; Sinha et al. 2022, "Not All GPUs Are Created Equal", SC22), the expected
//   step grows by busy x jitter x E[max of N standard normal draws]: 0 for one device,
//   1/sqrt(pi) for two, about sqrt(2 ln N) for many.
// - Per-step work that no parallelism shrinks: the framework's own step (`step_overhead`,
//   seconds) and `world_allreduces` small all-reduces over every rank (loss, gradient norm,
//   loss-scale overflow), which are pure latency: a tree's 2 log2(N) hops at large N.
// - Collectives over many nodes pay their algorithm's latency term (ring 2(N - 1) hops,
//   tree 2 log2 N; predict.h's collective_time) and the machine's taper on global links
//   (a level of the system file whose bandwidth per device is below the level under it).
// - Synchronisations measured (SoftwareDefaults::sync_jitter, `weft calibrate` on >= 2 ranks):
//   a step is a chain of segments of work, each ended by a collective or a transfer that waits
//   for the slowest rank of its group. A rank's time for a segment of s seconds varies with a
//   coefficient of variation cv(s) (measured by the segment's length: on a shared machine or a
//   VM's vCPUs short segments vary more than long ones, and the variation does not average out
//   as 1/sqrt(s)), so each synchronisation of N ranks adds cv(s) s E[max of N] seconds: a
//   tensor-parallel layout, which synchronises tens of times a micro-batch, waits more than a
//   data-parallel one, which synchronises once a step.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

namespace weft::plan {

// E[max of n independent standard normal draws] (0 for n <= 1), by numerical integration of
// n x phi(x) Phi(x)^(n-1); cached per n.
double expected_max_normal(int64_t n);

// Seconds the slowest of `devices` adds to a step whose busy time per device is `busy`.
double straggler_time(double busy, double jitter, int64_t devices);

// Seconds one synchronisation of `devices` ranks waits after `segment` seconds of work on each:
// cv(segment) x segment x E[max of devices standard normal draws], cv interpolated in the
// measured curve ([segment seconds, cv], log-linear, clamped at its ends). 0 when the curve is
// empty, the segment is not positive or there is one device.
double sync_wait(const std::vector<std::pair<double, double>>& curve, double segment, int64_t devices);

// The closest non-increasing curve to measured (segment, cv) points, in weighted least squares
// (pool-adjacent-violators; `weights`: the samples behind each point): a stationary rank's
// relative variation cannot grow with the segment's length (the standard deviation of a sum of
// two halves is at most the sum of theirs), so a long segment measured higher than a shorter one
// is noise in its few samples, pooled with its neighbours in proportion to their samples.
std::vector<std::pair<double, double>> non_increasing_fit(const std::vector<std::pair<double, double>>& points,
                                                          const std::vector<double>& weights);

}  // namespace weft::plan
