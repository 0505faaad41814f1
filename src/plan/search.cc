#include "plan/search.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.h"

namespace weft::plan {

namespace {

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> d;
  for (int64_t i = 1; i * i <= n; ++i) {
    if (n % i == 0) {
      d.push_back(i);
      if (i != n / i) d.push_back(n / i);
    }
  }
  std::sort(d.begin(), d.end());
  return d;
}

bool faster(const Prediction& a, const Prediction& b) {
  if (a.step_time_s != b.step_time_s) return a.step_time_s < b.step_time_s;
  return a.memory.total < b.memory.total;
}

}  // namespace

SearchResult search_layouts(const ModelShape& m, const System& sys, int64_t gpus, const Options& o, const Pins& pins,
                            size_t keep) {
  m.validate();
  if (gpus <= 0) throw_input("--gpus must be positive, got {}", gpus);
  if (o.global_batch <= 0) throw_input("--global-batch must be positive, got {}", o.global_batch);
  axis_stride(Layout{}, o.rank_order, "tp");  // validates the order
  const auto t0 = std::chrono::steady_clock::now();
  SearchResult res;
  std::vector<Prediction> fit;
  const MemoryOptions mo = o.memory();
  const double capacity = sys.device.memory_bytes;
  int64_t valid = 0;

  for (int64_t tp : divisors(m.heads)) {
    if (pins.tp && tp != *pins.tp) continue;
    if (m.ffn % tp != 0 || gpus % tp != 0) continue;
    for (int64_t pp : divisors(m.layers)) {
      if (pins.pp && pp != *pins.pp) continue;
      if ((gpus / tp) % pp != 0) continue;
      const int64_t dp = gpus / (tp * pp);
      if (pins.dp && dp != *pins.dp) continue;
      if (o.global_batch % dp != 0) continue;
      for (int64_t mbs : divisors(o.global_batch / dp)) {
        if (pins.micro_batch && mbs != *pins.micro_batch) continue;
        const int64_t mb = o.global_batch / (dp * mbs);
        for (int zero = 0; zero <= 3; ++zero) {
          if (pins.zero ? zero != *pins.zero : (dp == 1 && zero > 0)) continue;
          for (Recompute rc : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
            if (pins.recompute && rc != *pins.recompute) continue;
            // Under FlashAttention selective recompute changes nothing (no scores are kept).
            if (!pins.recompute && rc == Recompute::kSelective && o.flash_attention) continue;
            for (int sp = 0; sp <= 1; ++sp) {
              if (pins.sequence_parallel ? (sp != 0) != *pins.sequence_parallel : (sp && tp == 1)) continue;
              for (PipeSchedule sch : {PipeSchedule::k1F1B, PipeSchedule::kGpipe, PipeSchedule::kInterleaved}) {
                if (pins.schedule ? sch != *pins.schedule : (pp == 1 && sch != PipeSchedule::k1F1B)) continue;
                std::vector<int64_t> vs{1};
                if (sch == PipeSchedule::kInterleaved) {
                  vs.clear();
                  if (pp < 2 || mb % pp != 0) continue;
                  for (int64_t v : divisors(m.layers / pp)) {
                    if (v >= 2) vs.push_back(v);
                  }
                }
                for (int64_t v : vs) {
                  if (pins.virtual_stages && v != *pins.virtual_stages) continue;
                  Layout l;
                  l.tp = static_cast<int>(tp);
                  l.pp = static_cast<int>(pp);
                  l.dp = static_cast<int>(dp);
                  l.micro_batch = mbs;
                  l.zero = zero;
                  l.recompute = rc;
                  if (pins.recompute_layers) l.recompute_layers = *pins.recompute_layers;
                  l.sequence_parallel = sp != 0;
                  l.schedule = sch;
                  l.virtual_stages = static_cast<int>(v);
                  // A pinned combination may still be invalid (e.g. sp with tp 1): check it.
                  try {
                    check_layout(m, l, o.global_batch, gpus);
                  } catch (const InputError&) {
                    continue;
                  }
                  ++valid;
                  const MemoryBreakdown mem = worst_stage_memory(m, l, mo);
                  if (mem.total > capacity) {
                    if (!res.smallest || mem.total < res.smallest->memory.total) {
                      Prediction p = predict_unchecked(m, sys, l, o);
                      res.smallest = p;
                    }
                    continue;
                  }
                  fit.push_back(predict_unchecked(m, sys, l, o));
                }
              }
            }
          }
        }
      }
    }
  }
  if (valid == 0) {
    throw_input("no valid layout of {} (layers {}, heads {}, MLP {}) on {} devices with global batch {} matches the pins",
                m.name, m.layers, m.heads, m.ffn, gpus, o.global_batch);
  }
  res.evaluated = valid;
  res.fitting = static_cast<int64_t>(fit.size());
  const size_t k = std::min(keep, fit.size());
  std::partial_sort(fit.begin(), fit.begin() + static_cast<std::ptrdiff_t>(k), fit.end(), faster);
  fit.resize(k);
  res.top = std::move(fit);
  if (!res.top.empty()) res.smallest.reset();
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

std::string explain(const Prediction& a, const Prediction& b) {
  const Layout &x = a.layout, &y = b.layout;
  std::vector<std::string> diff;
  auto cmp = [&](const char* name, auto u, auto w) {
    if (u != w) diff.push_back(fmt::format("{} {} vs {}", name, u, w));
  };
  cmp("tp", x.tp, y.tp);
  cmp("pp", x.pp, y.pp);
  cmp("dp", x.dp, y.dp);
  cmp("micro-batch", x.micro_batch, y.micro_batch);
  cmp("zero", x.zero, y.zero);
  cmp("recompute", recompute_name(x.recompute), recompute_name(y.recompute));
  cmp("sequence-parallel", x.sequence_parallel, y.sequence_parallel);
  cmp("schedule", schedule_name(x.schedule), schedule_name(y.schedule));
  cmp("virtual-stages", x.virtual_stages, y.virtual_stages);
  struct Part {
    const char* name;
    double d;
  };
  std::vector<Part> parts = {{"compute", a.time.compute - b.time.compute},
                             {"TP communication", a.time.tp_comm - b.time.tp_comm},
                             {"pipeline bubble + p2p", a.time.pp_bubble - b.time.pp_bubble},
                             {"exposed DP communication", a.time.dp_exposed - b.time.dp_exposed},
                             {"optimizer", a.time.optimizer - b.time.optimizer}};
  std::sort(parts.begin(), parts.end(), [](const Part& p, const Part& q) { return p.d < q.d; });
  const double gap = b.step_time_s - a.step_time_s;
  std::string s = fmt::format("{} beats {} by {:.2f}% ({:.4g} s vs {:.4g} s per step)", x.describe(), y.describe(),
                              100.0 * gap / b.step_time_s, a.step_time_s, b.step_time_s);
  if (diff.empty()) {
    s += "; the two predict the same time";
  } else {
    s += fmt::format(": it differs in {}", diff.front());
    for (size_t i = 1; i < diff.size(); ++i) s += (i + 1 == diff.size() ? " and " : ", ") + diff[i];
  }
  const double eps = 1e-9 * std::max(a.step_time_s, 1e-12);
  if (parts.front().d < -eps) s += fmt::format("; it spends {:.4g} s less on {}", -parts.front().d, parts.front().name);
  if (parts.back().d > eps) s += fmt::format(" and {:.4g} s more on {}", parts.back().d, parts.back().name);
  if (gap <= eps) {
    s += fmt::format("; equal step time, it needs less memory ({:.2f} vs {:.2f} GB on its fullest stage)",
                     a.memory.total / 1e9, b.memory.total / 1e9);
  }
  return s + ".";
}

std::vector<ScalingPoint> scaling(const ModelShape& m, const System& sys, const std::vector<int64_t>& gpu_counts,
                                  const Options& o, const Pins& pins, bool weak) {
  if (gpu_counts.empty()) throw_input("scaling needs at least one GPU count");
  std::vector<ScalingPoint> out;
  for (int64_t g : gpu_counts) {
    ScalingPoint pt;
    pt.gpus = g;
    Options oo = o;
    if (weak) {
      if ((o.global_batch * g) % gpu_counts.front() != 0) {
        throw_input("weak scaling: global batch {} x {} devices is not divisible by the first count {}", o.global_batch, g,
                    gpu_counts.front());
      }
      oo.global_batch = o.global_batch * g / gpu_counts.front();
    }
    pt.global_batch = oo.global_batch;
    Pins pp = pins;
    pp.dp.reset();  // dp follows the device count
    try {
      SearchResult r = search_layouts(m, sys, g, oo, pp, 1);
      if (!r.top.empty()) {
        pt.found = true;
        pt.best = r.top.front();
      } else {
        pt.note = "no layout fits in memory";
      }
    } catch (const InputError&) {
      pt.note = "no valid layout matches the pins";
    }
    out.push_back(pt);
  }
  const ScalingPoint* base = nullptr;
  for (const auto& p : out) {
    if (p.found) {
      base = &p;
      break;
    }
  }
  if (base) {
    const double base_rate = base->best.tokens_per_s / static_cast<double>(base->gpus);
    for (auto& p : out) {
      if (p.found) p.efficiency = (p.best.tokens_per_s / static_cast<double>(p.gpus)) / base_rate;
    }
  }
  return out;
}

}  // namespace weft::plan
