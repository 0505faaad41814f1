#include "comm/tracer.h"

#include <fmt/format.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/durable_file.h"
#include "core/error.h"

namespace weft {

namespace {
// Taken during static initialisation, before main: "process start" for Tracer::now().
const std::chrono::steady_clock::time_point g_process_start = std::chrono::steady_clock::now();

void add(TraceTotals& t, const TraceEvent& ev) {
  t.calls += 1;
  t.bytes += ev.bytes;
  t.time_s += ev.duration_s;
  t.wire_bytes += ev.wire_bytes >= 0 ? ev.wire_bytes : ev.bytes;
  if (ev.wire_bytes >= 0) ++t.compressed_calls;
}

std::string format_totals(const TraceTotals& t) {
  const std::string wire = t.compressed_calls > 0 ? fmt::format(" (wire {})", format_bytes(t.wire_bytes)) : "";
  return fmt::format("{} calls {}{} {:.3f} s", t.calls, format_bytes(t.bytes), wire, t.time_s);
}
}  // namespace

double Tracer::now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - g_process_start).count();
}

void Tracer::record(TraceEvent ev) {
  if (!enabled_) return;
  if (ev.phase.empty()) {  // not stamped at post (comm_detail.h's CallTrace stamps there)
    ev.step = step_;
    ev.phase = phase_;
  }
  events_.push_back(std::move(ev));
}

TraceSummary Tracer::summary() const {
  TraceSummary s;
  for (const TraceEvent& ev : events_) {
    add(s.total, ev);
    TraceAxisSummary& a = s.by_axis[ev.axis];
    add(a.total, ev);
    add(a.by_kind[ev.kind], ev);
  }
  return s;
}

std::string TraceSummary::format() const {
  std::string out;
  for (const auto& [axis, a] : by_axis) {
    std::string kinds;
    for (const auto& [kind, t] : a.by_kind) {
      if (!kinds.empty()) kinds += ", ";
      kinds += fmt::format("{} {}", kind, format_totals(t));
    }
    out += fmt::format("{}: {} ({})\n", axis, format_totals(a.total), kinds);
  }
  return out;
}

void Tracer::write_jsonl(const std::string& path) const {
  // Appended as whole records, never through a link or into a FIFO planted there.
  AppendFile f(path);
  std::string text;
  for (const TraceEvent& ev : events_) {
    nlohmann::json j = {{"kind", ev.kind},       {"axis", ev.axis},   {"bytes", ev.bytes},
                        {"group", ev.group},     {"start_s", ev.start_s}, {"duration_s", ev.duration_s},
                        {"step", ev.step},       {"async", ev.async},     {"phase", ev.phase}};
    if (ev.rel_err >= 0) j["rel_err"] = ev.rel_err;
    if (ev.wire_bytes >= 0) {
      j["wire_bytes"] = ev.wire_bytes;
      j["codec"] = ev.codec;
      j["codec_s"] = ev.codec_s;
    }
    text += j.dump();
    text += '\n';
  }
  f.append(text);
  f.close();
}

std::vector<TraceEvent> read_trace_jsonl(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw_input("cannot open trace file '{}'", path);
  std::vector<TraceEvent> out;
  std::string line;
  int64_t no = 0;
  while (std::getline(f, line)) {
    ++no;
    if (line.empty()) continue;
    try {
      const nlohmann::json j = nlohmann::json::parse(line);
      TraceEvent ev;
      ev.kind = j.at("kind").get<std::string>();
      ev.axis = j.at("axis").get<std::string>();
      ev.bytes = j.at("bytes").get<int64_t>();
      ev.group = j.at("group").get<std::string>();
      ev.start_s = j.at("start_s").get<double>();
      ev.duration_s = j.at("duration_s").get<double>();
      ev.step = j.at("step").get<int64_t>();
      ev.async = j.value("async", false);
      ev.phase = j.value("phase", std::string("train"));
      ev.rel_err = j.value("rel_err", -1.0);
      ev.wire_bytes = j.value("wire_bytes", int64_t{-1});
      ev.codec = j.value("codec", std::string());
      ev.codec_s = j.value("codec_s", 0.0);
      out.push_back(std::move(ev));
    } catch (const nlohmann::json::exception& e) {
      throw_input("{}:{}: not a trace event ({})", path, no, e.what());
    }
  }
  return out;
}

std::string format_bytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes < 1024) return fmt::format("{} B", bytes);
  if (bytes < (int64_t{1} << 20)) return fmt::format("{:.1f} KiB", b / 1024.0);
  if (bytes < (int64_t{1} << 30)) return fmt::format("{:.1f} MiB", b / (1024.0 * 1024.0));
  return fmt::format("{:.1f} GiB", b / (1024.0 * 1024.0 * 1024.0));
}

std::string format_ranks(const std::vector<int>& ranks) {
  const size_t n = ranks.size();
  if (n <= 8) {
    std::string out;
    for (size_t i = 0; i < n; ++i) {
      if (i > 0) out += ',';
      out += std::to_string(ranks[i]);
    }
    return out;
  }
  const int stride = ranks[1] - ranks[0];
  bool arithmetic = stride > 0;
  for (size_t i = 2; i < n && arithmetic; ++i) arithmetic = ranks[i] - ranks[i - 1] == stride;
  if (arithmetic && stride == 1) return fmt::format("{}-{}", ranks.front(), ranks.back());
  if (arithmetic) return fmt::format("{},{},...,{}", ranks[0], ranks[1], ranks.back());
  return fmt::format("{},{},{},{},...,{} ({} ranks)", ranks[0], ranks[1], ranks[2], ranks[3], ranks.back(), n);
}

std::vector<int> parse_ranks(const std::string& text) {
  auto num = [&](const std::string& t) {
    size_t used = 0;
    int v = -1;
    try {
      v = std::stoi(t, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != t.size() || v < 0) throw_input("rank list '{}': '{}' is not a rank", text, t);
    return v;
  };
  if (text.find('(') != std::string::npos) throw_input("rank list '{}' is abbreviated: its ranks are not all named", text);
  std::vector<std::string> parts;
  size_t at = 0;
  while (true) {
    const size_t c = text.find(',', at);
    parts.push_back(text.substr(at, c == std::string::npos ? std::string::npos : c - at));
    if (c == std::string::npos) break;
    at = c + 1;
  }
  std::vector<int> out;
  if (parts.size() == 1 && parts[0].find('-') != std::string::npos) {
    const size_t d = parts[0].find('-');
    const int a = num(parts[0].substr(0, d)), b = num(parts[0].substr(d + 1));
    for (int r = a; r <= b; ++r) out.push_back(r);
    return out;
  }
  if (parts.size() == 4 && parts[2] == "...") {
    const int a = num(parts[0]), b = num(parts[1]), z = num(parts[3]);
    if (b <= a) throw_input("rank list '{}' is not increasing", text);
    for (int r = a; r <= z; r += b - a) out.push_back(r);
    return out;
  }
  for (const std::string& p : parts) out.push_back(num(p));
  return out;
}

}  // namespace weft
