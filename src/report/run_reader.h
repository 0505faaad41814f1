// A finished run folder read back for `weft report`: the resolved config, every line of
// metrics.jsonl (steps, validations, the final report), the trace files and comm_report.json.
// Everything is validated while reading, so that a report is written only from a whole run:
// bad input throws InputError naming the file (and line) and what is wrong.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "train/config.h"

namespace weft::report {

// One optimizer step's line of metrics.jsonl.
struct StepPoint {
  int64_t step = 0;
  int64_t tokens = 0;  // tokens trained after this step (cumulative)
  double loss = 0, tokens_per_s = 0, ms = 0;
  double imbalance = 0;  // busiest data-parallel rank's busy time over the mean (0: not recorded, dp 1)
};

// One validation line.
struct ValPoint {
  int64_t step = 0;
  int64_t tokens = 0;  // tokens trained when it was measured
  double val_loss = 0;
};

// One task's scores in a tasks line ([eval] tasks, train/train_tasks.h).
struct TaskPoint {
  int64_t step = 0;
  int64_t tokens = 0;  // tokens trained when it was scored
  std::string task;
  int64_t items = 0;
  int fewshot = 0;
  double acc = 0;
  std::optional<double> acc_norm;  // multiple choice only
};

// The memory categories of the final report, in its order; kMemTotal is their sum's peak.
constexpr std::array<const char*, 7> kMemCategories = {"params",    "grads", "optimizer", "activations",
                                                       "workspace", "comm",  "total"};
constexpr size_t kMemTotal = 6;

// One rank of the final line's memory_report: bytes by category (kMemCategories order).
struct RankMemory {
  int rank = 0, stage = 0, tp_rank = 0, dp_rank = 0;
  std::array<double, 7> measured{}, predicted{};
};

// The final line's step_time_report (present when the run had a system file).
struct StepTimeReport {
  std::string system;
  double measured_s = 0, predicted_s = 0;
};

// The pipeline of one step line (pp > 1): per stage busy, p2p wait and idle milliseconds.
struct PipelineStep {
  std::vector<double> busy_ms, wait_ms, idle_ms;
  double bubble_fraction = 0, bubble_predicted = 0;
};

// The pipeline over the run: per-stage means over the steps after the first.
struct PipelineSummary {
  std::string schedule;
  int stages = 0, virtual_stages = 1, micro_batches = 0;
  std::vector<double> busy_ms, wait_ms, idle_ms;
  double bubble_fraction = 0, bubble_predicted = 0;
  int steps_averaged = 0;
};

// One row of comm_report.json (op, axis, level, message size): see docs/report.md.
struct CommRow {
  std::string op, axis, level;
  int group_size = 0;
  int64_t bytes = 0, count = 0, total_bytes = 0;
  int64_t wire_total_bytes = 0;  // what the codecs made of total_bytes (version 3; before: total_bytes)
  double time_s = 0, mean_latency_s = 0, trimmed_mean_latency_s = 0, algbw_gbps = 0, busbw_gbps = 0;
  std::optional<int64_t> model_count, model_total_bytes;  // null: the model has no entry
  // Each rank's latency minus the fastest rank's, per call; not applicable (straggler_s null, or
  // "applicable": false) where there is no peer to compare with (a group of one, send/recv).
  bool straggler_applicable = true;
  double straggler_max_s = 0, straggler_mean_s = 0;
  int straggler_worst_rank = 0;
};

// One entry of comm_report.json's by_axis_level.
struct CommAxisLevel {
  std::string axis, level;
  int64_t calls = 0, bytes = 0;
  std::optional<int64_t> model_bytes;
  int64_t wire_bytes = 0;  // version 3; before: bytes
};

// One (op, axis) of comm_report.json's compression section (version 3): the training steps'
// raw and wire bytes, codecs, codec seconds and the payloads' relative RMS error.
struct CommCompression {
  std::string op, axis;
  int64_t calls = 0, compressed_calls = 0, raw_bytes = 0, wire_bytes = 0;
  std::vector<std::string> codecs;  // empty: none of its calls was compressed
  double ratio = 1, codec_s = 0;
  int64_t rel_err_measured = 0;     // payloads with a measured error (0: mean and max are -1)
  double rel_err_mean = -1, rel_err_max = -1;
};

struct CommReport {
  int version = 0;
  int world = 0, ranks_per_node = 0, steps = 0;
  std::string node_source, model;
  std::vector<CommRow> rows;
  std::vector<CommAxisLevel> by_axis_level;
  std::vector<CommCompression> compression;  // empty before version 3
  int64_t mismatches = 0;
  // Whether any training call went through a codec.
  bool compressed() const;
};

// Everything `weft report` shows of one run.
struct Run {
  std::string dir;    // as given
  std::string label;  // name in plots and tables: the folder as given (`weft report` shortens it)
  RunConfig config;
  std::vector<StepPoint> steps;
  std::vector<ValPoint> vals;
  std::vector<TaskPoint> tasks;             // in-context-learning scores, in the order written
  std::vector<RankMemory> memory;           // the final report, one entry per rank
  std::optional<StepTimeReport> step_time;  // null without a system file
  std::optional<PipelineSummary> pipeline;  // null when pp = 1
  int trace_files = 0;                      // trace-rank*.jsonl found
  CommReport comm;
  int64_t tokens_per_step() const { return config.global_batch * config.seq(); }
};

// Reads and validates the run folder `dir` (InputError naming the file, and the line for
// metrics.jsonl, otherwise).
Run read_run(const std::string& dir);

// Parts of read_run, for tests and for reading a single file.
void read_metrics(const std::string& path, Run& run);
CommReport read_comm_report(const std::string& path);

}  // namespace weft::report
