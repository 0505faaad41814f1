#include "report/run_reader.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/text_util.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace weft::report {

namespace {

// What the report reads at most: a metrics line (the memory and pipeline reports of every rank:
// a few hundred bytes a rank) and the communication report (a row per op, axis and level).
constexpr int64_t kMaxMetricsLine = int64_t{16} << 20;
constexpr int64_t kMaxCommReport = int64_t{256} << 20;

}  // namespace

namespace {

// The value at `key` of the object `j`, or InputError "{where}: '{key}' is missing or not {what}".
const json& field(const json& j, const char* key, const std::string& where, bool (json::*is)() const,
                  const char* what) {
  if (!j.is_object() || !j.contains(key) || !(j[key].*is)()) {
    throw_input("{}: '{}' is missing or not {}", where, key, what);
  }
  return j[key];
}
double number(const json& j, const char* key, const std::string& where) {
  return field(j, key, where, &json::is_number, "a number").get<double>();
}
int64_t integer(const json& j, const char* key, const std::string& where) {
  return field(j, key, where, &json::is_number_integer, "an integer").get<int64_t>();
}
std::string text(const json& j, const char* key, const std::string& where) {
  return field(j, key, where, &json::is_string, "a string").get<std::string>();
}
const json& array(const json& j, const char* key, const std::string& where) {
  return field(j, key, where, &json::is_array, "an array");
}
const json& object(const json& j, const char* key, const std::string& where) {
  return field(j, key, where, &json::is_object, "an object");
}
// An integer or null (the analytic model's columns are null where it has no entry).
std::optional<int64_t> optional_integer(const json& j, const char* key, const std::string& where) {
  if (j.contains(key) && j[key].is_null()) return std::nullopt;
  return integer(j, key, where);
}
std::vector<double> numbers(const json& j, const char* key, const std::string& where, size_t n) {
  const json& a = array(j, key, where);
  if (a.size() != n) throw_input("{}: '{}' holds {} values, expected {} (one per stage)", where, key, a.size(), n);
  std::vector<double> out;
  for (const json& v : a) {
    if (!v.is_number()) throw_input("{}: '{}' holds a value that is not a number: {}", where, key, v.dump());
    out.push_back(v.get<double>());
  }
  return out;
}

// The final line's memory_report entries.
std::vector<RankMemory> parse_memory_report(const json& report, const std::string& where) {
  if (!report.is_array() || report.empty()) throw_input("{}: 'memory_report' is not a non-empty array", where);
  std::vector<RankMemory> out;
  for (size_t i = 0; i < report.size(); ++i) {
    const std::string w = fmt::format("{}: memory_report[{}]", where, i);
    const json& e = report[i];
    RankMemory m;
    m.rank = static_cast<int>(integer(e, "rank", w));
    m.stage = static_cast<int>(integer(e, "stage", w));
    m.tp_rank = static_cast<int>(integer(e, "tp_rank", w));
    m.dp_rank = static_cast<int>(integer(e, "dp_rank", w));
    const json& meas = object(e, "measured", w);
    const json& pred = object(e, "predicted", w);
    for (size_t k = 0; k < kMemCategories.size(); ++k) {
      m.measured[k] = number(meas, kMemCategories[k], w + ".measured");
      m.predicted[k] = number(pred, kMemCategories[k], w + ".predicted");
    }
    out.push_back(m);
  }
  return out;
}

std::optional<StepTimeReport> parse_step_time(const json& line, const std::string& where) {
  if (!line.contains("step_time_report")) return std::nullopt;
  const json& st = object(line, "step_time_report", where);
  const std::string w = where + ": step_time_report";
  StepTimeReport r{text(st, "system", w), number(st, "measured_s", w), number(st, "predicted_s", w)};
  if (r.measured_s <= 0 || r.predicted_s <= 0) {
    throw_input("{}: step times must be positive (measured {} s, predicted {} s)", w, r.measured_s, r.predicted_s);
  }
  return r;
}

PipelineStep parse_pipeline(const json& p, const std::string& where, PipelineSummary& shape) {
  const std::string w = where + ": pipeline";
  shape.schedule = text(p, "schedule", w);
  shape.stages = static_cast<int>(integer(p, "stages", w));
  shape.virtual_stages = static_cast<int>(integer(p, "virtual_stages", w));
  shape.micro_batches = static_cast<int>(integer(p, "micro_batches", w));
  if (shape.stages < 1) throw_input("{}: 'stages' is {}, expected at least 1", w, shape.stages);
  const size_t n = static_cast<size_t>(shape.stages);
  return {numbers(p, "busy_ms", w, n), numbers(p, "p2p_wait_ms", w, n), numbers(p, "idle_ms", w, n),
          number(p, "bubble_fraction", w), number(p, "bubble_predicted", w)};
}

// Per-stage means of the steps after the first (its times hold one-time costs), or of the
// only step.
PipelineSummary average_pipeline(PipelineSummary shape, const std::vector<PipelineStep>& steps) {
  const size_t first = steps.size() > 1 ? 1 : 0;
  const size_t n = static_cast<size_t>(shape.stages);
  shape.busy_ms.assign(n, 0.0);
  shape.wait_ms.assign(n, 0.0);
  shape.idle_ms.assign(n, 0.0);
  for (size_t i = first; i < steps.size(); ++i) {
    for (size_t s = 0; s < n; ++s) {
      shape.busy_ms[s] += steps[i].busy_ms[s];
      shape.wait_ms[s] += steps[i].wait_ms[s];
      shape.idle_ms[s] += steps[i].idle_ms[s];
    }
    shape.bubble_fraction += steps[i].bubble_fraction;
  }
  const double k = static_cast<double>(steps.size() - first);
  for (size_t s = 0; s < n; ++s) shape.busy_ms[s] /= k, shape.wait_ms[s] /= k, shape.idle_ms[s] /= k;
  shape.bubble_fraction /= k;
  shape.bubble_predicted = steps.back().bubble_predicted;
  shape.steps_averaged = static_cast<int>(steps.size() - first);
  return shape;
}

// What read_metrics collects line by line.
struct MetricsState {
  bool final_seen = false;
  PipelineSummary pipe_shape;
  std::vector<PipelineStep> pipe_steps;
};

// A tasks line: {"step", "tokens", "tasks": [{"task", "items", "fewshot", "acc"[, "acc_norm"]}, ...]};
// accuracies lie in [0, 1].
void read_tasks_line(const json& j, int64_t step, const std::string& where, Run& run) {
  const json& list = j["tasks"];
  if (!list.is_array() || list.empty()) throw_input("{}: 'tasks' must be a non-empty array of task scores", where);
  const int64_t tokens = integer(j, "tokens", where);
  for (const json& t : list) {
    if (!t.is_object() || !t.contains("task") || !t["task"].is_string()) {
      throw_input("{}: each entry of 'tasks' must be an object with a 'task' name", where);
    }
    TaskPoint p{step, tokens, t["task"].get<std::string>(), integer(t, "items", where),
                static_cast<int>(integer(t, "fewshot", where)), number(t, "acc", where), std::nullopt};
    if (t.contains("acc_norm")) p.acc_norm = number(t, "acc_norm", where);
    for (double a : {p.acc, p.acc_norm.value_or(0.0)}) {
      if (!(a >= 0.0 && a <= 1.0)) throw_input("{}: task '{}' has accuracy {} outside [0, 1]", where, p.task, a);
    }
    if (p.items < 1) throw_input("{}: task '{}' scored {} items", where, p.task, p.items);
    run.tasks.push_back(std::move(p));
  }
}

void read_metrics_line(const json& j, const std::string& where, Run& run, MetricsState& st) {
  if (!j.is_object()) throw_input("{}: not a JSON object", where);
  const int64_t step = integer(j, "step", where);
  if (j.contains("memory_report")) {  // the final report (the last one counts after a resume)
    run.memory = parse_memory_report(j["memory_report"], where);
    run.step_time = parse_step_time(j, where);
    st.final_seen = true;
  } else if (j.contains("tasks")) {
    read_tasks_line(j, step, where, run);
  } else if (j.contains("val_loss")) {
    run.vals.push_back({step, step * run.tokens_per_step(), number(j, "val_loss", where)});
  } else if (j.contains("loss")) {
    StepPoint p{step, integer(j, "tokens", where), number(j, "loss", where), number(j, "tokens_per_s", where),
                number(j, "ms", where)};
    if (j.contains("imbalance")) {
      p.imbalance = number(j, "imbalance", where);
      if (!(p.imbalance >= 1.0)) throw_input("{}: imbalance {} is below 1 (the busiest rank over the mean)", where, p.imbalance);
    }
    if (!run.steps.empty() && step <= run.steps.back().step) {
      throw_input("{}: step {} follows step {} (steps must increase)", where, step, run.steps.back().step);
    }
    run.steps.push_back(p);
    if (j.contains("pipeline")) st.pipe_steps.push_back(parse_pipeline(j["pipeline"], where, st.pipe_shape));
  } else {
    throw_input("{}: neither a step line (loss), a validation line (val_loss), a tasks line (tasks) nor the final report "
                "(memory_report)", where);
  }
}

}  // namespace

void read_metrics(const std::string& path, Run& run) {
  MetricsState st;
  // Streamed: a line of weft's is under a kilobyte per rank; a damaged file (NUL bytes, one
  // endless line) is refused at its first bad line, whatever its size.
  for_each_file_line(path, kMaxMetricsLine, [&](std::string_view line, int64_t no) {
    const std::string where = fmt::format("{}:{}", path, no);
    json j;
    try {
      j = json::parse(line);
    } catch (const json::exception& e) {  // parse errors, and numbers out of range (1e999)
      throw_input("{}: not valid JSON (truncated or corrupt line?): {}", where, e.what());
    }
    read_metrics_line(j, where, run, st);
  });
  if (run.steps.empty()) throw_input("{}: no step lines (the run trained no step)", path);
  if (!st.final_seen) {
    throw_input("{}: no final report line (memory_report) after step {}: the run did not finish", path,
                run.steps.back().step);
  }
  if (!st.pipe_steps.empty()) run.pipeline = average_pipeline(st.pipe_shape, st.pipe_steps);
}

namespace {

CommRow parse_comm_row(const json& r, const std::string& w) {
  CommRow c;
  c.op = text(r, "op", w);
  c.axis = text(r, "axis", w);
  c.level = text(r, "level", w);
  c.group_size = static_cast<int>(integer(r, "group_size", w));
  c.bytes = integer(r, "bytes", w);
  c.count = integer(r, "count", w);
  c.total_bytes = integer(r, "total_bytes", w);
  c.wire_total_bytes = r.contains("wire_total_bytes") ? integer(r, "wire_total_bytes", w) : c.total_bytes;
  c.time_s = number(r, "time_s", w);
  c.mean_latency_s = number(r, "mean_latency_s", w);
  c.trimmed_mean_latency_s = number(r, "trimmed_mean_latency_s", w);
  c.algbw_gbps = number(r, "algbw_gbps", w);
  c.busbw_gbps = number(r, "busbw_gbps", w);
  c.model_count = optional_integer(r, "model_count", w);
  c.model_total_bytes = optional_integer(r, "model_total_bytes", w);
  if (r.contains("straggler_s") && r["straggler_s"].is_null()) {
    c.straggler_applicable = false;
    return c;
  }
  const json& s = object(r, "straggler_s", w);
  c.straggler_applicable = !s.contains("applicable") || s["applicable"] != false;
  c.straggler_max_s = number(s, "max", w + ".straggler_s");
  c.straggler_mean_s = number(s, "mean", w + ".straggler_s");
  c.straggler_worst_rank = static_cast<int>(integer(s, "worst_rank", w + ".straggler_s"));
  return c;
}

CommAxisLevel parse_axis_level(const json& e, const std::string& w) {
  const int64_t bytes = integer(e, "bytes", w);
  return {text(e, "axis", w), text(e, "level", w), integer(e, "calls", w), bytes, optional_integer(e, "model_bytes", w),
          e.contains("wire_bytes") ? integer(e, "wire_bytes", w) : bytes};
}

std::vector<std::string> strings(const json& j, const char* key, const std::string& where) {
  std::vector<std::string> out;
  for (const json& v : array(j, key, where)) {
    if (!v.is_string()) throw_input("{}: '{}' holds a value that is not a string: {}", where, key, v.dump());
    out.push_back(v.get<std::string>());
  }
  return out;
}

CommCompression parse_compression(const json& e, const std::string& w) {
  CommCompression c;
  c.op = text(e, "op", w);
  c.axis = text(e, "axis", w);
  c.calls = integer(e, "calls", w);
  c.compressed_calls = integer(e, "compressed_calls", w);
  c.raw_bytes = integer(e, "raw_bytes", w);
  c.wire_bytes = integer(e, "wire_bytes", w);
  c.codecs = strings(e, "codecs", w);
  c.ratio = number(e, "ratio", w);
  c.codec_s = number(e, "codec_s", w);
  const json& err = object(e, "rel_err", w);
  c.rel_err_measured = integer(err, "measured", w + ".rel_err");
  c.rel_err_mean = number(err, "mean", w + ".rel_err");
  c.rel_err_max = number(err, "max", w + ".rel_err");
  return c;
}

}  // namespace

CommReport read_comm_report(const std::string& path) {
  json j;
  try {
    j = json::parse(read_text_file(path, kMaxCommReport));
  } catch (const json::exception& e) {  // parse errors, and numbers out of range (1e999)
    throw_input("{}: not valid JSON (truncated or corrupt?): {}", path, e.what());
  }
  // Version 2 adds the `levels` section (not read here); version 3 the wire bytes of compressed
  // calls and the `compression` section; everything else read is as in version 1.
  const int64_t v = integer(j, "version", path);
  if (v < 1 || v > 3) throw_input("{}: version {}, this weft reads versions 1 to 3", path, v);
  CommReport c;
  c.version = static_cast<int>(v);
  c.world = static_cast<int>(integer(j, "world", path));
  c.ranks_per_node = static_cast<int>(integer(j, "ranks_per_node", path));
  c.node_source = text(j, "node_source", path);
  c.steps = static_cast<int>(integer(j, "steps", path));
  c.model = text(j, "model", path);
  const json& rows = array(j, "rows", path);
  for (size_t i = 0; i < rows.size(); ++i) {
    c.rows.push_back(parse_comm_row(rows[i], fmt::format("{}: rows[{}]", path, i)));
  }
  const json& levels = array(j, "by_axis_level", path);
  for (size_t i = 0; i < levels.size(); ++i) {
    c.by_axis_level.push_back(parse_axis_level(levels[i], fmt::format("{}: by_axis_level[{}]", path, i)));
  }
  if (v >= 3) {
    const json& comp = array(object(j, "compression", path), "by_op_axis", path + ": compression");
    for (size_t i = 0; i < comp.size(); ++i) {
      c.compression.push_back(parse_compression(comp[i], fmt::format("{}: compression.by_op_axis[{}]", path, i)));
    }
  }
  c.mismatches = integer(j, "mismatches", path);
  return c;
}

bool CommReport::compressed() const {
  return std::any_of(compression.begin(), compression.end(),
                     [](const CommCompression& e) { return e.compressed_calls > 0; });
}

namespace {

// trace-rank<R>.jsonl files in `dir`.
int count_trace_files(const std::string& dir) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("trace-rank", 0) == 0 && e.path().extension() == ".jsonl") ++n;
  }
  return n;
}

// The files a report needs: InputError naming the first one missing.
void check_run_files(const std::string& dir, int trace_files) {
  if (!fs::is_directory(dir)) throw_input("{}: not a run folder (no such directory)", dir);
  for (const char* f : {"metrics.jsonl", "config.toml"}) {
    if (!fs::is_regular_file(fs::path(dir) / f)) {
      throw_input(
          "{}: not a run folder (no {}; `weft train` writes metrics.jsonl and config.toml into its --out folder)", dir,
          f);
    }
  }
  if (trace_files == 0) {
    throw_input("{}: the run has no trace (no trace-rank*.jsonl): weft report needs a run trained with --trace true",
                dir);
  }
  if (!fs::is_regular_file(fs::path(dir) / "comm_report.json")) {
    throw_input(
        "{}: no comm_report.json (a traced run writes it when it ends: the run did not finish, or an older weft ran "
        "it)",
        dir);
  }
}

}  // namespace

Run read_run(const std::string& dir) {
  Run run;
  run.dir = dir;
  run.label = dir;
  run.trace_files = fs::is_directory(dir) ? count_trace_files(dir) : 0;
  check_run_files(dir, run.trace_files);
  run.config = load_run_config((fs::path(dir) / "config.toml").string(), {});
  read_metrics((fs::path(dir) / "metrics.jsonl").string(), run);
  run.comm = read_comm_report((fs::path(dir) / "comm_report.json").string());
  return run;
}

}  // namespace weft::report
