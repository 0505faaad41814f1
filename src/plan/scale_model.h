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
#pragma once
#include <cstdint>

namespace weft::plan {

// E[max of n independent standard normal draws] (0 for n <= 1), by numerical integration of
// n x phi(x) Phi(x)^(n-1); cached per n.
double expected_max_normal(int64_t n);

// Seconds the slowest of `devices` adds to a step whose busy time per device is `busy`.
double straggler_time(double busy, double jitter, int64_t devices);

}  // namespace weft::plan
