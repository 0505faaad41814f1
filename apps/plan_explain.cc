#include "plan_explain.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "plan/compression.h"

namespace weft {

using plan::ExplainTerm;
using plan::Prediction;

namespace {

// Seconds per group, in the order the step's terms are listed.
std::vector<std::pair<std::string, double>> group_totals(const Prediction& p) {
  std::vector<std::pair<std::string, double>> out;
  for (const ExplainTerm& t : p.explain) {
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& g) { return g.first == t.group; });
    if (it == out.end()) {
      out.emplace_back(t.group, t.seconds);
    } else {
      it->second += t.seconds;
    }
  }
  return out;
}

const ExplainTerm* dominant(const Prediction& p) {
  const ExplainTerm* best = nullptr;
  for (const ExplainTerm& t : p.explain) {
    if (!best || t.seconds > best->seconds) best = &t;
  }
  return best;
}

std::vector<std::pair<const char*, const plan::AxisTraffic*>> traffic_axes(const plan::TrafficReport& t) {
  return {{"tp", &t.tp}, {"pp", &t.pp}, {"dp", &t.dp}, {"params", &t.params}};
}

std::string share(double s, double total) { return total > 0 ? fmt::format("{:.1f}%", 100 * s / total) : "-"; }

}  // namespace

void print_explain(const Prediction& p) {
  const double total = p.step_time_s;
  fmt::print("\nwhere the step goes: {} ({} micro-batches per pipeline), {:.4g} s per step\n", p.layout.describe(),
             p.micro_batches, total);
  fmt::print("  {:<11} {:<52} {:<9} {:>11} {:>7}  {}\n", "group", "term", "level", "s/step", "share", "detail");
  for (const ExplainTerm& t : p.explain) {
    fmt::print("  {:<11} {:<52} {:<9} {:>11.4g} {:>7}  {}\n", t.group, t.name, t.where.empty() ? "-" : t.where, t.seconds,
               share(t.seconds, total), t.detail);
  }
  if (!p.dp_level_bytes.empty()) {
    fmt::print("  dp bytes per device per step by link level:");
    for (const auto& [name, bytes] : p.dp_level_bytes) fmt::print(" {} {:.4g} GB", name, bytes / 1e9);
    fmt::print("\n");
  }
  const plan::TrafficReport& tr = p.traffic;
  if (tr.tp.codec != "off" || tr.pp.codec != "off" || tr.dp.codec != "off" || tr.params.codec != "off") {
    fmt::print("  compressed collectives, per device per step (raw -> wire, codec seconds on the step):\n");
    for (const auto& [axis, t] : traffic_axes(tr)) {
      fmt::print("    {:<7} {:<8} {:>10.4g} GB -> {:>10.4g} GB  codec {:.4g} s\n", axis, t->codec, t->raw / 1e9, t->wire / 1e9,
                 t->codec_s);
    }
  }
  const std::vector<std::string> costs = plan::measured_loss_costs(p.layout.compression);
  if (!costs.empty()) {
    fmt::print("  what the lossy codecs cost the loss (measured: docs/compression.md, tiny GPT, 300 steps):\n");
    for (const std::string& c : costs) fmt::print("    {}\n", c);
  }
  fmt::print("  totals:");
  for (const auto& [g, s] : group_totals(p)) fmt::print(" {} {:.4g} s ({})", g, s, share(s, total));
  fmt::print("\n");
  if (const ExplainTerm* d = dominant(p)) {
    fmt::print("  dominant term: {} / {} ({} of the step)\n", d->group, d->name, share(d->seconds, total));
  }
}

nlohmann::json explain_json(const Prediction& p) {
  nlohmann::json terms = nlohmann::json::array();
  for (const ExplainTerm& t : p.explain) {
    terms.push_back({{"group", t.group},
                     {"name", t.name},
                     {"where", t.where},
                     {"seconds", t.seconds},
                     {"share", p.step_time_s > 0 ? t.seconds / p.step_time_s : 0.0},
                     {"detail", t.detail}});
  }
  nlohmann::json groups = nlohmann::json::object();
  for (const auto& [g, s] : group_totals(p)) groups[g] = s;
  nlohmann::json j = {{"terms", terms}, {"groups", groups}};
  if (const auto costs = plan::measured_loss_costs(p.layout.compression); !costs.empty()) j["loss_costs"] = costs;
  // Bytes each device sends per step over each level's links for the dp / ZeRO / ZeRO++ calls.
  nlohmann::json levels = nlohmann::json::object();
  for (const auto& [name, bytes] : p.dp_level_bytes) levels[name] = bytes;
  j["dp_bytes_per_device"] = levels;
  // Per kind of traffic: raw and wire bytes per device per step, codec seconds on the step.
  nlohmann::json traffic = nlohmann::json::object();
  for (const auto& [axis, t] : traffic_axes(p.traffic)) {
    traffic[axis] = {{"codec", t->codec}, {"raw_bytes", t->raw}, {"wire_bytes", t->wire}, {"codec_s", t->codec_s}};
  }
  j["traffic"] = traffic;
  if (const ExplainTerm* d = dominant(p)) j["dominant"] = {{"group", d->group}, {"name", d->name}};
  return j;
}

}  // namespace weft
