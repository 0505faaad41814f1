#include "parallel/pp/schedule.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <set>
#include <utility>

#include "core/error.h"

namespace weft {

PipeSchedule parse_schedule(const std::string& name) {
  if (name == "gpipe") return PipeSchedule::kGpipe;
  if (name == "1f1b") return PipeSchedule::k1F1B;
  if (name == "interleaved") return PipeSchedule::kInterleaved;
  throw_input("unknown pipeline schedule '{}', expected one of: gpipe, 1f1b, interleaved", name);
}

std::string schedule_name(PipeSchedule s) {
  switch (s) {
    case PipeSchedule::kGpipe: return "gpipe";
    case PipeSchedule::k1F1B: return "1f1b";
    case PipeSchedule::kInterleaved: return "interleaved";
  }
  throw_runtime("bad PipeSchedule value {}", static_cast<int>(s));
}

namespace {

void check_pipeline(int stages, int micro_batches, int virtual_stages) {
  if (stages < 1) throw_input("pipeline needs at least 1 stage, got {}", stages);
  if (micro_batches < 1)
    throw_input("pipeline needs at least 1 micro-batch, got {}", micro_batches);
  if (virtual_stages < 1)
    throw_input("pipeline needs at least 1 virtual stage per stage, got {}", virtual_stages);
}

void check_schedule(PipeSchedule s, int stages, int micro_batches, int virtual_stages) {
  check_pipeline(stages, micro_batches, virtual_stages);
  if (s != PipeSchedule::kInterleaved && virtual_stages != 1)
    throw_input(
        "pipeline schedule '{}' runs 1 chunk per stage, got {} virtual stages (use "
        "'interleaved')",
        schedule_name(s), virtual_stages);
  if (s == PipeSchedule::kInterleaved && micro_batches % stages != 0)
    throw_input(
        "interleaved pipeline schedule needs the micro-batches to divide by the stages: {} "
        "micro-batches, {} stages",
        micro_batches, stages);
}

// The forward run count before the first backward on `stage` (see the header).
int warmup_count(PipeSchedule s, int stages, int stage, int m, int v) {
  switch (s) {
    case PipeSchedule::kGpipe: return m;
    case PipeSchedule::k1F1B: return std::min(stages - stage - 1, m);
    case PipeSchedule::kInterleaved:
      if (m == stages) return m * v;
      return std::min((stages - stage - 1) * 2 + (v - 1) * stages, m * v);
  }
  throw_runtime("bad PipeSchedule value {}", static_cast<int>(s));
}

}  // namespace

int warmup_forwards(PipeSchedule s, int stages, int stage, int micro_batches, int virtual_stages) {
  check_schedule(s, stages, micro_batches, virtual_stages);
  if (stage < 0 || stage >= stages)
    throw_input("pipeline stage {} is out of range for {} stages", stage, stages);
  return warmup_count(s, stages, stage, micro_batches, virtual_stages);
}

std::vector<PipeAction> stage_schedule(PipeSchedule s, int stages, int stage, int micro_batches,
                                       int virtual_stages) {
  const int warmup = warmup_forwards(s, stages, stage, micro_batches, virtual_stages);
  const int p = stages, m = micro_batches, v = virtual_stages;
  const int total = m * v;
  // Virtual micro-batch k -> (micro-batch, local chunk). For v = 1 this is (k, 0).
  auto action = [&](int k, bool forward) {
    const int group = p * v;
    int chunk = (k % group) / p;
    if (!forward) chunk = v - 1 - chunk;
    const int mb = (k / group) * p + k % p;
    return PipeAction{forward ? PipeAction::kForward : PipeAction::kBackward,
                      v == 1 ? k : mb, chunk};
  };
  std::vector<PipeAction> out;
  out.reserve(2 * total);
  for (int k = 0; k < warmup; ++k) out.push_back(action(k, true));
  for (int i = 0; i < total - warmup; ++i) {
    out.push_back(action(warmup + i, true));
    out.push_back(action(i, false));
  }
  for (int k = total - warmup; k < total; ++k) out.push_back(action(k, false));
  return out;
}

int max_in_flight(const std::vector<PipeAction>& actions, int chunk) {
  std::set<std::pair<int, int>> live;
  int peak = 0;
  for (const PipeAction& a : actions) {
    if (chunk >= 0 && a.chunk != chunk) continue;
    if (a.kind == PipeAction::kForward) {
      live.insert({a.micro_batch, a.chunk});
      peak = std::max(peak, static_cast<int>(live.size()));
    } else {
      live.erase({a.micro_batch, a.chunk});
    }
  }
  return peak;
}

PipeSimResult simulate_actions(const std::vector<std::vector<PipeAction>>& actions,
                               int micro_batches, int virtual_stages, double t_forward,
                               double t_backward, double t_p2p) {
  const int p = static_cast<int>(actions.size());
  check_pipeline(p, micro_batches, virtual_stages);
  if (!(t_forward >= 0 && t_backward >= 0 && t_p2p >= 0))
    throw_input("pipeline times must be >= 0: t_forward {}, t_backward {}, t_p2p {}", t_forward,
                t_backward, t_p2p);
  const int m = micro_batches, v = virtual_stages, chunks = p * v;
  // end[kind][mb * chunks + c]: end time of that action, < 0 while it has not run.
  std::vector<double> end[2] = {std::vector<double>(m * chunks, -1.0),
                                std::vector<double>(m * chunks, -1.0)};
  for (int s = 0; s < p; ++s) {
    std::vector<int> seen[2] = {std::vector<int>(m * v, 0), std::vector<int>(m * v, 0)};
    for (const PipeAction& a : actions[s]) {
      if (a.micro_batch < 0 || a.micro_batch >= m || a.chunk < 0 || a.chunk >= v)
        throw_input("stage {} action (micro-batch {}, chunk {}) is outside {} micro-batches x {} "
                    "chunks",
                    s, a.micro_batch, a.chunk, m, v);
      ++seen[a.kind][a.micro_batch * v + a.chunk];
    }
    for (int k = 0; k < 2; ++k)
      for (int i = 0; i < m * v; ++i)
        if (seen[k][i] != 1)
          throw_input("stage {} runs the {} of micro-batch {} chunk {} {} times, expected once",
                      s, k == 0 ? "forward" : "backward", i / v, i % v, seen[k][i]);
  }

  const double tf = t_forward / v, tb = t_backward / v;
  std::vector<size_t> next(p, 0);
  std::vector<double> free_at(p, 0.0);
  PipeSimResult r;
  r.busy.assign(p, 0.0);
  size_t remaining = 0;
  for (const auto& list : actions) remaining += list.size();
  // Ready time of a dependency on (kind, mb, global chunk c) for an action on `stage`, or < 0
  // while it has not run.
  auto dep = [&](int kind, int mb, int c, int stage) {
    const double t = end[kind][mb * chunks + c];
    if (t < 0) return -1.0;
    return c % p == stage ? t : t + t_p2p;
  };
  while (remaining > 0) {
    bool progress = false;
    for (int s = 0; s < p; ++s) {
      while (next[s] < actions[s].size()) {
        const PipeAction& a = actions[s][next[s]];
        const int c = a.chunk * p + s;
        double ready = free_at[s];
        bool ok = true;
        auto need = [&](double t) {
          if (t < 0) ok = false;
          ready = std::max(ready, t);
        };
        if (a.kind == PipeAction::kForward) {
          if (c > 0) need(dep(PipeAction::kForward, a.micro_batch, c - 1, s));
        } else {
          need(dep(PipeAction::kForward, a.micro_batch, c, s));
          if (c < chunks - 1) need(dep(PipeAction::kBackward, a.micro_batch, c + 1, s));
        }
        if (!ok) break;
        const double dur = a.kind == PipeAction::kForward ? tf : tb;
        free_at[s] = ready + dur;
        end[a.kind][a.micro_batch * chunks + c] = free_at[s];
        r.busy[s] += dur;
        ++next[s];
        --remaining;
        progress = true;
      }
    }
    if (!progress) {
      std::vector<std::string> stuck;
      for (int s = 0; s < p; ++s) {
        if (next[s] == actions[s].size()) continue;
        const PipeAction& a = actions[s][next[s]];
        stuck.push_back(fmt::format("stage {} at {} of micro-batch {} chunk {}", s,
                                    a.kind == PipeAction::kForward ? "forward" : "backward",
                                    a.micro_batch, a.chunk));
      }
      throw_runtime("pipeline schedule deadlocks: {}", fmt::join(stuck, "; "));
    }
  }
  r.step_time = *std::max_element(free_at.begin(), free_at.end());
  r.idle.resize(p);
  for (int s = 0; s < p; ++s) r.idle[s] = r.step_time - r.busy[s];
  const double ideal = m * (t_forward + t_backward);
  r.bubble_fraction = ideal > 0 ? (r.step_time - ideal) / ideal : 0.0;
  return r;
}

PipeSimResult simulate_pipeline(PipeSchedule s, int stages, int micro_batches,
                                int virtual_stages, double t_forward, double t_backward,
                                double t_p2p) {
  check_schedule(s, stages, micro_batches, virtual_stages);
  std::vector<std::vector<PipeAction>> actions(stages);
  for (int st = 0; st < stages; ++st)
    actions[st] = stage_schedule(s, stages, st, micro_batches, virtual_stages);
  return simulate_actions(actions, micro_batches, virtual_stages, t_forward, t_backward, t_p2p);
}

}  // namespace weft
