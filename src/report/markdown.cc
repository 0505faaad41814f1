#include "report/markdown.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "comm/tracer.h"

namespace weft::report {

namespace {

using Rows = std::vector<std::vector<std::string>>;

std::string table(const std::vector<std::string>& header, const Rows& rows) {
  auto line = [](const std::vector<std::string>& cells) {
    std::string s = "|";
    for (const std::string& c : cells) s += " " + c + " |";
    return s + "\n";
  };
  std::string s = line(header) + "|";
  for (size_t i = 0; i < header.size(); ++i) s += i == 0 ? "---|" : "---:|";
  s += "\n";
  for (const auto& r : rows) s += line(r);
  return s + "\n";
}

std::string mib(double bytes) { return fmt::format("{:.2f}", bytes / 1048576.0); }

std::string image(const std::string& file, const std::string& alt) {
  return file.empty() ? std::string() : fmt::format("![{}]({})\n\n", alt, file);
}

// A row with the label and one cell per run.
template <typename F>
std::vector<std::string> per_run(const std::string& label, const std::vector<const Run*>& runs, F cell) {
  std::vector<std::string> row = {label};
  for (const Run* r : runs) row.push_back(cell(*r));
  return row;
}

std::vector<std::string> run_header(const std::vector<const Run*>& runs, const std::string& first) {
  std::vector<std::string> h = {first};
  for (const Run* r : runs) h.push_back(r->label);
  return h;
}

int64_t dp_of(const Run& r) {
  const RunConfig& c = r.config;
  return c.dp > 0 ? c.dp : std::max<int64_t>(1, r.comm.world / std::max<int64_t>(1, c.tp * c.pp));
}

std::string runs_section(const std::vector<const Run*>& runs) {
  Rows rows;
  rows.push_back(per_run("folder", runs, [](const Run& r) { return "`" + r.dir + "`"; }));
  rows.push_back(per_run("model", runs, [](const Run& r) {
    const ModelConfig m = r.config.model_config();
    return fmt::format("{} (L {}, NH {}, C {}, context {})", m.name, m.n_layer, m.n_head, m.n_embd, m.n_ctx);
  }));
  rows.push_back(per_run("layout", runs, [](const Run& r) {
    const RunConfig& c = r.config;
    return fmt::format("tp {} x pp {} x dp {}, zero {}{}{}", c.tp, c.pp, dp_of(r), c.zero,
                       c.sequence_parallel && c.tp > 1 ? ", sp" : "",
                       c.pp > 1 ? fmt::format(", {} (v {})", c.schedule, c.virtual_stages) : "");
  }));
  rows.push_back(per_run("ranks (trace files)", runs,
                         [](const Run& r) { return fmt::format("{} ({})", r.comm.world, r.trace_files); }));
  rows.push_back(per_run("batch", runs, [](const Run& r) {
    return fmt::format("{} x {} tokens, micro-batch {}", r.config.global_batch, r.config.seq(), r.config.micro_batch);
  }));
  rows.push_back(per_run("steps, tokens trained", runs, [](const Run& r) {
    return fmt::format("{}, {}", r.steps.back().step, r.steps.back().tokens);
  }));
  rows.push_back(per_run("precision, backend", runs,
                         [](const Run& r) { return fmt::format("{}, {}", r.config.precision, r.config.backend); }));
  return "## Runs\n\n" + table(run_header(runs, ""), rows);
}

std::string num(double v, const char* f = "{:.4f}") { return fmt::format(fmt::runtime(f), v); }

std::string loss_section(const std::vector<const Run*>& runs, const std::vector<RunNumbers>& n,
                         const PlotFiles& plots) {
  std::string s = "## Loss\n\n" + image(plots.loss, "training and validation loss against tokens");
  Rows rows;
  std::vector<std::string> train = {"final training loss"}, val = {"final validation loss"};
  for (const RunNumbers& x : n) {
    train.push_back(fmt::format("{:.4f} (step {})", x.final_loss, x.final_step));
    val.push_back(x.final_val_loss < 0 ? "-" : num(x.final_val_loss));
  }
  s += table(run_header(runs, ""), {train, val});
  if (runs.size() == 2) {
    s += fmt::format("{} against {}: final training loss {:+.4f}", runs[1]->label, runs[0]->label,
                     n[1].final_loss - n[0].final_loss);
    if (n[0].final_val_loss >= 0 && n[1].final_val_loss >= 0) {
      s += fmt::format(", final validation loss {:+.4f}", n[1].final_val_loss - n[0].final_val_loss);
    }
    s += ".\n\n";
  }
  return s;
}

// [eval] tasks: the plot, and per task the first and last scores of each run.
std::string tasks_section(const std::vector<const Run*>& runs, const PlotFiles& plots) {
  if (plots.tasks.empty()) return "";
  std::string s = "## In-context-learning tasks\n\n" + image(plots.tasks, "task accuracy against tokens trained");
  s += "From the tasks lines of `metrics.jsonl` (`[eval] tasks`): multiple-choice accuracy by the log-likelihood of "
       "each continuation (acc) and per character (acc_norm), as lm-evaluation-harness scores them.\n\n";
  Rows rows;
  for (const Run* r : runs) {
    std::vector<std::string> names;
    for (const TaskPoint& p : r->tasks) {
      if (std::find(names.begin(), names.end(), p.task) == names.end()) names.push_back(p.task);
    }
    for (const std::string& name : names) {
      const TaskPoint *first = nullptr, *last = nullptr;
      for (const TaskPoint& p : r->tasks) {
        if (p.task != name) continue;
        if (!first) first = &p;
        last = &p;
      }
      const auto score = [](const TaskPoint& p) {
        return p.acc_norm ? fmt::format("{:.4f} / {:.4f}", p.acc, *p.acc_norm) : fmt::format("{:.4f}", p.acc);
      };
      std::vector<std::string> row;
      if (runs.size() > 1) row.push_back(r->label);
      row.insert(row.end(), {name, fmt::format("{} ({}-shot)", last->items, last->fewshot),
                             fmt::format("{}: {}", first->step, score(*first)), fmt::format("{}: {}", last->step, score(*last))});
      rows.push_back(row);
    }
  }
  std::vector<std::string> header = {"task", "items", "first (step: acc / acc_norm)", "last (step: acc / acc_norm)"};
  if (runs.size() > 1) header.insert(header.begin(), "run");
  return s + table(header, rows);
}

std::string throughput_section(const std::vector<const Run*>& runs, const std::vector<RunNumbers>& n,
                               const PlotFiles& plots) {
  std::string s = "## Throughput\n\n" + image(plots.throughput, "tokens/s and step time against the planner");
  Rows rows(5);
  rows[0] = {"mean tokens/s"};
  rows[1] = {"mean step time, measured (ms)"};
  rows[2] = {"step time, planner's prediction (ms)"};
  rows[3] = {"prediction error (predicted - measured) / measured"};
  rows[4] = {"system file"};
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto& st = runs[i]->step_time;
    rows[0].push_back(fmt::format("{:.0f}", n[i].mean_tokens_per_s));
    rows[1].push_back(fmt::format("{:.1f} (mean of {} steps)", n[i].mean_step_ms, n[i].timed_steps));
    rows[2].push_back(st ? fmt::format("{:.1f}", st->predicted_s * 1e3) : "- (no system file)");
    rows[3].push_back(
        st ? fmt::format("{:+.1f}% (against the trainer's {:.1f} ms)", n[i].step_error_pct, st->measured_s * 1e3)
           : "-");
    rows[4].push_back(st ? "`" + st->system + "`" : "-");
  }
  // Load balance over the data-parallel ranks (StepPoint::imbalance), where recorded.
  bool any_imbalance = false;
  std::vector<std::string> imb{"data-parallel imbalance: busiest rank / mean busy time (mean, worst step)"};
  for (const Run* r : runs) {
    double sum = 0.0, worst = 0.0;
    int64_t n_steps = 0;
    for (size_t k = r->steps.size() > 1 ? 1 : 0; k < r->steps.size(); ++k) {
      if (r->steps[k].imbalance <= 0.0) continue;
      sum += r->steps[k].imbalance, worst = std::max(worst, r->steps[k].imbalance), ++n_steps;
    }
    any_imbalance |= n_steps > 0;
    imb.push_back(n_steps > 0 ? fmt::format("{:.3f}, {:.3f}", sum / static_cast<double>(n_steps), worst) : "-");
  }
  if (any_imbalance) rows.push_back(imb);
  s += table(run_header(runs, ""), rows);
  s += "Means leave out the first step (it holds one-time costs: page faults, BLAS buffers) when there is more than "
       "one.\n\n";
  if (runs.size() == 2 && n[0].mean_tokens_per_s > 0) {
    s += fmt::format("{} against {}: {:.2f}x the tokens/s.\n\n", runs[1]->label, runs[0]->label,
                     n[1].mean_tokens_per_s / n[0].mean_tokens_per_s);
  }
  return s;
}

// Per category the largest value over the ranks, predicted and measured (MiB).
std::string memory_peaks_table(const Run& run) {
  Rows rows;
  for (size_t k = 0; k < kMemCategories.size(); ++k) {
    double p = 0, m = 0;
    for (const RankMemory& r : run.memory) p = std::max(p, r.predicted[k]), m = std::max(m, r.measured[k]);
    rows.push_back({kMemCategories[k], mib(p), mib(m), error_pct(p, m)});
  }
  return table({"category (largest rank)", "predicted (MiB)", "measured (MiB)", "error"}, rows);
}

std::string memory_ranks_table(const Run& run) {
  Rows rows;
  for (const RankMemory& r : run.memory) {
    rows.push_back({std::to_string(r.rank), std::to_string(r.stage), std::to_string(r.tp_rank),
                    std::to_string(r.dp_rank), mib(r.predicted[kMemTotal]), mib(r.measured[kMemTotal]),
                    error_pct(r.predicted[kMemTotal], r.measured[kMemTotal])});
  }
  return table({"rank", "stage", "tp rank", "dp rank", "total predicted (MiB)", "total peak measured (MiB)", "error"},
               rows);
}

std::string memory_section(const std::vector<const Run*>& runs, const PlotFiles& plots) {
  std::string s = "## Memory\n\n" + image(plots.memory, "memory by category per rank, predicted and measured");
  s += "Peak bytes of the training steps by category (measured by weft's memory tracker) beside the planner's "
       "closed-form prediction; `total` is the peak of their sum. Error = (predicted - measured) / measured.\n\n";
  for (const Run* r : runs) {
    if (runs.size() > 1) s += "### " + r->label + "\n\n";
    s += memory_peaks_table(*r) + memory_ranks_table(*r);
  }
  return s;
}

std::string pipeline_table(const PipelineSummary& p) {
  Rows rows;
  for (int st = 0; st < p.stages; ++st) {
    const double span = p.busy_ms[st] + p.idle_ms[st];
    rows.push_back({std::to_string(st), fmt::format("{:.2f}", p.busy_ms[st]), fmt::format("{:.2f}", p.wait_ms[st]),
                    fmt::format("{:.2f}", p.idle_ms[st]),
                    span > 0 ? fmt::format("{:.1f}%", 100.0 * p.idle_ms[st] / span) : "-"});
  }
  return table({"stage", "busy (ms)", "p2p wait (ms)", "idle (ms)", "idle share"}, rows);
}

std::string pipeline_section(const std::vector<const Run*>& runs, const PlotFiles& plots) {
  std::string s = "## Pipeline\n\n" + image(plots.pipeline, "busy, p2p wait and idle time per pipeline stage");
  for (const Run* r : runs) {
    if (runs.size() > 1) s += "### " + r->label + "\n\n";
    if (!r->pipeline) {
      s += fmt::format("pp = {}: no pipeline.\n\n", r->config.pp);
      continue;
    }
    const PipelineSummary& p = *r->pipeline;
    s += fmt::format(
        "Schedule {}, {} stages, {} virtual stage(s), {} micro-batches; mean per step over {} step(s) "
        "(idle = the stage's span - busy; it includes the p2p wait). "
        "Bubble measured (p x longest span - sum busy) / sum busy = {:.3f}, predicted (p-1)/(v m) = {:.3f}.\n\n",
        p.schedule, p.stages, p.virtual_stages, p.micro_batches, p.steps_averaged, p.bubble_fraction,
        p.bubble_predicted);
    s += pipeline_table(p);
  }
  return s;
}

// The share of calls (and of bytes) in messages under 64 KiB: the small, latency-bound ones.
std::string small_messages(const CommReport& c) {
  int64_t calls = 0, small_calls = 0, bytes = 0, small_bytes = 0;
  for (const CommRow& r : c.rows) {
    calls += r.count;
    bytes += r.total_bytes;
    if (r.bytes < 65536) small_calls += r.count, small_bytes += r.total_bytes;
  }
  if (calls == 0) return "No calls.";
  return fmt::format("{} calls, {:.1f}% of them under 64 KiB, carrying {:.2f}% of the bytes.", calls,
                     100.0 * small_calls / calls, bytes > 0 ? 100.0 * small_bytes / bytes : 0.0);
}

std::string model_cell(const std::optional<int64_t>& v) { return v ? std::to_string(*v) : "-"; }

std::string comm_rows_table(const CommReport& c) {
  Rows rows;
  for (const CommRow& r : c.rows) {
    const bool match =
        r.model_count && r.model_total_bytes && *r.model_count == r.count && *r.model_total_bytes == r.total_bytes;
    rows.push_back({r.op, r.axis, r.level, std::to_string(r.group_size), format_bytes(r.bytes), std::to_string(r.count),
                    std::to_string(r.total_bytes), model_cell(r.model_count), model_cell(r.model_total_bytes),
                    r.model_count ? (match ? "yes" : "**no**") : "-", fmt::format("{:.4f}", r.time_s),
                    fmt::format("{:.3f}", r.mean_latency_s * 1e3),
                    fmt::format("{:.3f}", r.trimmed_mean_latency_s * 1e3), fmt::format("{:.3f}", r.algbw_gbps),
                    fmt::format("{:.3f}", r.busbw_gbps),
                    r.straggler_applicable ? fmt::format("{:.3f}", r.straggler_max_s * 1e3) : "-",
                    r.straggler_applicable ? std::to_string(r.straggler_worst_rank) : "-"});
  }
  return table({"op", "axis", "level", "group", "bytes/call", "calls", "total bytes", "model calls", "model bytes",
                "match", "time (s)", "mean latency (ms)", "trimmed mean (ms)", "algbw (GB/s)", "busbw (GB/s)",
                "straggler max (ms)", "worst rank"},
               rows);
}

// Bytes per (axis, level), a column per run.
std::string comm_axes_table(const std::vector<const Run*>& runs) {
  std::map<std::pair<std::string, std::string>, std::vector<std::string>> cells;
  for (size_t i = 0; i < runs.size(); ++i) {
    for (const CommAxisLevel& e : runs[i]->comm.by_axis_level) {
      auto& row = cells[{e.axis, e.level}];
      row.resize(runs.size(), "-");
      row[i] = fmt::format("{} calls, {} bytes ({}){}, model {}", e.calls, e.bytes, format_bytes(e.bytes),
                           e.wire_bytes != e.bytes ? fmt::format(", wire {} ({})", e.wire_bytes, format_bytes(e.wire_bytes))
                                                   : std::string(),
                           e.model_bytes ? std::to_string(*e.model_bytes) : "-");
    }
  }
  Rows rows;
  for (auto& [key, v] : cells) {
    v.resize(runs.size(), "-");
    std::vector<std::string> row = {key.first, key.second};
    row.insert(row.end(), v.begin(), v.end());
    rows.push_back(row);
  }
  std::vector<std::string> header = {"axis", "level"};
  for (const Run* r : runs) header.push_back(r->label);
  return table(header, rows);
}

// "mean / max" of the payloads' relative RMS error, "-" where none measured one.
std::string rel_err_cell(const CommCompression& e) {
  if (e.rel_err_measured == 0) return "-";
  return fmt::format("{:.3g} / {:.3g}", e.rel_err_mean, e.rel_err_max);
}

std::string codec_cell(const std::vector<std::string>& codecs) {
  std::string out;
  for (const std::string& c : codecs) {
    if (!out.empty()) out += ", ";
    out += c;
  }
  return out.empty() ? "-" : out;
}

// Per run and (op, axis): what the codecs made of the training steps' calls.
std::string compression_table(const std::vector<const Run*>& runs) {
  Rows rows;
  for (const Run* r : runs) {
    for (const CommCompression& e : r->comm.compression) {
      std::vector<std::string> row;
      if (runs.size() > 1) row.push_back(r->label);
      for (std::string cell : {e.op, e.axis, codec_cell(e.codecs), std::to_string(e.raw_bytes),
                               std::to_string(e.wire_bytes), fmt::format("{:.3f}", e.ratio),
                               fmt::format("{:.4f}", e.codec_s), rel_err_cell(e)}) {
        row.push_back(std::move(cell));
      }
      rows.push_back(std::move(row));
    }
  }
  std::vector<std::string> header = {"op", "axis", "codec", "raw bytes", "wire bytes", "ratio (wire/raw)",
                                     "codec time (s)", "rel. RMS error mean / max"};
  if (runs.size() > 1) header.insert(header.begin(), "run");
  return table(header, rows);
}

// Raw and wire bytes of a run's training rows.
std::pair<int64_t, int64_t> raw_and_wire(const CommReport& c) {
  int64_t raw = 0, wire = 0;
  for (const CommRow& r : c.rows) raw += r.total_bytes, wire += r.wire_total_bytes;
  return {raw, wire};
}

double codec_seconds(const CommReport& c) {
  double s = 0;
  for (const CommCompression& e : c.compression) s += e.codec_s;
  return s;
}

// The runs' training traffic raw and on the wire; with two runs, B's against A's.
std::string wire_totals(const std::vector<const Run*>& runs) {
  std::string s;
  std::vector<std::pair<int64_t, int64_t>> totals;
  for (const Run* r : runs) {
    const auto [raw, wire] = raw_and_wire(r->comm);
    totals.emplace_back(raw, wire);
    s += fmt::format("{}: training calls carried {} raw, {} on the wire (ratio {:.3f}); {:.4f} s in the codecs.\n\n",
                     r->label, format_bytes(raw), format_bytes(wire),
                     raw > 0 ? static_cast<double>(wire) / static_cast<double>(raw) : 1.0, codec_seconds(r->comm));
  }
  if (runs.size() == 2 && totals[0].second > 0 && totals[0].first > 0) {
    s += fmt::format("{} against {}: {:.3f}x the wire bytes, {:.3f}x the raw bytes.\n\n", runs[1]->label,
                     runs[0]->label, static_cast<double>(totals[1].second) / static_cast<double>(totals[0].second),
                     static_cast<double>(totals[1].first) / static_cast<double>(totals[0].first));
  }
  return s;
}

// Shown when any run compressed a call.
std::string compression_section(const std::vector<const Run*>& runs) {
  if (std::none_of(runs.begin(), runs.end(), [](const Run* r) { return r->comm.compressed(); })) return "";
  std::string s = "### Compression\n\n";
  s += "From `comm_report.json`'s `compression` section: per (op, axis) the training steps' raw bytes (the logical "
       "calls, as the model counts them), the bytes the codecs put on the wire, their ratio, the seconds spent "
       "compressing and decompressing (per call the largest member's), and the relative RMS error ||x - D(C(x))|| / "
       "||x|| of the payloads that measured it.\n\n";
  return s + wire_totals(runs) + compression_table(runs);
}

std::string comm_section(const std::vector<const Run*>& runs, const PlotFiles& plots) {
  std::string s = "## Communication\n\n" + image(plots.comm, "bytes per axis and link level");
  s += "From `comm_report.json`: every collective of the job over the traced steps, counted once per group; "
       "bytes as the tracer counts them (the logical buffer; see docs/launching.md), beside the analytic model.\n\n";
  s += comm_axes_table(runs);
  for (const Run* r : runs) {
    const CommReport& c = r->comm;
    s += runs.size() > 1 ? "### " + r->label + "\n\n" : std::string();
    s += fmt::format(
        "World {} ranks, {} per node ({}); {} traced steps; {} row(s) differ from the analytic model. {}\n\n", c.world,
        c.ranks_per_node, c.node_source, c.steps, c.mismatches, small_messages(c));
    s += comm_rows_table(c);
  }
  return s + compression_section(runs);
}

}  // namespace

RunNumbers run_numbers(const Run& run) {
  RunNumbers n;
  n.final_loss = run.steps.back().loss;
  n.final_step = run.steps.back().step;
  if (!run.vals.empty()) n.final_val_loss = run.vals.back().val_loss;
  const size_t first = run.steps.size() > 1 ? 1 : 0;
  double ms = 0;
  for (size_t i = first; i < run.steps.size(); ++i) ms += run.steps[i].ms;
  n.timed_steps = static_cast<int>(run.steps.size() - first);
  n.mean_step_ms = ms / n.timed_steps;
  n.mean_tokens_per_s = ms > 0 ? static_cast<double>(run.tokens_per_step()) * n.timed_steps / (ms / 1e3) : 0.0;
  if (run.step_time) {
    n.step_error_pct = 100.0 * (run.step_time->predicted_s - run.step_time->measured_s) / run.step_time->measured_s;
  }
  return n;
}

std::string error_pct(double predicted, double measured) {
  if (measured == 0) return predicted == 0 ? "0.0%" : "-";
  return fmt::format("{:+.1f}%", 100.0 * (predicted - measured) / measured);
}

std::string report_markdown(const std::vector<const Run*>& runs, const PlotFiles& plots) {
  std::vector<RunNumbers> n;
  for (const Run* r : runs) n.push_back(run_numbers(*r));
  std::string s = runs.size() == 1
                      ? fmt::format("# weft run report: {}\n\n", runs[0]->label)
                      : fmt::format("# weft run comparison: {} (A) against {} (B)\n\n", runs[0]->label, runs[1]->label);
  s += runs_section(runs) + loss_section(runs, n, plots) + tasks_section(runs, plots) + throughput_section(runs, n, plots) +
       memory_section(runs, plots) + pipeline_section(runs, plots) + comm_section(runs, plots);
  return s;
}

}  // namespace weft::report
