// The communication report of a traced run (comm_report.json and comm_report.txt in the run
// folder; schema in docs/formats-run.md): the job's calls by (op, axis, link level, message
// size) with their latencies, bandwidths and straggler view, beside what the analytic model
// (plan/comm_model.h) predicts for the same steps, and a log2 histogram of message sizes.
//
// How it is made: every rank writes its events to trace-rank<R>.jsonl as the run goes (the
// tracer's file); at the end rank 0, after a barrier, reads all of them. The files are there
// already, so nothing new crosses the network and any backend's communicator works; the run
// folder must be shared by the ranks (as resuming from its checkpoints already requires).
//
// Counting (the same as the model's): a collective is counted once per group: the events of
// the members of one group with the same (axis, group, order of the call on that group)
// are one call, whose latency is the slowest member's (the call ends when the last rank
// does); a send and a receive are each one call of their own rank. Only the training steps
// (tracer phase "train") are compared with the model; the other phases (setup, eval,
// metrics, checkpoint, report) are listed apart.
//
// Link levels: for every reported training step, the bytes that cross the boundaries of each
// level's domains (crossing_bytes in comm/topology.h: the node-aware algorithm's traffic into
// each domain), in total and per axis. A collective is counted once per group; a transfer
// once, on its send (its recv is the same bytes). The levels default to the node map's one
// level "node"; the trainer may pass finer ones (e.g. GCD pairs inside nodes).
//
// Compressed collectives (version 3): a compressed call keeps its raw bytes (the logical call,
// what the model predicts and `mismatches` compares) and adds its wire bytes (the mean of its
// members' TraceEvent::wire_bytes; raw where not compressed), codec, codec seconds (the largest
// member's) and the members' relative RMS errors. Every row carries them; the bus bandwidth and
// the `levels` crossings are computed from the wire bytes (the crossings from the raw bytes
// too); the `compression` section sums them per (op, axis), per step and in all.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/topology.h"
#include "comm/tracer.h"
#include "engine/engine.h"
#include "plan/comm_model.h"

namespace weft {

struct CommReportInputs {
  EngineConfig ec;
  NodeMap nodes;
  int64_t first_step = 0;  // steps (first_step, last_step] are reported
  int64_t last_step = 0;
  // What preceded each reported step (first_step + 1 ... last_step), for the model.
  std::vector<CommStepContext> contexts;
  // The link levels of the `levels` section; none (no names): LinkLevels::from_nodes(nodes).
  LinkLevels levels;
};

// The report from every rank's events (per_rank[r]: world rank r's, in its file's order).
nlohmann::json build_comm_report(const std::vector<std::vector<TraceEvent>>& per_rank, const CommReportInputs& in);
// The same as a text table (comm_report.txt).
std::string format_comm_report(const nlohmann::json& report);
// Reads <run_dir>/trace-rank<R>.jsonl for every rank of the node map and writes
// comm_report.json and comm_report.txt there. Returns the report.
nlohmann::json write_comm_report(const std::string& run_dir, const CommReportInputs& in);

// NCCL-tests' bus-bandwidth factor (nccl-tests doc/PERFORMANCE.md) for a group of n ranks:
// all_reduce 2(n-1)/n, all_gather, reduce_scatter and all_to_all (n-1)/n, broadcast/send/recv
// 1; 0 for a group of one (nothing moves). The report applies it to the wire bytes.
double bus_factor(const std::string& op, int n);
// Mean after dropping the lowest and the highest `cut` fraction (DeepSpeed's comms logger:
// scipy's trim_mean with 0.1).
double trimmed_mean(std::vector<double> v, double cut = 0.1);

}  // namespace weft
