#include "train/comm_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

#include "core/error.h"
#include "parallel/recompute.h"
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
  int64_t bytes = 0;  // raw: the tracer's convention, the same on every member
  int64_t step = 0;
  std::vector<int> ranks;                        // the group (send/recv: this rank, peer)
  std::vector<std::pair<int, double>> latencies;  // (world rank, duration)
  std::string codec;                             // empty: not compressed (the same on every member)
  int64_t wire_sum = 0;                          // the members' wire bytes (raw where not compressed)
  double codec_s = 0;                            // the largest member's seconds in the codec
  std::vector<double> rel_errs;                  // the members' relative RMS errors, where measured

  // What the call put on the wire, in the tracer's convention: the mean of its members' views.
  int64_t wire_bytes() const {
    if (latencies.empty()) return bytes;
    const auto n = static_cast<int64_t>(latencies.size());
    return (wire_sum + n / 2) / n;
  }
};

// Adds one member's event (its latency, wire bytes, codec time and error) to its call.
void add_member(Call& c, int rank, const TraceEvent& ev) {
  c.latencies.emplace_back(rank, ev.duration_s);
  c.wire_sum += ev.wire_bytes >= 0 ? ev.wire_bytes : ev.bytes;
  c.codec_s = std::max(c.codec_s, ev.codec_s);
  if (ev.rel_err >= 0) c.rel_errs.push_back(ev.rel_err);
}

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

// A call as its first member's event describes it (no member added yet).
Call new_call(const TraceEvent& ev, int rank) {
  Call c;
  c.op = ev.kind, c.axis = ev.axis, c.phase = ev.phase;
  c.bytes = ev.bytes, c.step = ev.step;
  c.ranks = event_ranks(ev, rank);
  c.codec = ev.codec;
  return c;
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
          calls.push_back(new_call(ev, rank));
          add_member(calls.back(), rank, ev);
        }
        continue;
      }
      const int64_t k = seen[{ev.axis, ev.group}]++;
      if (!in_range(ev, in)) continue;
      auto [it, fresh] = index.try_emplace({ev.axis, ev.group, k}, calls.size());
      if (fresh) calls.push_back(new_call(ev, rank));
      Call& c = calls[it->second];
      if (c.op != ev.kind || c.bytes != ev.bytes || c.codec != ev.codec) {
        throw_runtime(
            "trace: call {} on axis {} ({}) is a {} of {} bytes (codec '{}') on one rank and a {} of {} bytes (codec "
            "'{}') on rank {}",
            k, ev.axis, ev.group, c.op, c.bytes, c.codec, ev.kind, ev.bytes, ev.codec, rank);
      }
      add_member(c, rank, ev);
    }
  }
  return calls;
}

// Raw and wire bytes, codecs, codec time and payload errors over a set of calls.
struct CodecTotals {
  int64_t calls = 0, compressed_calls = 0, raw_bytes = 0, wire_bytes = 0;
  std::set<std::string> codecs;
  double codec_s = 0;
  int64_t errors = 0;  // member payloads with a measured relative RMS error
  double error_sum = 0, error_max = -1;

  void add(const Call& c) {
    ++calls;
    raw_bytes += c.bytes;
    wire_bytes += c.wire_bytes();
    codec_s += c.codec_s;
    if (!c.codec.empty()) ++compressed_calls, codecs.insert(c.codec);
    for (const double e : c.rel_errs) ++errors, error_sum += e, error_max = std::max(error_max, e);
  }
};

void merge(CodecTotals& into, const CodecTotals& c) {
  into.calls += c.calls, into.compressed_calls += c.compressed_calls;
  into.raw_bytes += c.raw_bytes, into.wire_bytes += c.wire_bytes;
  into.codecs.insert(c.codecs.begin(), c.codecs.end());
  into.codec_s += c.codec_s;
  into.errors += c.errors, into.error_sum += c.error_sum, into.error_max = std::max(into.error_max, c.error_max);
}

// wire / raw; 1 where nothing was sent (raw 0).
double wire_ratio(int64_t raw, int64_t wire) {
  return raw > 0 ? static_cast<double>(wire) / static_cast<double>(raw) : 1.0;
}

// {"measured": n, "mean", "max"} over the measured payloads; mean and max -1 when none was.
nlohmann::json rel_err_json(const CodecTotals& c) {
  const double mean = c.errors > 0 ? c.error_sum / static_cast<double>(c.errors) : -1.0;
  return {{"measured", c.errors}, {"mean", mean}, {"max", c.errors > 0 ? c.error_max : -1.0}};
}

// The codec fields that rows and the compression section share.
void codec_fields(nlohmann::json& j, const CodecTotals& c) {
  j["compressed_calls"] = c.compressed_calls;
  j["codecs"] = std::vector<std::string>(c.codecs.begin(), c.codecs.end());
  j["ratio"] = wire_ratio(c.raw_bytes, c.wire_bytes);
  j["codec_s"] = c.codec_s;
  j["rel_err"] = rel_err_json(c);
}

// One entry of the compression section.
nlohmann::json compression_json(const CodecTotals& c) {
  nlohmann::json j = {{"calls", c.calls}, {"raw_bytes", c.raw_bytes}, {"wire_bytes", c.wire_bytes}};
  codec_fields(j, c);
  return j;
}

using RowKey = std::tuple<std::string, std::string, std::string, std::string, int64_t>;  // phase, op, axis, level, bytes

struct Row {
  int group_size = 0;
  int64_t count = 0;
  CodecTotals comp;  // wire bytes, codecs, errors of the row's calls
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
  row.comp.add(c);
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
  // The links carry the wire bytes: the bus bandwidth is the wire's.
  const double wire_algbw = time > 0 ? static_cast<double>(row.comp.wire_bytes) / time / 1e9 : 0.0;
  nlohmann::json j = {{"op", op}, {"axis", axis}, {"level", level}, {"group_size", row.group_size},
                      {"bytes", bytes}, {"count", row.count}, {"total_bytes", bytes * row.count},
                      {"wire_total_bytes", row.comp.wire_bytes},
                      {"time_s", time}, {"mean_latency_s", row.count > 0 ? time / static_cast<double>(row.count) : 0.0},
                      {"trimmed_mean_latency_s", trimmed_mean(row.latency)},
                      {"algbw_gbps", algbw}, {"wire_algbw_gbps", wire_algbw},
                      {"busbw_gbps", wire_algbw * bus_factor(op, row.group_size)},
                      {"straggler_s", straggler_json(row)}};
  codec_fields(j, row.comp);
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
  const Layout& l = ec.layout;
  return {{"tp", l.tp}, {"pp", l.pp}, {"dp", l.dp}, {"dp_replicate", l.dp_replicate},
          {"sp", l.sp()},
          {"zero", l.zero}, {"schedule", schedule_name(l.schedule)},
          {"micro_batches", ec.global_batch / l.dp / l.micro_batch}, {"micro_batch", l.micro_batch},
          {"seq", ec.seq}, {"global_batch", ec.global_batch},
          {"virtual_stages", l.chunks()}, {"recompute", recompute_name(l.recompute)},
          {"precision", precision_name(ec.precision)}, {"order", l.order},
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

// Bytes crossing each link level (innermost first), raw and on the wire.
struct LevelBytes {
  std::vector<int64_t> raw, wire;
  void size(size_t levels) {
    raw.resize(levels, 0);
    wire.resize(levels, 0);
  }
  void add(size_t level, int64_t r, int64_t w) { raw[level] += r, wire[level] += w; }
};

// The `levels` section: per reported training step, the bytes crossing each level's domain
// boundaries, in total and per axis (collectives once per group, transfers once on their send),
// raw (the logical calls) and on the wire (what the codecs made of them).
nlohmann::json levels_json(const std::vector<Call>& calls, const CommReportInputs& in) {
  const LinkLevels levels = in.levels.levels() > 0 ? in.levels : LinkLevels::from_nodes(in.nodes);
  levels.validate();
  if (levels.world() != in.nodes.world()) {
    throw_input("comm report: the link levels cover {} ranks, the node map {}", levels.world(), in.nodes.world());
  }
  const size_t nl = static_cast<size_t>(levels.levels());
  using Axes = std::map<std::string, LevelBytes>;
  std::map<int64_t, std::pair<LevelBytes, Axes>> steps;  // step -> (total, per axis)
  for (int64_t s = in.first_step + 1; s <= in.last_step; ++s) steps[s].first.size(nl);
  Axes axis_total;
  LevelBytes total;
  total.size(nl);
  for (const Call& c : calls) {
    if (c.phase != "train" || c.op == "recv") continue;
    auto& [step_total, step_axes] = steps[c.step];
    LevelBytes& step_axis = step_axes[c.axis];
    LevelBytes& all_axis = axis_total[c.axis];
    for (LevelBytes* b : {&step_total, &step_axis, &all_axis}) b->size(nl);
    for (size_t k = 0; k < nl; ++k) {
      const int64_t r = crossing_bytes(c.op, c.bytes, c.ranks, levels, static_cast<int>(k));
      const int64_t w = crossing_bytes(c.op, c.wire_bytes(), c.ranks, levels, static_cast<int>(k));
      for (LevelBytes* b : {&step_total, &step_axis, &all_axis, &total}) b->add(k, r, w);
    }
  }
  auto by_name = [&](const std::vector<int64_t>& b) {
    nlohmann::json j = nlohmann::json::object();
    for (size_t k = 0; k < nl; ++k) j[levels.names[k]] = b[k];
    return j;
  };
  auto axes_json = [&](const Axes& axes, bool wire) {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [axis, b] : axes) j[axis] = by_name(wire ? b.wire : b.raw);
    return j;
  };
  auto bytes_json = [&](const LevelBytes& all, const Axes& axes) {
    return nlohmann::json{{"bytes", by_name(all.raw)}, {"by_axis", axes_json(axes, false)},
                          {"wire_bytes", by_name(all.wire)}, {"wire_by_axis", axes_json(axes, true)}};
  };
  nlohmann::json domains = nlohmann::json::array(), per_domain = nlohmann::json::array(), per_step = nlohmann::json::array();
  for (size_t k = 0; k < nl; ++k) {
    domains.push_back(levels.domains(static_cast<int>(k)));
    per_domain.push_back(levels.ranks_per_domain(static_cast<int>(k)));
  }
  for (const auto& [step, st] : steps) {
    nlohmann::json j = bytes_json(st.first, st.second);
    j["step"] = step;
    per_step.push_back(std::move(j));
  }
  return {{"names", levels.names}, {"domains", domains}, {"ranks_per_domain", per_domain},
          {"counting", "training steps; bytes entering each domain of a level from outside, summed over domains "
                       "(node-aware algorithms, even blocks); a collective once per group, a transfer once (its send); "
                       "bytes: the logical calls, wire_bytes: what the codecs made of them"},
          {"steps", per_step}, {"total", bytes_json(total, axis_total)}};
}

using StepCodecTotals = std::map<int64_t, CodecTotals>;  // step -> stats of its calls

// Every step of the reported range (zeros where nothing was called), each with its step.
nlohmann::json compression_steps_json(const StepCodecTotals& per_step, const CommReportInputs& in) {
  nlohmann::json out = nlohmann::json::array();
  for (int64_t s = in.first_step + 1; s <= in.last_step; ++s) {
    const auto it = per_step.find(s);
    nlohmann::json j = compression_json(it == per_step.end() ? CodecTotals{} : it->second);
    j["step"] = s;
    out.push_back(std::move(j));
  }
  return out;
}

CodecTotals sum_steps(const StepCodecTotals& per_step) {
  CodecTotals sum;
  for (const auto& [step, c] : per_step) merge(sum, c);
  return sum;
}

// The `compression` section: raw and wire bytes, codecs, codec time and payload errors of the
// reported training steps per (op, axis), per step and in all.
nlohmann::json compression_section(const std::vector<Call>& calls, const CommReportInputs& in) {
  std::map<std::pair<std::string, std::string>, StepCodecTotals> by_op_axis;
  StepCodecTotals steps;
  for (const Call& c : calls) {
    if (c.phase != "train") continue;
    by_op_axis[{c.op, c.axis}][c.step].add(c);
    steps[c.step].add(c);
  }
  nlohmann::json entries = nlohmann::json::array();
  for (const auto& [key, per_step] : by_op_axis) {
    nlohmann::json j = compression_json(sum_steps(per_step));
    j["op"] = key.first;
    j["axis"] = key.second;
    j["steps"] = compression_steps_json(per_step, in);
    entries.push_back(std::move(j));
  }
  return {{"counting", "training steps; raw_bytes in the tracer's convention (the logical calls, once per group), "
                       "wire_bytes what the codecs made of them (per call the mean over its members; raw where not "
                       "compressed); codec_s per call the largest member's; rel_err over every member's payload "
                       "that measured one"},
          {"by_op_axis", entries}, {"steps", compression_steps_json(steps, in)}, {"total", compression_json(sum_steps(steps))}};
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
  // calls, bytes, model calls, model bytes, wire bytes
  std::map<std::pair<std::string, std::string>, std::array<int64_t, 5>> by_axis;
  for (const auto& [k, r] : rows) {
    const auto& [phase, op, axis, level, bytes] = k;
    if (phase != "train") {
      other.push_back(row_json(k, r));
      continue;
    }
    train.push_back(row_json(k, r));
    if (r.count > 0) hist[{op, axis, log2_class(bytes)}] += r.count;
    auto& a = by_axis[{axis, level}];
    a[0] += r.count, a[1] += r.count * bytes, a[2] += r.model_count, a[3] += r.model_bytes, a[4] += r.comp.wire_bytes;
  }
  nlohmann::json h = nlohmann::json::array(), ax = nlohmann::json::array();
  for (const auto& [k, n] : hist) h.push_back({{"op", std::get<0>(k)}, {"axis", std::get<1>(k)}, {"log2_bytes", std::get<2>(k)}, {"count", n}});
  for (const auto& [k, a] : by_axis) {
    ax.push_back({{"axis", k.first}, {"level", k.second}, {"calls", a[0]}, {"bytes", a[1]}, {"wire_bytes", a[4]},
                  {"model_calls", a[2]}, {"model_bytes", a[3]}});
  }
  return {{"version", 3}, {"world", in.nodes.world()}, {"ranks_per_node", in.nodes.ranks_per_node()},
          {"nodes", in.nodes.nodes()}, {"node_source", in.nodes.source},
          {"steps", in.last_step - in.first_step}, {"first_step", in.first_step + 1}, {"last_step", in.last_step},
          {"model", in.ec.model.name}, {"layout", layout_json(in.ec)},
          {"counting", "job-wide; a collective once per group (latency: its slowest member), each send and receive once"},
          {"rows", train}, {"histogram", h}, {"by_axis_level", ax}, {"levels", levels_json(calls, in)},
          {"compression", compression_section(calls, in)}, {"other_phases", other}, {"mismatches", mismatches}};
}

namespace {

// The `levels` section as a short table: bytes crossing each level, per axis and in all,
// summed over the reported steps and per step on average; raw (the logical calls) or on the
// wire (`wire`: what the codecs made of them).
std::string format_levels(const nlohmann::json& lv, int64_t steps, bool wire) {
  const std::vector<std::string> names = lv["names"].get<std::vector<std::string>>();
  const std::string bytes_key = wire ? "wire_bytes" : "bytes", axes_key = wire ? "wire_by_axis" : "by_axis";
  std::string out = fmt::format("{}bytes crossing link levels (node-aware algorithms; per level: into its domains from outside):\n",
                                wire ? "wire " : "");
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
  for (const auto& el : lv["total"][axes_key].items()) out += line(el.key(), el.value());
  out += line("all", lv["total"][bytes_key]);
  return out;
}

// "int4,zfp:8", or "-" for none.
std::string codec_list(const nlohmann::json& codecs) {
  std::string out;
  for (const auto& c : codecs) {
    if (!out.empty()) out += ',';
    out += c.get<std::string>();
  }
  return out.empty() ? "-" : out;
}

// "0.0123/0.0456" (mean/max), or "-" where no payload measured one.
std::string rel_err_text(const nlohmann::json& e) {
  if (e["measured"].get<int64_t>() == 0) return "-";
  return fmt::format("{:.4g}/{:.4g}", e["mean"].get<double>(), e["max"].get<double>());
}

// The `compression` section per (op, axis) and in all, over the reported steps.
std::string format_compression(const nlohmann::json& comp) {
  std::string out = fmt::format("compression of the training steps (wire/raw; codec time: compressing and decompressing):\n"
                                "  {:<15} {:<13} {:<15} {:>10} {:>10} {:>7} {:>10} {:>21}\n",
                                "op", "axis", "codec", "raw", "wire", "ratio", "codec_ms", "rel_err mean/max");
  auto line = [&](const std::string& op, const std::string& axis, const nlohmann::json& e) {
    return fmt::format("  {:<15} {:<13} {:<15} {:>10} {:>10} {:>7.3f} {:>10.3f} {:>21}\n", op, axis,
                       codec_list(e["codecs"]), format_bytes(e["raw_bytes"].get<int64_t>()),
                       format_bytes(e["wire_bytes"].get<int64_t>()), e["ratio"].get<double>(),
                       e["codec_s"].get<double>() * 1e3, rel_err_text(e["rel_err"]));
  };
  for (const auto& e : comp["by_op_axis"]) out += line(e["op"].get<std::string>(), e["axis"].get<std::string>(), e);
  return out + line("all", "", comp["total"]);
}

bool any_compressed(const nlohmann::json& rep) {
  return rep.contains("compression") && rep["compression"]["total"]["compressed_calls"].get<int64_t>() > 0;
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
  const bool compressed = any_compressed(rep);
  out += "by axis and level:\n";
  for (const auto& a : rep["by_axis_level"]) {
    out += fmt::format("  {:<13} {:<10} {:>8} calls {:>10} (model {:>8} calls {:>10}){}\n", a["axis"].get<std::string>(),
                       a["level"].get<std::string>(), a["calls"].get<int64_t>(), format_bytes(a["bytes"].get<int64_t>()),
                       a["model_calls"].get<int64_t>(), format_bytes(a["model_bytes"].get<int64_t>()),
                       compressed ? " wire " + format_bytes(a["wire_bytes"].get<int64_t>()) : std::string());
  }
  if (rep.contains("levels")) out += format_levels(rep["levels"], rep["steps"].get<int64_t>(), false);
  if (compressed) {
    out += format_levels(rep["levels"], rep["steps"].get<int64_t>(), true);
    out += format_compression(rep["compression"]);
  }
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
