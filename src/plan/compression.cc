#include "plan/compression.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <sstream>

#include "core/error.h"

namespace weft::plan {

namespace {

// The [codecs] family a codec's speed is looked up under when its own name is absent.
const char* family(CodecKind k) {
  switch (k) {
    case CodecKind::kOff: return "off";
    case CodecKind::kBf16: return "bf16";
    case CodecKind::kFp16: return "fp16";
    case CodecKind::kInt8: return "int8";
    case CodecKind::kInt4: return "int4";
    case CodecKind::kZfp: return "zfp";
    case CodecKind::kZstd: return "zstd";
  }
  return "off";
}

bool cpu_only(const CodecSpec& c) { return c.kind == CodecKind::kZfp || c.kind == CodecKind::kZstd; }

// Per-core placeholders for CPU devices (see compression.h: ASSUMED until measured).
CodecSpeed cpu_default(CodecKind k) {
  switch (k) {
    case CodecKind::kInt8:
    case CodecKind::kInt4: return {1.3e9, 2.0e9};
    case CodecKind::kZfp: return {0.15e9, 0.17e9};
    case CodecKind::kZstd: return {0.5e9, 1.0e9};
    case CodecKind::kBf16:
    case CodecKind::kFp16: return {2.0e9, 2.0e9};
    case CodecKind::kOff: break;
  }
  return {};
}

bool same_codec(const CodecSpec& a, const CodecSpec& b) {
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case CodecKind::kZfp: return a.rate == b.rate;
    case CodecKind::kZstd: return a.level == b.level;
    case CodecKind::kInt8:
    case CodecKind::kInt4: return a.block == b.block;
    default: return true;
  }
}

struct AxisRef {
  const char* name;
  CodecSpec CompressionPolicy::*codec;
};
constexpr AxisRef kAxes[] = {{"dp", &CompressionPolicy::dp},
                             {"params", &CompressionPolicy::params},
                             {"tp", &CompressionPolicy::tp},
                             {"pp", &CompressionPolicy::pp}};

constexpr const char* kForms =
    "none, hybrid, hybrid-zfp, uniform-CODEC (e.g. uniform-int8, uniform-zfp:8), or axis=codec pairs joined by ',' "
    "(dp, params, tp, pp; ef=on|off), e.g. dp=int4,params=int8,tp=bf16";

// A custom policy "dp=int4,tp=bf16,ef=on".
CompressionPolicy parse_custom(const std::string& text) {
  CompressionPolicy p;
  std::stringstream ss(text);
  std::string item;
  std::vector<std::string> seen;
  while (std::getline(ss, item, ',')) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos) throw_input("--compression {}: '{}' is not axis=codec (forms: {})", text, item, kForms);
    const std::string axis = item.substr(0, eq), value = item.substr(eq + 1);
    if (std::find(seen.begin(), seen.end(), axis) != seen.end()) {
      throw_input("--compression {}: {} is given twice", text, axis);
    }
    seen.push_back(axis);
    if (axis == "ef") {
      if (value != "on" && value != "off") throw_input("--compression {}: ef must be on or off, got '{}'", text, value);
      p.error_feedback = value == "on";
      continue;
    }
    bool known = false;
    for (const AxisRef& a : kAxes) {
      if (axis == a.name) {
        p.*a.codec = parse_codec(value, fmt::format("--compression {}", axis));
        known = true;
      }
    }
    if (!known) throw_input("--compression {}: unknown axis '{}' (axes: dp, params, tp, pp, ef)", text, axis);
  }
  if (p.error_feedback && p.dp.off()) {
    throw_input("--compression {}: ef=on is error feedback on the dp codec, but dp is off", text);
  }
  return p;
}

CompressionPolicy uniform(const CodecSpec& c) {
  CompressionPolicy p;
  p.dp = p.params = p.tp = p.pp = c;
  return p;
}

CompressionPolicy hybrid(const CodecSpec& dp) {
  CompressionPolicy p;
  p.dp = dp;
  p.params = parse_codec("bf16", "hybrid params");  // int8 gathers cost 2-3% of loss (docs/compression.md)
  p.tp = parse_codec("bf16", "hybrid tp");
  return p;
}

}  // namespace

std::vector<std::string> measured_loss_costs(const CompressionPolicy& p) {
  std::vector<std::string> out;
  const auto lossy = [](const CodecSpec& c) { return !c.off() && c.kind != CodecKind::kZstd; };
  const auto narrow = [](const CodecSpec& c) { return c.kind == CodecKind::kInt8 || c.kind == CodecKind::kInt4; };
  if (lossy(p.params)) {
    out.push_back(narrow(p.params)
                      ? fmt::format("params {}: int8 parameter gathers cost 2-3% of the validation loss late in the run "
                                    "(the working copy misses updates smaller than a quantization step){}",
                                    p.params.name(), p.params.kind == CodecKind::kInt4 ? "; int4 is coarser, not measured"
                                                                                         : "")
                      : fmt::format("params {}: bf16 gathers kept the loss within 1% (+0.08% beside int4 gradients "
                                    "with error feedback){}",
                                    p.params.name(), p.params.kind == CodecKind::kBf16 ? "" : "; this codec not measured"));
  }
  for (const auto& [axis, c] : {std::pair<const char*, const CodecSpec*>{"tp", &p.tp}, {"pp", &p.pp}}) {
    if (!lossy(*c)) continue;
    if (c->kind == CodecKind::kBf16) {
      out.push_back(fmt::format("{} bf16: no change to the loss (-0.2%, the control run)", axis));
    } else if (c->kind == CodecKind::kInt4) {
      out.push_back(fmt::format("{} int4: 16-18% relative error into every layer's activations; the run with int4 on "
                                "every axis did not train",
                                axis));
    } else {
      out.push_back(fmt::format("{} {}: not measured on activations", axis, c->name()));
    }
  }
  if (lossy(p.dp)) {
    out.push_back(narrow(p.dp) ? fmt::format("dp {}{}: gradients with error feedback reached the baseline's loss (with "
                                             "bf16 parameters); without it, not measured apart",
                                             p.dp.name(), p.error_feedback ? " with error feedback" : "")
                               : fmt::format("dp {}: not measured in the loss study", p.dp.name()));
  }
  return out;
}

bool gpu_device(const Device& d) { return d.compute_units > 0; }

CodecSpeed codec_speed(const System& sys, const CodecSpec& c, std::string* source) {
  if (c.off()) throw_input("codec_speed: 'off' has no speed");
  if (cpu_only(c) && gpu_device(sys.device)) {
    throw_input("{} on system '{}': zfp and zstd run on the CPU only in weft (libzfp and libzstd have no GPU path here), "
                "and '{}' is a GPU system ({}, {} compute units); use bf16, fp16, int8 or int4",
                c.name(), sys.name, sys.name, sys.device.name, sys.device.compute_units);
  }
  const CodecRates& r = sys.codecs;
  for (const std::string& key : {c.name(), std::string(family(c.kind))}) {
    if (auto it = r.per_core.find(key); it != r.per_core.end()) {
      if (source) *source = fmt::format("[codecs] {} x {:g} cores", key, r.cores);
      return {it->second.encode * r.cores, it->second.decode * r.cores};
    }
  }
  if (gpu_device(sys.device)) {
    // Element-wise and memory-bound: 4 bytes in and w out per value (encode), w in and 4 out
    // (decode).
    const double w = 4 * codec_nominal_ratio(c), B = sys.device.memory_bandwidth;
    if (source) *source = fmt::format("memory-bound at {:.3g} TB/s", B / 1e12);
    return {4 * B / (4 + w), 4 * B / (4 + w)};
  }
  if (source) *source = fmt::format("assumed CPU default x {:g} cores", r.cores);
  const CodecSpeed d = cpu_default(c.kind);
  return {d.encode * r.cores, d.decode * r.cores};
}

double wire_ratio(const System& sys, const CodecSpec& c, double elem_bytes) {
  if (c.off()) return 1.0;
  if (!(elem_bytes > 0)) throw_input("wire_ratio: element bytes must be positive, got {}", elem_bytes);
  if (c.kind == CodecKind::kZstd) return sys.codecs.zstd_ratio > 0 ? sys.codecs.zstd_ratio : codec_nominal_ratio(c);
  return 4 * codec_nominal_ratio(c) / elem_bytes;
}

CodecWork codec_work(Collective kind, int64_t n, double values) {
  const double nn = static_cast<double>(n);
  switch (kind) {
    case Collective::kAllReduce: return {values + values / nn, values * (nn - 1) / nn + values};
    case Collective::kReduceScatter: return {values, values * (nn - 1) / nn};
    case Collective::kAllGather: return {values / nn, values};
    case Collective::kSendRecv: return {values, values};
    case Collective::kAllToAll: break;
  }
  throw_input("an all-to-all has no codec of its own in the planner (ZeRO++'s qgZ quantizes its hops)");
}

double codec_seconds(const System& sys, const CodecSpec& c, const CodecWork& w) {
  if (c.off()) return 0.0;
  const CodecSpeed s = codec_speed(sys, c);
  return 4 * w.encode / s.encode + 4 * w.decode / s.decode;
}

PricedCall price_call(const System& sys, const CodecSpec& c, Collective kind, int64_t n, int64_t stride,
                      double raw_bytes, double elem_bytes) {
  PricedCall r;
  r.raw_bytes = raw_bytes;
  r.wire_bytes = c.off() ? raw_bytes : raw_bytes * wire_ratio(sys, c, elem_bytes);
  r.link = collective_cost(sys, kind, n, stride, r.wire_bytes);
  if (!c.off() && n > 1 && raw_bytes > 0) r.codec_s = codec_seconds(sys, c, codec_work(kind, n, raw_bytes / elem_bytes));
  return r;
}

bool lossless(const CompressionPolicy& p) {
  return p.dp.lossless() && p.params.lossless() && p.tp.lossless() && p.pp.lossless();
}

bool same_policy(const CompressionPolicy& a, const CompressionPolicy& b) {
  for (const AxisRef& x : kAxes) {
    if (!same_codec(a.*x.codec, b.*x.codec)) return false;
  }
  return a.error_feedback == b.error_feedback;
}

NamedPolicy parse_compression(const std::string& text) {
  if (text == "none") return {"none", {}};
  if (text == "hybrid") return {"hybrid", hybrid(parse_codec("int4", "hybrid dp"))};
  if (text == "hybrid-zfp") return {"hybrid-zfp", hybrid(parse_codec("zfp:8", "hybrid-zfp dp"))};
  if (text.rfind("uniform-", 0) == 0) {
    const CodecSpec c = parse_codec(text.substr(8), fmt::format("--compression {}", text));
    if (c.off()) throw_input("--compression {}: uniform-off is 'none'", text);
    return {text, uniform(c)};
  }
  if (text.find('=') != std::string::npos) return {"custom", parse_custom(text)};
  throw_input("--compression {}: not a compression policy (forms: {}; 'any' lets the search try lossy presets)", text,
              kForms);
}

std::vector<NamedPolicy> compression_presets(const System& sys, bool allow_lossy) {
  return compression_presets(!gpu_device(sys.device), allow_lossy);
}

std::vector<NamedPolicy> compression_presets(bool cpu, bool allow_lossy) {
  std::vector<std::string> names{"none"};
  if (cpu) names.push_back("uniform-zstd");
  if (allow_lossy) {
    for (const char* n : {"hybrid", "uniform-bf16", "uniform-fp16", "uniform-int8", "uniform-int4"}) names.push_back(n);
    if (cpu) names.insert(names.end(), {"hybrid-zfp", "uniform-zfp:8"});
  }
  std::vector<NamedPolicy> out;
  for (const std::string& n : names) out.push_back(parse_compression(n));
  return out;
}

std::string compression_system_error(const CompressionPolicy& p, const System& sys) {
  if (!gpu_device(sys.device)) return "";
  std::vector<std::string> bad;
  for (const AxisRef& a : kAxes) {
    const CodecSpec& c = p.*a.codec;
    if (cpu_only(c)) bad.push_back(fmt::format("{}={}", a.name, c.name()));
  }
  if (bad.empty()) return "";
  return fmt::format("compression {} on system '{}' ({}, a GPU with {} compute units): zfp and zstd run on the CPU only in "
                     "weft (libzfp and libzstd have no GPU path here); use bf16, fp16, int8 or int4 there",
                     fmt::join(bad, " "), sys.name, sys.device.name, sys.device.compute_units);
}

std::string compression_layout_error(const CompressionPolicy& p, const Layout& l) {
  // The trainer refuses the same (train/engine_config.cc run_compression): its compressing
  // communicators span the whole dp group, HSDP reduces inside dp_shard and across the replicas.
  if (l.dp_replicate > 1 && !(p.dp.off() && p.params.off())) {
    return fmt::format("compression dp={} params={} with dp_replicate {} (HSDP): compressed data-parallel collectives "
                       "run over the whole dp group, not yet over dp_shard x dp_replicate; set dp and params off, or "
                       "dp_replicate 1",
                       p.dp.name(), p.params.name(), l.dp_replicate);
  }
  if (!l.zeropp_on() || (p.dp.off() && p.params.off())) return "";
  return fmt::format("compression dp={} params={} with ZeRO++ ({}): ZeRO++'s qwz/hpz/qgz already quantize or move the "
                     "data-parallel collectives; set dp and params off, or ZeRO++ off",
                     p.dp.name(), p.params.name(), l.describe());
}

std::vector<std::string> compression_warnings(const CompressionPolicy& p, const Layout& l) {
  std::vector<std::string> w;
  auto warn = [&](const CodecSpec& c, const char* axis, const std::string& why) {
    if (!c.off()) w.push_back(fmt::format("compression {}={} has nothing to compress: {}", axis, c.name(), why));
  };
  if (l.dp <= 1) {
    warn(p.dp, "dp", "dp 1 reduces no gradients");
    warn(p.params, "params", "dp 1 gathers no parameters");
  } else if (l.zero == 0) {
    warn(p.params, "params", "zero 0 gathers no parameters (every rank updates all of them)");
  }
  if (l.tp <= 1) warn(p.tp, "tp", "tp 1 makes no tensor-parallel collectives");
  if (l.pp <= 1) warn(p.pp, "pp", "pp 1 sends nothing between stages");
  return w;
}

CompressionPolicy effective_policy(const CompressionPolicy& p, const Layout& l) {
  CompressionPolicy e = p;
  if (l.dp <= 1) e.dp = e.params = CodecSpec{};
  if (l.zero == 0) e.params = CodecSpec{};
  if (l.tp <= 1) e.tp = CodecSpec{};
  if (l.pp <= 1) e.pp = CodecSpec{};
  if (e.dp.off()) e.error_feedback = false;
  return e;
}

}  // namespace weft::plan
