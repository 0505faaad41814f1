#include "plan/search.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <functional>

#include "core/error.h"
#include "plan/zeropp.h"

namespace weft::plan {

namespace {

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> d;
  for (int64_t i = 1; i <= n / i; ++i) {  // i * i <= n without overflow
    if (n % i == 0) {
      d.push_back(i);
      if (i != n / i) d.push_back(n / i);
    }
  }
  std::sort(d.begin(), d.end());
  return d;
}

// A policy as `weft plan --compression` takes it: the preset's name, or a custom one's codecs.
std::string policy_text(const NamedPolicy& p) {
  if (p.name != "custom") return p.name;
  const CompressionPolicy& c = p.policy;
  return fmt::format("dp={},params={},tp={},pp={}{}", c.dp.name(), c.params.name(), c.tp.name(), c.pp.name(),
                     c.error_feedback ? ",ef=on" : "");
}

bool faster(const Prediction& a, const Prediction& b) {
  if (a.step_time_s != b.step_time_s) return a.step_time_s < b.step_time_s;
  return a.memory.total < b.memory.total;
}

// A pinned value, or the whole domain.
template <typename T, typename U>
std::vector<T> domain(const std::optional<T>& pin, const std::vector<U>& all) {
  if (pin) return {*pin};
  return std::vector<T>(all.begin(), all.end());
}

// "--tp 7 --zero 3" (the pins as `weft plan` takes them).
std::string pins_text(const Pins& p) {
  std::string s;
  auto add = [&](const char* name, const auto& v) {
    if (v) s += fmt::format(" --{} {}", name, *v);
  };
  add("tp", p.tp), add("pp", p.pp), add("dp", p.dp), add("dp-shard", p.dp_shard), add("dp-replicate", p.dp_replicate);
  add("micro-batch", p.micro_batch), add("zero", p.zero);
  if (p.recompute) s += fmt::format(" --recompute {}", recompute_name(*p.recompute));
  add("recompute-layers", p.recompute_layers);
  if (p.sequence_parallel) s += *p.sequence_parallel ? " --sequence-parallel" : " --no-sequence-parallel";
  if (p.schedule) s += fmt::format(" --schedule {}", schedule_name(*p.schedule));
  add("virtual-stages", p.virtual_stages);
  if (p.zeropp) s += fmt::format(" --zeropp {}", zeropp_name(*p.zeropp));
  if (p.qwz) s += *p.qwz ? " --qwz" : " --no-qwz";
  add("hpz", p.hpz);
  if (p.qgz) s += *p.qgz ? " --qgz" : " --no-qgz";
  if (p.hierarchy) s += fmt::format(" --hierarchy {}", fmt::join(*p.hierarchy, ","));
  add("quant-block", p.quant_block);
  if (p.compression) s += fmt::format(" --compression {}", policy_text(*p.compression));
  return s;
}

// The pinned ZeRO++ knobs over `l` (its preset already resolved); kCustom when any is pinned.
Layout with_knob_pins(Layout l, const Pins& p) {
  if (!(p.qwz || p.qgz || p.hpz || p.quant_block || p.hierarchy)) return l;
  if (p.qwz) l.qwz = *p.qwz;
  if (p.qgz) l.qgz = *p.qgz;
  if (p.hpz) l.hpz = *p.hpz;
  if (p.quant_block) l.quant_block = *p.quant_block;
  if (p.hierarchy) l.hierarchy = *p.hierarchy;
  if (!l.qgz && !p.hierarchy) l.hierarchy.clear();
  l.zeropp = ZeroPP::kCustom;
  return l;
}

// Walks the candidates of a search: the axes (tp, pp, dp), then the micro-batch, then the
// rest, checking each level with the layout rules' part for it (parallel/layout_rules.h) and
// every complete candidate with all of them. The domains hold every value a valid layout
// can take (divisors of the devices and of the batch; virtual stages 2..L/p, interleaved
// with pp > 1 only, pruned for very deep models: virtual_stages()); a pin replaces a domain by its value, so the rules name what is wrong
// with it. `why` keeps the first refusal at each level; the deepest is the one reported.
struct Walk {
  const ModelShape& m;
  int64_t gpus;
  const Options& o;
  const Pins& pins;
  const std::function<void(const Layout&)>& visit;
  int64_t valid = 0;
  std::array<std::string, 3> why;
  // Options::search_seconds: the walk ends (StopWalk) once they have passed, checked every
  // kCheckEvery candidates.
  struct StopWalk {};
  static constexpr int64_t kCheckEvery = 256;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  int64_t seen = 0;
  bool stopped = false;
  void tick() {
    if (o.search_seconds <= 0 || ++seen % kCheckEvery != 0) return;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < o.search_seconds) return;
    stopped = true;
    throw StopWalk{};
  }

  void refuse(size_t level, const std::string& e) {
    if (why[level].empty()) why[level] = e;
  }
  std::string reason() const {
    for (size_t i = why.size(); i-- > 0;) {
      if (!why[i].empty()) return why[i];
    }
    return "no candidate";
  }

  void axes() {
    Layout start;
    start.order = pins.order;
    LayoutCandidate c = layout_candidate(m, start, o.global_batch, o.precision, gpus);
    for (int tp : domain(pins.tp, divisors(gpus))) {
      for (int pp : domain(pins.pp, divisors(gpus))) {
        tick();
        c.tp = tp, c.pp = pp, c.dp = pins.dp.value_or(0);
        if (std::string e = axes_error(c); !e.empty()) {
          refuse(0, e);
          continue;
        }
        c.dp = c.resolved_dp();
        batch(c);
      }
    }
  }

  void batch(LayoutCandidate c) {
    for (int64_t mbs : domain(pins.micro_batch, divisors(o.global_batch))) {
      tick();
      c.micro_batch = mbs;
      if (std::string e = batch_error(c); !e.empty()) {
        refuse(1, e);
        continue;
      }
      rest(c);
    }
  }

  // Interleaved with pp > 1: every v of 2..L/p when that is at most kAllVirtualStages values;
  // beyond (thousands of layers), v = 2..kAllVirtualStages, the powers of two and the v that
  // split the layers evenly (L % (p v) == 0, what users run), so that the walk stays bounded.
  static constexpr int64_t kAllVirtualStages = 32;
  std::vector<int> virtual_stages(const LayoutCandidate& c) const {
    std::vector<int> vs{1};
    if (c.schedule == PipeSchedule::kInterleaved && c.pp > 1) {
      vs.clear();
      const int64_t most = m.layers / c.pp;
      for (int64_t v = 2; v <= most; ++v) {
        const bool pow2 = (v & (v - 1)) == 0, even = m.layers % (c.pp * v) == 0;
        if (v <= kAllVirtualStages || pow2 || even) vs.push_back(static_cast<int>(v));
      }
    }
    return domain(pins.virtual_stages, vs);
  }

  // HSDP's dp_replicate: pinned (a pinned dp_shard gives dp / dp_shard, 1 when it does not
  // divide: the rules then name the mismatch), else 1 and, with ZeRO 1-3, every divisor of
  // dp that leaves dp_shard >= 2.
  std::vector<int> replicas(const LayoutCandidate& c, int zero) const {
    if (pins.dp_replicate) return {*pins.dp_replicate};
    if (pins.dp_shard) return {*pins.dp_shard > 0 && c.dp % *pins.dp_shard == 0 ? c.dp / *pins.dp_shard : 1};
    std::vector<int> r{1};
    if (zero == 0) return r;
    for (int64_t d : divisors(c.dp)) {
      if (d > 1 && c.dp / d >= 2) r.push_back(static_cast<int>(d));
    }
    return r;
  }

  void rest(LayoutCandidate c) {
    const std::vector<Recompute> rcs{Recompute::kNone, Recompute::kSelective, Recompute::kFull};
    const std::vector<PipeSchedule> schedules{PipeSchedule::k1F1B, PipeSchedule::kGpipe, PipeSchedule::kInterleaved};
    c.recompute_layers = pins.recompute_layers.value_or(-1);
    c.dp_shard_request = pins.dp_shard.value_or(0);
    for (int zero : domain(pins.zero, std::vector<int>{0, 1, 2, 3})) {
      for (int rep : replicas(c, zero)) {
        c.dp_replicate = rep;
        for (Recompute rc : domain(pins.recompute, rcs)) {
          for (bool sp : domain(pins.sequence_parallel, std::vector<bool>{false, true})) {
            for (PipeSchedule sch : domain(pins.schedule, schedules)) {
              c.zero = zero, c.recompute = rc, c.sequence_parallel = sp, c.schedule = sch;
              for (int v : virtual_stages(c)) {
                c.virtual_stages = v;
                leaf(c);
              }
            }
          }
        }
      }
    }
  }

  void leaf(const LayoutCandidate& c) {
    tick();
    if (std::string e = layout_error(c); !e.empty()) return refuse(2, e);
    Layout l = c.resolved();
    if (pins.zeropp_pinned()) {
      // ZeRO++ pins: the system-free rules here (zero 3, hpz dividing dp, the hierarchy); the
      // preset's knobs are resolved against the system by the search (plan/zeropp.h).
      l.zeropp = pins.zeropp.value_or(ZeroPP::kNone);
      Layout k = l;
      k.qwz = k.qgz = l.zeropp == ZeroPP::kZeroPP || l.zeropp == ZeroPP::kThreeLevel;  // what the presets turn on
      k = with_knob_pins(k, pins);
      if (std::string e = zeropp_error(k); !e.empty()) return refuse(2, e);
    }
    ++valid;
    visit(l);
  }
};

// Layouts that predict the same as a simpler one, which the ranking leaves out unless pinned:
// ZeRO > 0 with dp 1 (nothing to shard: the same time, no less memory) and, under
// FlashAttention, selective recompute (no scores are kept, so it changes nothing).
bool equivalent_to_simpler(const Layout& l, const Options& o, const Pins& pins) {
  if (!pins.zero && l.dp == 1 && l.zero > 0) return true;
  return !pins.recompute && l.recompute == Recompute::kSelective && o.flash_attention;
}

}  // namespace

int64_t for_each_valid_layout(const ModelShape& m, int64_t gpus, const Options& o, const Pins& pins,
                              const std::function<void(const Layout&)>& visit, bool* stopped) {
  m.validate();
  if (gpus <= 0) throw_input("--gpus must be positive, got {}", gpus);
  if (o.global_batch <= 0) throw_input("--global-batch must be positive, got {}", o.global_batch);
  Walk w{m, gpus, o, pins, visit, 0, {}};
  try {
    w.axes();
  } catch (const Walk::StopWalk&) {
    if (w.valid == 0) {
      throw_input("no valid layout of {} (layers {}) on {} devices with global batch {} within the search's time limit of "
                  "{:g} s ({} candidates checked): pin --tp, --pp or --micro-batch, or raise --time-limit",
                  m.name, m.layers, gpus, o.global_batch, o.search_seconds, w.seen);
    }
    if (stopped) *stopped = true;
    return w.valid;
  }
  if (w.valid == 0) {
    const std::string pinned = pins_text(pins);
    throw_input("no valid layout of {} (layers {}, heads {}, MLP {}) on {} devices with global batch {}{}: {}", m.name,
                m.layers, m.heads, m.ffn, gpus, o.global_batch,
                pinned.empty() ? std::string() : " matches the pins" + pinned, w.reason());
  }
  return w.valid;
}

std::vector<Layout> valid_layouts(const ModelShape& m, int64_t gpus, const Options& o, const Pins& pins) {
  std::vector<Layout> out;
  for_each_valid_layout(m, gpus, o, pins, [&](const Layout& l) { out.push_back(l); });
  return out;
}

SearchResult search_layouts(const ModelShape& m, const System& sys, int64_t gpus, const Options& o, const Pins& pins,
                            size_t keep) {
  Layout ordered;
  ordered.order = pins.order;
  axis_stride(ordered, "tp");  // validates the order
  const auto t0 = std::chrono::steady_clock::now();
  SearchResult res;
  std::vector<Prediction> fit;
  const MemoryOptions mo = o.memory();
  const double capacity = sys.device.memory_bytes;
  // Compression (plan/compression.h): the pinned policy, or the presets the user allows.
  if (pins.compression) {
    if (std::string e = compression_system_error(pins.compression->policy, sys); !e.empty()) {
      throw_input("--compression {}: {}", policy_text(*pins.compression), e);
    }
  }
  const std::vector<NamedPolicy> policies =
      pins.compression ? std::vector<NamedPolicy>{*pins.compression} : compression_presets(sys, pins.allow_lossy);
  std::string refused;  // the first layout that refused a policy, and why
  auto price = [&](const Layout& l) {
    ++res.evaluated;
    const MemoryBreakdown mem = worst_stage_memory(m, l, mo);
    if (mem.total <= capacity) {
      fit.push_back(predict_unchecked(m, sys, l, o));
    } else if (!res.smallest || mem.total < res.smallest->memory.total) {
      res.smallest = predict_unchecked(m, sys, l, o);
    }
  };
  // Each layout under each policy; unpinned, a policy that leaves the layout the codecs of one
  // already priced (its other codecs fall on axes of size 1) is not priced again.
  auto price_policies = [&](const Layout& l) {
    std::vector<CompressionPolicy> done;
    for (const NamedPolicy& np : policies) {
      if (std::string e = compression_layout_error(np.policy, l); !e.empty()) {
        if (refused.empty()) refused = e;
        continue;
      }
      if (!pins.compression) {
        const CompressionPolicy eff = effective_policy(np.policy, l);
        if (std::any_of(done.begin(), done.end(), [&](const CompressionPolicy& d) { return same_policy(d, eff); })) continue;
        done.push_back(eff);
      }
      Layout x = l;
      x.compression = np.policy;
      x.compression_name = np.name;
      price(x);
    }
  };
  for_each_valid_layout(m, gpus, o, pins, [&](const Layout& l) {
    if (equivalent_to_simpler(l, o, pins)) return;
    if (l.zero != 3 || (l.dp == 1 && !pins.zeropp_pinned())) return price_policies(l);
    // ZeRO-3: plain and with each ZeRO++ preset (plan/zeropp.h), or as pinned.
    if (pins.zeropp_pinned()) return price_policies(with_knob_pins(resolve_zeropp(l, sys), pins));
    price_policies(l);
    Layout zpp = l, three = l;
    zpp.zeropp = ZeroPP::kZeroPP;
    three.zeropp = ZeroPP::kThreeLevel;
    zpp = resolve_zeropp(zpp, sys);
    three = resolve_zeropp(three, sys);
    price_policies(zpp);
    // "3-level" where the layout leaves it no level beside the node's is "zero++" again.
    if (three.hpz != zpp.hpz || three.hierarchy != zpp.hierarchy) price_policies(three);
  }, &res.stopped);
  if (res.evaluated == 0 && pins.compression && !refused.empty()) {
    throw_input("no layout of {} on {} devices can take --compression {}: {}", m.name, gpus, policy_text(*pins.compression),
                refused);
  }
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
  cmp("dp_replicate", x.dp_replicate, y.dp_replicate);
  cmp("micro-batch", x.micro_batch, y.micro_batch);
  cmp("zero", x.zero, y.zero);
  cmp("recompute", recompute_name(x.recompute), recompute_name(y.recompute));
  cmp("sequence-parallel", x.sequence_parallel, y.sequence_parallel);
  cmp("schedule", schedule_name(x.schedule), schedule_name(y.schedule));
  cmp("virtual-stages", x.virtual_stages, y.virtual_stages);
  cmp("zeropp", zeropp_name(x.zeropp), zeropp_name(y.zeropp));
  cmp("hpz", x.hpz, y.hpz);
  auto policy_of = [](const Layout& l) { return l.compression_name == "custom" ? l.compression.describe() : l.compression_name; };
  cmp("compression", policy_of(x), policy_of(y));
  struct Part {
    const char* name;
    double d;
  };
  std::vector<Part> parts = {{"compute", a.time.compute - b.time.compute},
                             {"TP communication", a.time.tp_comm - b.time.tp_comm},
                             {"pipeline bubble + p2p", a.time.pp_bubble - b.time.pp_bubble},
                             {"exposed DP communication", a.time.dp_exposed - b.time.dp_exposed},
                             {"optimizer", a.time.optimizer - b.time.optimizer},
                             {"stragglers", a.time.stragglers - b.time.stragglers},
                             {"per-step overhead", a.time.overhead - b.time.overhead}};
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
