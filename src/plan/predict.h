// Step-time and memory prediction for one layout on one system: the planner's public API.
//
// The trainer calls
//
//   plan::System sys = plan::load_system("systems/local.toml");
//   plan::Options opt = plan::Options::from_system(sys, plan::Precision::kFp32, global_batch);
//   plan::Prediction p = plan::predict(shape, sys, layout, opt);
//   plan::MemoryBreakdown mem = plan::stage_memory(shape, layout, opt.memory(), my_stage);
//
// and prints p.time (step time split into compute, TP communication, pipeline bubble + p2p,
// exposed DP communication, optimizer) and mem beside what it measured.
//
// Model (every formula cites its source where it is computed, in predict.cc):
// - compute: each operation of a layer (matrix products with their shapes; memory-bound
//   element-wise ops with their bytes) takes its kernel time (plan/kernel_model.h: per-shape
//   products with wave quantisation and small-k losses on GPUs, the measured curve on CPUs;
//   the roofline, Williams et al. 2009) + kernel latency; backward products cost twice the
//   forward; recompute adds the recomputed forward.
// - scale: stragglers, per-step overhead, world all-reduces (plan/scale_model.h).
// - communication: alpha-beta per collective (ring algorithms, Thakur et al. 2005: all-reduce
//   2(n-1) steps moving 2(n-1)/n of the buffer, reduce-scatter and all-gather (n-1) steps
//   moving (n-1)/n), per link level of the system: a group's members are placed by the rank
//   order (tp fastest by default), and the slowest level it spans sets the bandwidth.
// - pipeline: per micro-batch stage times t_f, t_b and the p2p time give the step of the
//   schedule (GPipe/1F1B bubble (p-1)/m, interleaved (p-1)/(v m): Narayanan et al. 2021);
//   the closed forms are checked against parallel/pp/schedule.h's simulator in the tests.
// - data parallel: gradient all-reduce (ZeRO 0) or reduce-scatter + parameter all-gather
//   (ZeRO 1/2), per-micro-batch gathers under ZeRO 3 (Rajbhandari et al. 2020 sec. 7);
//   the gradient reduction overlaps the last micro-batch's backward when overlap_dp is set.
#pragma once
#include <string>
#include <vector>

#include "plan/memory.h"
#include "plan/shape.h"
#include "plan/system.h"

namespace weft::plan {

struct Options {
  Precision precision = Precision::kBf16;
  // How 16-bit products compute (core/precision.h): kFast at peak_flops_16 (native 16-bit
  // products: Megatron-LM's, weft's --matmul fast), kExact at peak_flops_32 (weft's exact mode
  // widens 16-bit operands into fp32 products). fp32 runs: peak_flops_32 either way.
  MatmulMode matmul = MatmulMode::kFast;
  bool attention_16 = true;  // see SoftwareDefaults
  bool native_bf16 = false;  // Device::native_bf16: weft's cpu backend's native bf16 products
  int64_t global_batch = 1;  // sequences per optimizer step
  bool flash_attention = false;
  bool dropout = false;
  bool fp32_grad_accumulation = true;
  bool overlap_dp = true;
  bool pp_scatter_gather = true;  // see SoftwareDefaults
  bool explain = false;           // fill Prediction::explain (weft plan --explain)
  // Seconds after which a layout search stops walking and ranks what it priced (0: no limit;
  // weft plan --time-limit): bounded work for any model.
  double search_seconds = 0;
  double dp_bucket_elements = 40e6;
  std::string memory_model = "megatron";  // see MemoryOptions
  std::string tp_comm = "megatron";       // see SoftwareDefaults
  bool pp_p2p_overlap = true;             // see SoftwareDefaults

  // The precision the model's products are priced at, and the attention core's.
  Precision product_precision() const { return matmul == MatmulMode::kExact ? Precision::kFp32 : precision; }
  Precision attention_precision() const { return attention_16 ? product_precision() : Precision::kFp32; }

  // The system's software defaults ([defaults] of the system file).
  static Options from_system(const System& s, Precision p, int64_t global_batch);
  MemoryOptions memory() const;
};

// Seconds of one optimizer step, by where the time goes. total = compute + tp_comm +
// pp_bubble + dp_exposed + optimizer + stragglers + overhead.
struct StepTime {
  double compute = 0;     // m x (forward + backward + recompute) of the slowest stage
  double tp_comm = 0;     // m x tensor-parallel collectives of the slowest stage
  double pp_bubble = 0;   // pipeline fill/drain + point-to-point transfers on the critical path
  double dp_exposed = 0;  // data-parallel / ZeRO communication not hidden behind the backward
  double optimizer = 0;   // the optimizer step (memory-bound)
  double stragglers = 0;  // waiting for the slowest device (plan/scale_model.h)
  double overhead = 0;    // per-step work no parallelism shrinks: fixed + world all-reduces
  double total = 0;
};

// One line of `weft plan --explain`: seconds per step on the critical path of one term.
struct ExplainTerm {
  std::string group;   // compute, tp, pp, dp, optimizer, stragglers, overhead
  std::string name;    // e.g. "matrix products (QKV, projection, MLP)", "all-reduce"
  std::string where;   // the link level a collective's time is set by ("node", "network"), or ""
  double seconds = 0;
  std::string detail;  // counts and sizes behind the figure
};

// One kind of traffic (tp activations, pp transfers, dp gradient reductions, params gathers)
// of one device over one step: the buffers as the collectives take them (raw, the tracer's
// convention: the whole logical buffer of each call), what the axis's codec puts on the wire
// for them, and the codec's seconds on the step's critical path (plan/compression.h).
struct AxisTraffic {
  std::string codec = "off";
  double raw = 0, wire = 0, codec_s = 0;
  void add(double raw_bytes, double wire_bytes, double codec_seconds, double calls) {
    raw += calls * raw_bytes;
    wire += calls * wire_bytes;
    codec_s += calls * codec_seconds;
  }
};
struct TrafficReport {
  AxisTraffic tp, pp, dp, params;
  double codec_s() const { return tp.codec_s + pp.codec_s + dp.codec_s + params.codec_s; }
};

struct Prediction {
  Layout layout;
  int64_t micro_batches = 0;   // m per pipeline
  StepTime time;
  double step_time_s = 0;
  double tokens_per_s = 0;
  double model_flops = 0;      // per step, all ranks (GPT::train_flops_per_token x tokens)
  double hardware_flops = 0;   // per step, all ranks, recompute included
  double mfu = 0;              // model FLOPs / (step time x ranks x peak)
  double hfu = 0;              // hardware FLOPs / (step time x ranks x peak)
  MemoryBreakdown memory;      // the worst stage
  bool fits = false;           // memory.total <= device memory
  // Per micro-batch on the slowest stage: forward, backward (with recompute), one p2p send.
  double t_forward = 0, t_backward = 0, t_p2p = 0;
  std::vector<ExplainTerm> explain;  // with Options::explain: the step's terms, largest groups first
  // With Options::explain: bytes each device sends per step over each level's links (index:
  // the system's levels) for the data-parallel / ZeRO / ZeRO++ collectives
  // (collective_level_bytes summed over the step's calls).
  std::vector<std::pair<std::string, double>> dp_level_bytes;
  // Per kind of traffic, raw vs wire bytes and codec seconds (the latter are inside
  // time.tp_comm, time.pp_bubble and time.dp_exposed); tp and pp for the slowest stage.
  TrafficReport traffic;
};

// Predicts one layout. InputError (naming the values) when the layout breaks a layout rule
// (parallel/layout_rules.h, as the trainer applies them) or the rank order is not a
// permutation of tp, dp, pp.
Prediction predict(const ModelShape& m, const System& sys, const Layout& l, const Options& o);
// The same without the checks (the search has checked already).
Prediction predict_unchecked(const ModelShape& m, const System& sys, const Layout& l, const Options& o);

// Communication time of one collective over `n` ranks whose ranks are `stride` apart in the
// world order, moving `bytes` (the full buffer), on every group of that axis at once.
// All-reduce takes the faster of a ring (2(n-1) latencies, 2(n-1)/n of the bytes) and a
// double binary tree (2 ceil(log2 n) latencies, 2x the bytes; Sanders et al. 2009, NCCL's
// choice at scale); the others are rings.
// kAllToAll (qgZ's hops): n - 1 rounds; every rank sends bytes/n to each peer, so what leaves
// its unit of the level below ((n - k_{l-1})/n of the buffer) crosses level l on its own links.
enum class Collective { kAllReduce, kReduceScatter, kAllGather, kSendRecv, kAllToAll };
double collective_time(const System& sys, Collective c, int64_t n, int64_t stride, double bytes);
// Bytes each device sends over each level's links (index: sys.levels) for one such collective:
// the numerator of collective_cost's bandwidth term at every level the group crosses (a ring:
// (n-1)/n of the buffer per crossing, shared by the k_{l-1} devices below it; an all-to-all:
// (n - k_{l-1})/n of it per device; a tree all-reduce: 2 buffers per crossing). Times the
// devices of a node it is the ZeRO++ accounting's "cross-node bytes per node".
std::vector<double> collective_level_bytes(const System& sys, Collective c, int64_t n, int64_t stride, double bytes);
struct CollectiveCost {
  double seconds = 0, latency_s = 0, bandwidth_s = 0;
  const LinkLevel* level = nullptr;  // the level whose crossing sets the bandwidth term (in the System)
  bool tree = false;                 // all-reduce: the tree won
  std::string level_name() const { return level ? level->name : ""; }
};
CollectiveCost collective_cost(const System& sys, Collective c, int64_t n, int64_t stride, double bytes);

// Ranks between neighbours of `axis` ("tp", "dp", "pp") under the layout's rank order
// ("tp-dp-pp": tp fastest). InputError for an order that is not a permutation of tp, dp, pp.
int64_t axis_stride(const Layout& l, const std::string& axis);

// Seconds of one pipeline's micro-batches in one step from per micro-batch stage times:
// t_max the slowest stage's forward + backward, t_sum that summed over the p stages, t_p2p
// one activation transfer between neighbour stages.
// p2p_overlap false: the interleaved schedule's transfers are not hidden behind other chunks'
// work; each chunk waits a round trip per micro-batch as 1F1B does (2 v (m - 1) more).
double pipeline_time(PipeSchedule s, int p, int64_t m, int v, double t_max, double t_sum, double t_p2p,
                     bool p2p_overlap = true);

// Time of one matrix product of `flops` moving `bytes` (roofline + the measured curve or
// constant by FLOPs; the per-shape model is plan/kernel_model.h's gemm_time).
double matmul_time(const Device& d, Precision p, double flops, double bytes);

}  // namespace weft::plan
