#include "tune/space.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>

#include "core/error.h"
#include "plan/search.h"

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
          static_cast<double>(l.virtual_stages)};
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
    default:
      return fmt::format("{:g}", v);
  }
}

double knob_value_from_text(int knob, const std::string& t) {
  for (double v : {0.0, 1.0, 2.0}) {
    if ((knob == 5 || knob == 6 || knob == 7) && knob_value_text(knob, v) == t) return v;
  }
  if (knob != 5 && knob != 6 && knob != 7) {
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
                         int world, const plan::System* sys, const plan::Options& opt) {
  const plan::ModelShape shape = plan::ModelShape::from_config(model, seq);
  plan::Pins pins;
  pins.zeropp = plan::ZeroPP::kNone;
  pins.compression = plan::NamedPolicy{};  // none
  pins.recompute_layers = -1;
  pins.dp_replicate = 1;  // HSDP's split is not one of the tuner's knobs (encode_layout): plain dp
  plan::Options o = opt;
  o.precision = precision;
  o.global_batch = global_batch;
  LayoutSpace s;
  s.layouts = plan::valid_layouts(shape, world, o, pins);  // InputError naming the values when none
  for (size_t i = 0; i < s.layouts.size(); ++i) {
    s.knobs.push_back(encode_layout(s.layouts[i]));
    s.index_.emplace(s.knobs.back(), i);
    if (sys != nullptr) s.predicted_s.push_back(plan::predict(shape, *sys, s.layouts[i], o).step_time_s);
  }
  return s;
}

}  // namespace weft::tune
