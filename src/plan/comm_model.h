// The analytic communication model: for a model and a layout (an EngineConfig: its Layout of tp, sp, pp,
// schedule, virtual stages, micro-batches, dp, ZeRO stage and its bucket size and prefetch,
// recompute, precision), every call weft's training step makes, on every group of every axis,
// with the bytes the tracer records for it (comm/tracer.h's convention). It describes what
// weft DOES (read from src/parallel, src/engine, src/model/gpt.cc), and says in comments in
// comm_model.cc where that departs from the published formulas (Megatron-LM: Shoeybi et al.
// 2019, Korthikanti et al. 2022, Narayanan et al. 2021; ZeRO: Rajbhandari et al. 2020) and
// why. Checked against the tracer byte for byte over the parity suites' layouts
// (tests/train/comm_model_test.cc); the planner's time model (plan/predict.cc) takes its
// per-layer tensor-parallel and per-step data-parallel call counts from here.
//
// Counting convention (the same as comm_report.json's): the whole job's calls, each
// collective once per GROUP (the per-rank events of one call collapse into one), each
// send and each receive once (a send on its sender, a receive on its receiver). Collectives
// on a group of one rank are no-ops for data but weft still calls (and traces) them where its
// code does not test the size (e.g. the gradient buckets of dp = 1): they are listed too.
//
// Only the training step's traffic (the tracer's phase "train") is modelled: evaluation,
// checkpoint gathers and the metrics' small gathers are other phases.
//
// HSDP (EngineConfig::layout.dp_replicate > 1): the store's ZeRO calls run on each dp_shard
// group (axis "dp-shard"), its replicas' all-reduces on each dp_replicate group
// ("dp-replicate"), the embedding's row exchange and the loss on the whole dp group ("dp").
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "engine/engine_config.h"

namespace weft {

// One kind of call on one group (or between two peers), per optimizer step.
struct CommCall {
  std::string op;          // tracer kind: all_reduce, reduce_scatter, all_gather, send, recv
  std::string axis;        // tracer axis: tp, pp, dp, pp-embedding
  int64_t bytes = 0;       // of one call, tracer convention
  std::vector<int> ranks;  // the group's world ranks (group order); send/recv: {this rank, peer}
  int64_t count = 0;       // calls per step
};

// What precedes a step, where it changes the step's traffic: only ZeRO-3's parameter buffers
// remember anything across steps (an evaluation before the step gathers parameters that the
// step then finds valid; the optimizer step invalidates them all).
struct CommStepContext {
  int64_t eval_passes_before = 0;  // forward passes of an evaluation since the last optimizer step
  bool after_training = false;     // this process has run a training step before (ZeRO-3's
                                   // prefetch direction in the evaluation depends on it)
};

// Every call of one training step of the whole job, grouped by (op, axis, bytes, ranks).
// InputError if the layout is not one the engine accepts.
std::vector<CommCall> model_step_comm(const EngineConfig& ec, const CommStepContext& ctx = {});

// --- closed forms shared with the planner (plan/predict.cc) ---

// Tensor-parallel calls of one transformer layer for one micro-batch, in units of the
// activation (N x C elements, N = B*T): the forward's, the backward's, and what a fully
// recomputed layer adds to the backward. Under sequence parallelism the N x C calls are
// all-gathers and reduce-scatters (bytes of the whole N x C buffer each) and the
// LayerNorm weight gradients add small all-reduces of 2C elements.
struct TpLayerCalls {
  int all_reduce = 0, all_gather = 0, reduce_scatter = 0;  // of N x C elements
  int small_all_reduce = 0;                                // of 2C elements (sp: LayerNorm weights)
};
struct TpLayerComm {
  TpLayerCalls forward, backward, recompute;
};
TpLayerComm tp_layer_comm(bool sequence_parallel);
// The same for Megatron-LM (Korthikanti et al. 2022 sec. 4.2.2, 5), what the planner prices
// for systems whose [defaults] tp_comm is "megatron": a fully recomputed layer repeats the
// forward's calls, and under sp the backward gathers the LayerNorm output again for the
// weight gradients (2 more all-gathers) instead of keeping it.
TpLayerComm megatron_tp_layer_comm(bool sequence_parallel);

// Data-parallel calls of one step per model chunk, as multiples of the chunk's gradient
// (Psi elements): ZeRO 0 one all-reduce of Psi; ZeRO 1/2 one reduce-scatter of Psi (ZeRO 2:
// per micro-batch) and one all-gather of Psi; ZeRO 3 per micro-batch one reduce-scatter of
// Psi and `zero3_gathers_per_micro_batch` all-gathers of Psi.
struct DpStepComm {
  double all_reduce = 0, reduce_scatter = 0, all_gather = 0;  // Psi units (per step, or per micro-batch below)
  bool reduce_scatter_per_micro_batch = false;                // ZeRO 2 and 3
  bool all_gather_per_micro_batch = false;                    // ZeRO 3
};
// For a model of `groups` parameter groups (L + 2) and ZeRO-3 prefetch `prefetch`; tied_head:
// its family's order of parameter accesses (ModelCapabilities::tied_head,
// zero3_gathers_per_micro_batch).
DpStepComm dp_step_comm(int zero, int groups, int prefetch, bool tied_head = true);

// ZeRO++ on a ZeRO-3 step (Wang et al. 2023, arXiv 2306.10209; plan/zeropp.h, docs/planner.md
// "ZeRO++"). The knobs as plan::Layout holds them.
struct ZeroPPKnobs {
  bool qwz = false;            // the gathers over the whole dp group carry int8 + fp32 scales
  int64_t hpz = 1;             // secondary partition size alpha in dp ranks (1: off)
  bool qgz = false;            // the gradient reduce-scatter as int4 all-to-all hops
  std::vector<int> hierarchy;  // qgZ's inner levels, cumulative dp ranks, innermost first
};
// One all-to-all hop of qgZ: `peers` ranks `stride` dp ranks apart; every rank sends
// `elements` (in units of the stage's Psi) quantized, split over its peers, and keeps the sum
// of 1/peers of them.
struct GradientHop {
  int64_t peers = 1, stride = 1;
  double elements = 0;
};
// The ZeRO-3 calls of one STEP of `micro_batches` micro-batches over `dp` ranks, in Psi units:
struct ZeroPPStepComm {
  // Parameter all-gathers over the whole dp group: without hpZ all of them (micro_batches x
  // zero3_gathers_per_micro_batch); with hpZ only each group's first, the first micro-batch's
  // forward (1). qwZ puts these on int8 wires.
  double primary_gathers = 0;
  bool quantized = false;
  // All-gathers inside the hpZ group of `hpz` ranks (16-bit): every later gather of the step
  // (the backward's, later micro-batches').
  double secondary_gathers = 0;
  int64_t hpz = 1;
  // Gradient reduction per micro-batch: a reduce-scatter of Psi over dp (reduce_scatter = 1),
  // or with qgZ the hops, innermost first (hop 1 sends all of Psi over hierarchy[0] peers,
  // hop i sends Psi / hierarchy[i-2] over hierarchy[i-1] / hierarchy[i-2] peers, the last over
  // dp / hierarchy.back()).
  double reduce_scatter = 0;
  std::vector<GradientHop> gradient_hops;
};
// InputError naming the values when the hierarchy or hpz does not divide dp.
ZeroPPStepComm zeropp_step_comm(int groups, int prefetch, int64_t micro_batches, int64_t dp, const ZeroPPKnobs& k,
                                bool tied_head = true);
// ZeRO-3: parameter all-gathers per micro-batch in units of the whole model, from the
// replay of weft's parameter buffers (2 in the textbook; weft keeps what its 3 + prefetch
// buffers still hold, so the backward re-gathers only the groups evicted since the forward).
// Steady state (the second micro-batch of a step onwards); layers of equal size assumed.
// tied_head (ModelCapabilities): the head's backward takes group 0 first (GPT); false: the head
// in the back group, whose backward takes the back group before the first gradient and the
// front group last, so it prefetches no layer there (ClimaX, model/climax/climax.cc).
double zero3_gathers_per_micro_batch(int n_layer, int prefetch, bool tied_head = true);

// (op, axis, bytes) -> (count, total bytes) over a list of calls.
using CommTotals = std::map<std::tuple<std::string, std::string, int64_t>, std::pair<int64_t, int64_t>>;
CommTotals comm_totals(const std::vector<CommCall>& calls);

}  // namespace weft
