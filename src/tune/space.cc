#include "tune/space.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>

#include "core/error.h"
#include "plan/compression.h"
#include "plan/search.h"
#include "plan/zeropp.h"

namespace weft::tune {

namespace {

double recompute_code(Recompute r) {
  switch (r) {
    case Recompute::kNone: return 0;
    case Recompute::kSelective: return 1;
    case Recompute::kFull: return 2;
  }
  return 0;
}

double schedule_code(PipeSchedule s) {
  switch (s) {
    case PipeSchedule::k1F1B: return 0;
    case PipeSchedule::kGpipe: return 1;
    case PipeSchedule::kInterleaved: return 2;
  }
  return 0;
}

double zeropp_code(plan::ZeroPP z) {
  switch (z) {
    case plan::ZeroPP::kNone: return 0;
    case plan::ZeroPP::kZeroPP: return 1;
    case plan::ZeroPP::kThreeLevel: return 2;
    case plan::ZeroPP::kCustom: return 3;
  }
  return 0;
}

double compression_code(const std::string& name) {
  const auto it = std::find(kCompressionKnobValues.begin(), kCompressionKnobValues.end(), name);
  return static_cast<double>((it == kCompressionKnobValues.end() ? kCompressionKnobValues.end() - 1 : it) -
                             kCompressionKnobValues.begin());
}

// The knobs whose values are names (recompute, sequence_parallel, schedule, zeropp, compression)
// and how many values each has.
int named_values(int knob) {
  switch (knob) {
    case 5: case 7: return 3;
    case 6: return 2;
    case 9: return 4;
    case 10: return static_cast<int>(kCompressionKnobValues.size());
    default: return 0;
  }
}

// The compression presets of the space: the system's, or a CPU's without a system file (the
// trials run on this machine).
std::vector<plan::NamedPolicy> space_presets(const plan::System* sys) {
  return sys != nullptr ? plan::compression_presets(*sys, true) : plan::compression_presets(/*cpu=*/true, true);
}

// Layout l plain and, at ZeRO 3 on more than one dp rank with a system file, as "zero++" and
// "3-level" (left out where it resolves to zero++'s knobs), as plan::search_layouts tries them.
std::vector<plan::Layout> zeropp_variants(const plan::Layout& l, const plan::System* sys) {
  std::vector<plan::Layout> out{l};
  if (l.zero != 3 || l.dp_shard() < 2 || sys == nullptr) return out;
  plan::Layout zpp = l, three = l;
  zpp.zeropp = plan::ZeroPP::kZeroPP;
  three.zeropp = plan::ZeroPP::kThreeLevel;
  zpp = plan::resolve_zeropp(zpp, *sys);
  three = plan::resolve_zeropp(three, *sys);
  out.push_back(zpp);
  if (three.hpz != zpp.hpz || three.hierarchy != zpp.hierarchy) out.push_back(three);
  return out;
}

// Each of the plain layouts with its ZeRO++ variants, each under every preset the layout
// takes, without two of the same effective codecs.
std::vector<plan::Layout> lossy_variants(const std::vector<plan::Layout>& plain, const plan::System* sys) {
  const std::vector<plan::NamedPolicy> presets = space_presets(sys);
  std::vector<plan::Layout> out;
  for (const plan::Layout& p : plain) {
    for (const plan::Layout& v : zeropp_variants(p, sys)) {
      std::vector<CompressionPolicy> done;
      for (const plan::NamedPolicy& np : presets) {
        if (!plan::compression_layout_error(np.policy, v).empty()) continue;
        const CompressionPolicy eff = plan::effective_policy(np.policy, v);
        if (std::any_of(done.begin(), done.end(), [&](const CompressionPolicy& d) { return plan::same_policy(d, eff); })) {
          continue;
        }
        done.push_back(eff);
        plan::Layout x = v;
        x.compression = np.policy;
        x.compression_name = np.name;
        out.push_back(x);
      }
    }
  }
  return out;
}

}  // namespace

std::vector<double> encode_layout(const plan::Layout& l) {
  return {std::log2(static_cast<double>(l.tp)),
          std::log2(static_cast<double>(l.pp)),
          std::log2(static_cast<double>(l.dp)),
          std::log2(static_cast<double>(l.micro_batch)),
          static_cast<double>(l.zero),
          recompute_code(l.recompute),
          l.sequence_parallel ? 1.0 : 0.0,
          schedule_code(l.schedule),
          static_cast<double>(l.virtual_stages),
          zeropp_code(l.zeropp),
          compression_code(l.compression_name)};
}

std::string knob_value_text(int knob, double v) {
  switch (knob) {
    case 0: case 1: case 2: case 3:
      return fmt::format("{:g}", std::exp2(v));
    case 5:
      return v < 0.5 ? "none" : v < 1.5 ? "selective" : "full";
    case 6:
      return v < 0.5 ? "false" : "true";
    case 7:
      return v < 0.5 ? "1f1b" : v < 1.5 ? "gpipe" : "interleaved";
    case 9:
      return v < 0.5 ? "none" : v < 1.5 ? "zero++" : v < 2.5 ? "3-level" : "custom";
    case 10:
      return kCompressionKnobValues[static_cast<size_t>(
          std::clamp(std::lround(v), 0L, static_cast<long>(kCompressionKnobValues.size()) - 1))];
    default:
      return fmt::format("{:g}", v);
  }
}

double knob_value_from_text(int knob, const std::string& t) {
  for (int v = 0; v < named_values(knob); ++v) {
    if (knob_value_text(knob, v) == t) return v;
  }
  if (named_values(knob) == 0) {
    char* end = nullptr;
    const double x = std::strtod(t.c_str(), &end);
    if (!t.empty() && end == t.c_str() + t.size() && std::isfinite(x) && x >= 0) {
      return knob <= 3 ? (x >= 1 ? std::log2(x) : -1.0) : x;
    }
  }
  throw_input("knob {}: '{}' is not one of its values", kKnobNames[static_cast<size_t>(knob)], t);
}

std::optional<size_t> LayoutSpace::find(const std::vector<double>& k) const {
  auto it = index_.find(k);
  if (it == index_.end()) return std::nullopt;
  return it->second;
}

std::vector<double> LayoutSpace::features(size_t i) const {
  std::vector<double> f = knobs[i];
  if (has_prediction()) f.push_back(std::log(predicted_s[i]));
  return f;
}

std::vector<size_t> LayoutSpace::by_prediction() const {
  if (!has_prediction()) return {};
  std::vector<size_t> order(size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return predicted_s[a] < predicted_s[b]; });
  return order;
}

LayoutSpace layout_space(const ModelConfig& model, int64_t seq, int64_t global_batch, Precision precision,
                         int world, const plan::System* sys, const plan::Options& opt, const std::string& order,
                         bool allow_lossy) {
  const plan::ModelShape shape = plan::ModelShape::from_config(model, seq);
  plan::Pins pins;
  pins.zeropp = plan::ZeroPP::kNone;
  pins.compression = plan::NamedPolicy{};  // none
  pins.recompute_layers = -1;
  pins.order = order;
  pins.dp_replicate = 1;  // HSDP's split is not one of the tuner's knobs (encode_layout): plain dp
  plan::Options o = opt;
  o.precision = precision;
  o.global_batch = global_batch;
  LayoutSpace s;
  s.layouts = plan::valid_layouts(shape, world, o, pins);  // InputError naming the values when none
  if (allow_lossy) s.layouts = lossy_variants(s.layouts, sys);
  for (size_t i = 0; i < s.layouts.size(); ++i) {
    s.knobs.push_back(encode_layout(s.layouts[i]));
    s.index_.emplace(s.knobs.back(), i);
    if (sys != nullptr) s.predicted_s.push_back(plan::predict(shape, *sys, s.layouts[i], o).step_time_s);
  }
  return s;
}

}  // namespace weft::tune
