#include "train/comm_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <map>
#include <numeric>
#include <tuple>

#include "core/error.h"
#include "model/recompute.h"
#include "parallel/pp/schedule.h"
#include "data/text_util.h"
#include "core/precision.h"

namespace fs = std::filesystem;

namespace weft {

double bus_factor(const std::string& op, int n) {
  if (n <= 1) return 0.0;
  const double nn = n;
  if (op == "all_reduce") return 2.0 * (nn - 1) / nn;
  if (op == "all_gather" || op == "reduce_scatter" || op == "all_to_all") return (nn - 1) / nn;
  return 1.0;
}

double trimmed_mean(std::vector<double> v, double cut) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t k = static_cast<size_t>(cut * static_cast<double>(v.size()));
  const double s = std::accumulate(v.begin() + static_cast<std::ptrdiff_t>(k), v.end() - static_cast<std::ptrdiff_t>(k), 0.0);
  return s / static_cast<double>(v.size() - 2 * k);
}

namespace {

bool is_p2p(const std::string& op) { return op == "send" || op == "recv"; }

// One call of the job: the events of its group's members (one for send/recv).
struct Call {
  std::string op, axis, phase;
  int64_t bytes = 0;
  int64_t step = 0;
  std::vector<int> ranks;                        // the group (send/recv: this rank, peer)
  std::vector<std::pair<int, double>> latencies;  // (world rank, duration)
};

// The world ranks of an event's group label ("ranks 0,2" or "peer 3").
std::vector<int> event_ranks(const TraceEvent& ev, int rank) {
  if (ev.group.rfind("peer ", 0) == 0) {
    const std::vector<int> peer = parse_ranks(ev.group.substr(5));
    if (peer.size() != 1) throw_input("trace of rank {}: '{}' names more than one peer", rank, ev.group);
    return {rank, peer.front()};
  }
  if (ev.group.rfind("ranks ", 0) == 0) return parse_ranks(ev.group.substr(6));
  throw_input("trace of rank {}: group '{}' of a {} on axis {} is neither 'ranks ...' nor 'peer N'", rank, ev.group,
              ev.kind, ev.axis);
}

bool in_range(const TraceEvent& ev, const CommReportInputs& in) {
  if (ev.phase == "train") return ev.step > in.first_step && ev.step <= in.last_step;
  return ev.step <= in.last_step && (ev.step > in.first_step || (in.first_step == 0 && ev.step == 0));
}

// A rank's events in the order they were posted (the file has them in completion order,
// which differs between ranks for asynchronous calls).
std::vector<const TraceEvent*> posting_order(const std::vector<TraceEvent>& events) {
  std::vector<const TraceEvent*> out;
  out.reserve(events.size());
  for (const TraceEvent& ev : events) out.push_back(&ev);
  std::stable_sort(out.begin(), out.end(), [](const TraceEvent* a, const TraceEvent* b) { return a->start_s < b->start_s; });
  return out;
}

// Collapses the ranks' events into calls: the k-th event posted by every member on one
// (axis, group) is the same collective (collectives on a communicator are posted in the same
// order by all its members).
std::vector<Call> collect_calls(const std::vector<std::vector<TraceEvent>>& per_rank, const CommReportInputs& in) {
  std::vector<Call> calls;
  std::map<std::tuple<std::string, std::string, int64_t>, size_t> index;  // (axis, group, k) -> call
  for (size_t r = 0; r < per_rank.size(); ++r) {
    std::map<std::pair<std::string, std::string>, int64_t> seen;
    for (const TraceEvent* e : posting_order(per_rank[r])) {
      const TraceEvent& ev = *e;
      const int rank = static_cast<int>(r);
      if (is_p2p(ev.kind)) {
        if (in_range(ev, in)) {
          calls.push_back({ev.kind, ev.axis, ev.phase, ev.bytes, ev.step, event_ranks(ev, rank), {{rank, ev.duration_s}}});
        }
        continue;
      }
      const int64_t k = seen[{ev.axis, ev.group}]++;
      if (!in_range(ev, in)) continue;
      auto [it, fresh] = index.try_emplace({ev.axis, ev.group, k}, calls.size());
      if (fresh) calls.push_back({ev.kind, ev.axis, ev.phase, ev.bytes, ev.step, event_ranks(ev, rank), {}});
      Call& c = calls[it->second];
      if (c.op != ev.kind || c.bytes != ev.bytes) {
        throw_runtime("trace: call {} on axis {} ({}) is a {} of {} bytes on one rank and a {} of {} bytes on rank {}", k,
                      ev.axis, ev.group, c.op, c.bytes, ev.kind, ev.bytes, rank);
      }
      c.latencies.emplace_back(rank, ev.duration_s);
    }
  }
  return calls;
}

using RowKey = std::tuple<std::string, std::string, std::string, std::string, int64_t>;  // phase, op, axis, level, bytes

struct Row {
  int group_size = 0;
  int64_t count = 0;
  std::vector<double> latency;          // per call: the slowest member's
  std::vector<double> straggle;         // per call and member: latency minus the fastest member's
  std::map<int, double> straggle_sum;   // per rank
  std::map<int, int64_t> fastest;       // per rank: calls where it was the fastest (arrived last)
  int64_t model_count = -1, model_bytes = -1;  // -1: no model entry
};

void add_call(Row& row, const Call& c) {
  row.group_size = static_cast<int>(c.ranks.size());
  if (is_p2p(c.op)) row.group_size = 2;
  ++row.count;
  double lo = c.latencies.front().second, hi = lo;
  int fastest = c.latencies.front().first;
  for (const auto& [r, d] : c.latencies) {
    hi = std::max(hi, d);
    if (d < lo) lo = d, fastest = r;
  }
  row.latency.push_back(hi);
  if (is_p2p(c.op) || c.latencies.size() < 2) return;
  ++row.fastest[fastest];
  for (const auto& [r, d] : c.latencies) {
    row.straggle.push_back(d - lo);
    row.straggle_sum[r] += d - lo;
  }
}

// The model's calls of the reported steps, by (op, axis, level, bytes).
std::map<RowKey, std::pair<int64_t, int64_t>> model_rows(const CommReportInputs& in) {
  std::map<RowKey, std::pair<int64_t, int64_t>> out;
  for (const CommStepContext& ctx : in.contexts) {
    for (const CommCall& c : model_step_comm(in.ec, ctx)) {
      auto& [n, b] = out[{"train", c.op, c.axis, link_level_name(in.nodes.level(c.ranks)), c.bytes}];
      n += c.count;
      b += c.count * c.bytes;
    }
  }
  return out;
}

// The straggler summary; for rows without one (send/recv, groups of one rank) an object of
// zeros with ranks -1 and "applicable": false, so that readers find the same fields.
nlohmann::json straggler_json(const Row& row) {
  if (row.straggle.empty()) {
    return {{"applicable", false}, {"max", 0.0}, {"mean", 0.0}, {"worst_rank", -1}, {"last_arrival_rank", -1}};
  }
  int worst = -1;
  double worst_sum = -1;
  for (const auto& [r, s] : row.straggle_sum) {
    if (s > worst_sum) worst_sum = s, worst = r;
  }
  int last = -1;
  int64_t most = -1;
  for (const auto& [r, n] : row.fastest) {
    if (n > most) most = n, last = r;
  }
  const double mx = *std::max_element(row.straggle.begin(), row.straggle.end());
  const double mean = std::accumulate(row.straggle.begin(), row.straggle.end(), 0.0) / static_cast<double>(row.straggle.size());
  return {{"applicable", true}, {"max", mx}, {"mean", mean}, {"worst_rank", worst}, {"last_arrival_rank", last}};
}

nlohmann::json row_json(const RowKey& k, const Row& row) {
  const auto& [phase, op, axis, level, bytes] = k;
  const double time = std::accumulate(row.latency.begin(), row.latency.end(), 0.0);
  const double total = static_cast<double>(bytes) * static_cast<double>(row.count);
  const double algbw = time > 0 ? total / time / 1e9 : 0.0;
  nlohmann::json j = {{"op", op}, {"axis", axis}, {"level", level}, {"group_size", row.group_size},
                      {"bytes", bytes}, {"count", row.count}, {"total_bytes", bytes * row.count},
                      {"time_s", time}, {"mean_latency_s", row.count > 0 ? time / static_cast<double>(row.count) : 0.0},
                      {"trimmed_mean_latency_s", trimmed_mean(row.latency)},
                      {"algbw_gbps", algbw}, {"busbw_gbps", algbw * bus_factor(op, row.group_size)},
                      {"straggler_s", straggler_json(row)}};
  if (phase != "train") {
    j["phase"] = phase;
    return j;
  }
  j["model_count"] = row.model_count >= 0 ? nlohmann::json(row.model_count) : nlohmann::json(nullptr);
  j["model_total_bytes"] = row.model_bytes >= 0 ? nlohmann::json(row.model_bytes) : nlohmann::json(nullptr);
  return j;
}

int log2_class(int64_t bytes) { return bytes <= 1 ? 0 : static_cast<int>(std::floor(std::log2(static_cast<double>(bytes)))); }

nlohmann::json layout_json(const EngineConfig& ec) {
  return {{"tp", ec.grid.tp}, {"pp", ec.grid.pp}, {"dp", ec.grid.dp}, {"sp", ec.sequence_parallel && ec.grid.tp > 1},
          {"zero", ec.data_parallel.zero}, {"schedule", schedule_name(ec.schedule)},
          {"micro_batches", ec.global_batch / ec.grid.dp / ec.micro_batch}, {"micro_batch", ec.micro_batch},
          {"seq", ec.seq}, {"global_batch", ec.global_batch},
          {"virtual_stages", ec.grid.pp > 1 ? ec.virtual_stages : 1}, {"recompute", recompute_name(ec.recompute)},
          {"precision", precision_name(ec.precision)}, {"order", ec.grid.order},
          {"bucket_bytes", ec.data_parallel.bucket_bytes}, {"prefetch", ec.data_parallel.prefetch}};
}

// The training rows beside the model; model entries without a traced row get a row of
// count 0. Returns the number of rows whose (count, total bytes) differ from the model.
int64_t attach_model(std::map<RowKey, Row>& rows, const CommReportInputs& in) {
  for (const auto& [k, mb] : model_rows(in)) {
    Row& r = rows[k];
    if (r.count == 0) r.group_size = 0;
    r.model_count = mb.first;
    r.model_bytes = mb.second;
  }
  int64_t mismatches = 0;
  for (auto& [k, r] : rows) {
    if (std::get<0>(k) != "train") continue;
    if (r.model_count < 0) r.model_count = 0, r.model_bytes = 0;  // the model says: no such call
    if (r.model_count != r.count || r.model_bytes != std::get<4>(k) * r.count) ++mismatches;
  }
  return mismatches;
}

// The `levels` section: per reported training step, the bytes crossing each level's domain
// boundaries, in total and per axis (collectives once per group, transfers once on their send).
nlohmann::json levels_json(const std::vector<Call>& calls, const CommReportInputs& in) {
  const LinkLevels levels = in.levels.levels() > 0 ? in.levels : LinkLevels::from_nodes(in.nodes);
  levels.validate();
  if (levels.world() != in.nodes.world()) {
    throw_input("comm report: the link levels cover {} ranks, the node map {}", levels.world(), in.nodes.world());
  }
  const size_t nl = static_cast<size_t>(levels.levels());
  using Bytes = std::vector<int64_t>;  // per level
  std::map<int64_t, std::pair<Bytes, std::map<std::string, Bytes>>> steps;  // step -> (total, per axis)
  for (int64_t s = in.first_step + 1; s <= in.last_step; ++s) steps[s].first.assign(nl, 0);
  std::map<std::string, Bytes> axis_total;
  Bytes total(nl, 0);
  for (const Call& c : calls) {
    if (c.phase != "train" || c.op == "recv") continue;
    auto& [step_total, step_axes] = steps[c.step];
    step_total.resize(nl, 0);
    Bytes& step_axis = step_axes[c.axis];
    Bytes& all_axis = axis_total[c.axis];
    step_axis.resize(nl, 0);
    all_axis.resize(nl, 0);
    for (size_t k = 0; k < nl; ++k) {
      const int64_t b = crossing_bytes(c.op, c.bytes, c.ranks, levels, static_cast<int>(k));
      step_total[k] += b, step_axis[k] += b, all_axis[k] += b, total[k] += b;
    }
  }
  auto by_name = [&](const Bytes& b) {
    nlohmann::json j = nlohmann::json::object();
    for (size_t k = 0; k < nl; ++k) j[levels.names[k]] = b[k];
    return j;
  };
  auto axes_json = [&](const std::map<std::string, Bytes>& axes) {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [axis, b] : axes) j[axis] = by_name(b);
    return j;
  };
  nlohmann::json domains = nlohmann::json::array(), per_domain = nlohmann::json::array(), per_step = nlohmann::json::array();
  for (size_t k = 0; k < nl; ++k) {
    domains.push_back(levels.domains(static_cast<int>(k)));
    per_domain.push_back(levels.ranks_per_domain(static_cast<int>(k)));
  }
  for (const auto& [step, st] : steps) {
    per_step.push_back({{"step", step}, {"bytes", by_name(st.first)}, {"by_axis", axes_json(st.second)}});
  }
  return {{"names", levels.names}, {"domains", domains}, {"ranks_per_domain", per_domain},
          {"counting", "training steps; bytes entering each domain of a level from outside, summed over domains "
                       "(node-aware algorithms, even blocks); a collective once per group, a transfer once (its send)"},
          {"steps", per_step}, {"total", {{"bytes", by_name(total)}, {"by_axis", axes_json(axis_total)}}}};
}

}  // namespace

nlohmann::json build_comm_report(const std::vector<std::vector<TraceEvent>>& per_rank, const CommReportInputs& in) {
  std::map<RowKey, Row> rows;
  const std::vector<Call> calls = collect_calls(per_rank, in);
  for (const Call& c : calls) {
    add_call(rows[{c.phase, c.op, c.axis, link_level_name(in.nodes.level(c.ranks)), c.bytes}], c);
  }
  const int64_t mismatches = attach_model(rows, in);
  nlohmann::json train = nlohmann::json::array(), other = nlohmann::json::array();
  std::map<std::tuple<std::string, std::string, int>, int64_t> hist;
  std::map<std::pair<std::string, std::string>, std::array<int64_t, 4>> by_axis;  // calls, bytes, model calls, model bytes
  for (const auto& [k, r] : rows) {
    const auto& [phase, op, axis, level, bytes] = k;
    if (phase != "train") {
      other.push_back(row_json(k, r));
      continue;
    }
    train.push_back(row_json(k, r));
    if (r.count > 0) hist[{op, axis, log2_class(bytes)}] += r.count;
    auto& a = by_axis[{axis, level}];
    a[0] += r.count, a[1] += r.count * bytes, a[2] += r.model_count, a[3] += r.model_bytes;
  }
  nlohmann::json h = nlohmann::json::array(), ax = nlohmann::json::array();
  for (const auto& [k, n] : hist) h.push_back({{"op", std::get<0>(k)}, {"axis", std::get<1>(k)}, {"log2_bytes", std::get<2>(k)}, {"count", n}});
  for (const auto& [k, a] : by_axis) {
    ax.push_back({{"axis", k.first}, {"level", k.second}, {"calls", a[0]}, {"bytes", a[1]}, {"model_calls", a[2]}, {"model_bytes", a[3]}});
  }
  return {{"version", 2}, {"world", in.nodes.world()}, {"ranks_per_node", in.nodes.ranks_per_node()},
          {"nodes", in.nodes.nodes()}, {"node_source", in.nodes.source},
          {"steps", in.last_step - in.first_step}, {"first_step", in.first_step + 1}, {"last_step", in.last_step},
          {"model", in.ec.model.name}, {"layout", layout_json(in.ec)},
          {"counting", "job-wide; a collective once per group (latency: its slowest member), each send and receive once"},
          {"rows", train}, {"histogram", h}, {"by_axis_level", ax}, {"levels", levels_json(calls, in)},
          {"other_phases", other}, {"mismatches", mismatches}};
}

namespace {

// The `levels` section as a short table: bytes crossing each level, per axis and in all,
// summed over the reported steps and per step on average.
std::string format_levels(const nlohmann::json& lv, int64_t steps) {
  const std::vector<std::string> names = lv["names"].get<std::vector<std::string>>();
  std::string out = "bytes crossing link levels (node-aware algorithms; per level: into its domains from outside):\n";
  out += fmt::format("  {:<13}", "axis");
  for (const std::string& n : names) out += fmt::format(" {:>12} {:>12}", n, n + "/step");
  out += "\n";
  auto line = [&](const std::string& label, const nlohmann::json& bytes) {
    std::string l = fmt::format("  {:<13}", label);
    for (const std::string& n : names) {
      const int64_t b = bytes[n].get<int64_t>();
      l += fmt::format(" {:>12} {:>12}", format_bytes(b), format_bytes(steps > 0 ? b / steps : 0));
    }
    return l + "\n";
  };
  for (const auto& el : lv["total"]["by_axis"].items()) out += line(el.key(), el.value());
  out += line("all", lv["total"]["bytes"]);
  return out;
}

}  // namespace

std::string format_comm_report(const nlohmann::json& rep) {
  std::string out = fmt::format("communication of {} training steps (steps {}-{}), world {} on {} node(s) ({}), model {}\n",
                                rep["steps"].get<int64_t>(), rep["first_step"].get<int64_t>(), rep["last_step"].get<int64_t>(),
                                rep["world"].get<int>(), rep["nodes"].get<int>(), rep["node_source"].get<std::string>(),
                                rep["model"].get<std::string>());
  out += fmt::format("layout {}\n", rep["layout"].dump());
  out += fmt::format("{:<15} {:<13} {:<10} {:>4} {:>10} {:>7} {:>10} {:>10} {:>10} {:>8} {:>8} {:>7} {:>10} {:>10}\n", "op",
                     "axis", "level", "n", "bytes", "count", "total", "time_ms", "trim_us", "algbw", "busbw", "model",
                     "model_total", "straggle_us");
  for (const auto& r : rep["rows"]) {
    const bool ok = r["model_count"] == r["count"] && r["model_total_bytes"] == r["total_bytes"];
    out += fmt::format("{:<15} {:<13} {:<10} {:>4} {:>10} {:>7} {:>10} {:>10.3f} {:>10.1f} {:>8.3f} {:>8.3f} {:>7} {:>10}{} {:>10}\n",
                       r["op"].get<std::string>(), r["axis"].get<std::string>(), r["level"].get<std::string>(),
                       r["group_size"].get<int>(), r["bytes"].get<int64_t>(), r["count"].get<int64_t>(),
                       format_bytes(r["total_bytes"].get<int64_t>()), r["time_s"].get<double>() * 1e3,
                       r["trimmed_mean_latency_s"].get<double>() * 1e6, r["algbw_gbps"].get<double>(),
                       r["busbw_gbps"].get<double>(), r["model_count"].dump(),
                       r["model_total_bytes"].is_null() ? std::string("-") : format_bytes(r["model_total_bytes"].get<int64_t>()),
                       ok ? " " : "*",
                       !r["straggler_s"]["applicable"].get<bool>() ? std::string("-") : fmt::format("{:.1f}", r["straggler_s"]["max"].get<double>() * 1e6));
  }
  out += "by axis and level:\n";
  for (const auto& a : rep["by_axis_level"]) {
    out += fmt::format("  {:<13} {:<10} {:>8} calls {:>10} (model {:>8} calls {:>10})\n", a["axis"].get<std::string>(),
                       a["level"].get<std::string>(), a["calls"].get<int64_t>(), format_bytes(a["bytes"].get<int64_t>()),
                       a["model_calls"].get<int64_t>(), format_bytes(a["model_bytes"].get<int64_t>()));
  }
  if (rep.contains("levels")) out += format_levels(rep["levels"], rep["steps"].get<int64_t>());
  out += fmt::format("rows differing from the model (marked *): {}\n", rep["mismatches"].get<int64_t>());
  return out;
}

nlohmann::json write_comm_report(const std::string& run_dir, const CommReportInputs& in) {
  std::vector<std::vector<TraceEvent>> per_rank;
  for (int r = 0; r < in.nodes.world(); ++r) {
    per_rank.push_back(read_trace_jsonl((fs::path(run_dir) / fmt::format("trace-rank{}.jsonl", r)).string()));
  }
  const nlohmann::json rep = build_comm_report(per_rank, in);
  write_file_atomic((fs::path(run_dir) / "comm_report.json").string(), rep.dump(1) + "\n");
  write_file_atomic((fs::path(run_dir) / "comm_report.txt").string(), format_comm_report(rep));
  return rep;
}

}  // namespace weft
