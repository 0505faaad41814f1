#include "plan/system.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <toml++/toml.h>

#include "comm/codec_spec.h"
#include "core/error.h"

namespace weft::plan {

int64_t System::unit_devices(size_t i) const {
  if (i >= levels.size() || levels[i].devices <= 0) return INT64_MAX / 4;
  return levels[i].devices;
}

namespace {

void validate_shape_model(const std::string& name, const Device& d) {
  if (d.compute_units < 0 || d.compute_units > 100000) {
    throw_input("system '{}': device compute_units must be in [0, 100000], got {}", name, d.compute_units);
  }
  for (size_t i = 0; i < d.gemm_tiles.size(); ++i) {
    const GemmTile& t = d.gemm_tiles[i];
    if (!(t.m >= 1 && t.n >= 1 && t.m <= 4096 && t.n <= 4096) || !(t.fraction > 0 && t.fraction <= 1)) {
      throw_input("system '{}': gemm_tiles entry {} is [{}, {}, {}]: tile sides must be in [1, 4096] and the fraction in (0, 1]",
                  name, i, t.m, t.n, t.fraction);
    }
  }
  if (!(d.gemm_k_overhead >= 0 && d.gemm_k_overhead < 1e6)) {
    throw_input("system '{}': gemm_k_overhead must be in [0, 1e6), got {}", name, d.gemm_k_overhead);
  }
  if (d.gemm_align < 0 || d.gemm_align > 4096) throw_input("system '{}': gemm_align must be in [0, 4096], got {}", name, d.gemm_align);
  if (!(d.gemm_misaligned_fraction > 0 && d.gemm_misaligned_fraction <= 1)) {
    throw_input("system '{}': gemm_misaligned_fraction must be in (0, 1], got {}", name, d.gemm_misaligned_fraction);
  }
  for (double f : {d.attention_efficiency, d.attention_bwd_efficiency}) {
    if (!(f >= 0 && f <= 1)) {
      throw_input("system '{}': attention_efficiency ({}) and attention_bwd_efficiency ({}) must be in [0, 1]", name,
                  d.attention_efficiency, d.attention_bwd_efficiency);
    }
  }
  if ((d.attention_efficiency > 0) != (d.attention_bwd_efficiency > 0)) {
    throw_input("system '{}': give both attention_efficiency ({}) and attention_bwd_efficiency ({}), or neither", name,
                d.attention_efficiency, d.attention_bwd_efficiency);
  }
}

void validate_scale_model(const std::string& name, const SoftwareDefaults& s) {
  if (!(s.step_overhead >= 0 && s.step_overhead < 3600)) {
    throw_input("system '{}': [defaults] step_overhead must be in [0, 3600) seconds, got {}", name, s.step_overhead);
  }
  if (!(s.jitter >= 0 && s.jitter < 1)) throw_input("system '{}': [defaults] jitter must be in [0, 1), got {}", name, s.jitter);
  if (s.world_allreduces < 0 || s.world_allreduces > 1000) {
    throw_input("system '{}': [defaults] world_allreduces must be in [0, 1000], got {}", name, s.world_allreduces);
  }
  if (!(s.bubble_factor >= 1 && s.bubble_factor <= 100)) {
    throw_input("system '{}': [defaults] bubble_factor must be in [1, 100], got {}", name, s.bubble_factor);
  }
}

void validate_codecs(const std::string& name, const CodecRates& c) {
  if (!(c.cores >= 1 && c.cores <= 1e4)) throw_input("system '{}': [codecs] cores must be in [1, 10000], got {}", name, c.cores);
  if (!(c.zstd_ratio >= 0 && c.zstd_ratio <= 2)) {
    throw_input("system '{}': [codecs] zstd_ratio must be in [0, 2] (wire bytes per raw byte; 0: the nominal estimate), got {}",
                name, c.zstd_ratio);
  }
  for (const auto& [key, v] : c.per_core) {
    if (!(v.encode > 0 && v.decode > 0 && std::isfinite(v.encode) && std::isfinite(v.decode))) {
      throw_input("system '{}': [codecs] {} = [{}, {}]: encode and decode speeds (bytes of fp32 input per second) must be "
                  "positive",
                  name, key, v.encode, v.decode);
    }
  }
}

}  // namespace

void System::validate() const {
  const Device& d = device;
  if (!(d.peak_flops_16 > 0) || !(d.peak_flops_32 > 0)) {
    throw_input("system '{}': device peak_flops_16 ({}) and peak_flops_32 ({}) must be positive", name, d.peak_flops_16,
                d.peak_flops_32);
  }
  if (!(d.memory_bytes > 0) || !(d.memory_bandwidth > 0)) {
    throw_input("system '{}': device memory_bytes ({}) and memory_bandwidth ({}) must be positive", name, d.memory_bytes,
                d.memory_bandwidth);
  }
  if (!(d.matmul_efficiency > 0 && d.matmul_efficiency <= 1)) {
    throw_input("system '{}': device matmul_efficiency must be in (0, 1], got {}", name, d.matmul_efficiency);
  }
  if (!(d.kernel_latency >= 0)) throw_input("system '{}': kernel_latency must be >= 0, got {}", name, d.kernel_latency);
  for (const auto& [fn, rate] : d.function_rates) {
    if (!(rate > 0) || !std::isfinite(rate)) {
      throw_input("system '{}': function_rates.{} must be a positive number of elements per second, got {}", name, fn,
                  rate);
    }
  }
  validate_shape_model(name, d);
  validate_scale_model(name, defaults);
  validate_codecs(name, codecs);
  for (size_t i = 0; i < d.matmul_curve.size(); ++i) {
    const auto& [f, e] = d.matmul_curve[i];
    if (!(f > 0) || !(e > 0 && e <= 1.5)) {
      throw_input("system '{}': matmul_curve point {} is [{}, {}]: FLOPs must be > 0 and the fraction in (0, 1.5]", name,
                  i, f, e);
    }
    if (i > 0 && !(f > d.matmul_curve[i - 1].first)) {
      throw_input("system '{}': matmul_curve FLOPs must increase, point {} has {} after {}", name, i, f,
                  d.matmul_curve[i - 1].first);
    }
  }
  if (levels.empty()) throw_input("system '{}': needs at least one [[level]] of links", name);
  int64_t prev = 1;
  for (size_t i = 0; i < levels.size(); ++i) {
    const LinkLevel& l = levels[i];
    if (!(l.bandwidth > 0) || !(l.latency >= 0)) {
      throw_input("system '{}': level '{}' needs bandwidth > 0 (got {}) and latency >= 0 (got {})", name, l.name,
                  l.bandwidth, l.latency);
    }
    const bool top = i + 1 == levels.size();
    if (!top && l.devices <= 0) {
      throw_input("system '{}': level '{}' is not the last, so it needs devices > 0 (got {})", name, l.name, l.devices);
    }
    if (l.devices > 0) {
      if (l.devices <= prev || l.devices % prev != 0) {
        throw_input("system '{}': level '{}' has {} devices per unit, which must be a multiple of the {} of the level below",
                    name, l.name, l.devices, prev);
      }
      prev = l.devices;
    }
  }
}

namespace {

struct Reader {
  std::string path;
  const toml::table* tbl;
  std::string section;
  std::set<std::string> seen;

  const toml::node* get(const std::string& key) {
    seen.insert(key);
    return tbl->get(key);
  }
  double number(const std::string& key, double def, bool required) {
    const toml::node* n = get(key);
    if (!n) {
      if (required) throw_input("{}: [{}] needs '{}'", path, section, key);
      return def;
    }
    auto v = n->value<double>();
    if (!v || n->is_boolean()) throw_input("{}: [{}] {} must be a number", path, section, key);
    // inf/nan would pass the "> 0" checks of System::validate and poison every prediction.
    if (!std::isfinite(*v)) throw_input("{}: [{}] {} must be a finite number, got {}", path, section, key, *v);
    return *v;
  }
  std::string string(const std::string& key, const std::string& def) {
    const toml::node* n = get(key);
    if (!n) return def;
    auto v = n->value<std::string>();
    if (!v) throw_input("{}: [{}] {} must be a string", path, section, key);
    return *v;
  }
  bool boolean(const std::string& key, bool def) {
    const toml::node* n = get(key);
    if (!n) return def;
    // toml++'s value<bool>() converts an integer; a system file says true or false.
    if (!n->is_boolean()) throw_input("{}: [{}] {} must be true or false", path, section, key);
    return *n->value<bool>();
  }
  void finish() {
    for (auto&& [k, v] : *tbl) {
      if (!seen.count(std::string(k.str()))) {
        std::string known;
        for (const auto& s : seen) known += (known.empty() ? "" : ", ") + s;
        throw_input("{}: unknown key '{}' in [{}] (known: {})", path, k.str(), section, known);
      }
    }
  }
};

}  // namespace

namespace {

// A path that names a folder or an unreadable file is refused before TOML sees it (toml++
// reads a folder as an empty document).
void check_system_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw_input("system file {} does not exist (see systems/*.toml)", path);
  if (std::filesystem::is_directory(path, ec)) {
    throw_input("system file {} is a folder, not a system file (give a .toml file, e.g. systems/local.toml)", path);
  }
  if (!std::ifstream(path)) throw_input("system file {} cannot be read (permissions?)", path);
}

// A level's devices per unit: a whole number (0: the whole machine), not 1e30 or 2.5.
int64_t level_devices(const std::string& path, double v) {
  if (v < 0 || v > 1e12 || v != std::floor(v)) {
    throw_input("{}: [[level]] devices must be a whole number in [0, 1e12] (0: every device), got {}", path, v);
  }
  return static_cast<int64_t>(v);
}

// A count read as a TOML number: whole and in range, or the error names it.
int whole(const std::string& path, const char* section, const char* key, double v) {
  if (v < 0 || v > 1e6 || v != std::floor(v)) throw_input("{}: [{}] {} must be a whole number in [0, 1e6], got {}", path, section, key, v);
  return static_cast<int>(v);
}

void read_shape_model(const std::string& path, Reader& r, Device& d) {
  d.compute_units = whole(path, "device", "compute_units", r.number("compute_units", 0, false));
  if (const toml::node* c = r.get("gemm_tiles")) {
    const toml::array* arr = c->as_array();
    if (!arr) throw_input("{}: [device] gemm_tiles must be an array of [tile_m, tile_n, fraction] triples", path);
    for (const auto& p : *arr) {
      const toml::array* t = p.as_array();
      if (!t || t->size() != 3 || !t->get(0)->value<double>() || !t->get(1)->value<double>() || !t->get(2)->value<double>()) {
        throw_input("{}: [device] gemm_tiles entries must be [tile_m, tile_n, fraction] triples of numbers", path);
      }
      d.gemm_tiles.push_back({*t->get(0)->value<double>(), *t->get(1)->value<double>(), *t->get(2)->value<double>()});
    }
  }
  if (d.compute_units > 0 && d.gemm_tiles.empty()) d.gemm_tiles.push_back(GemmTile{});
  d.gemm_k_overhead = r.number("gemm_k_overhead", 0, false);
  d.gemm_align = whole(path, "device", "gemm_align", r.number("gemm_align", 0, false));
  d.gemm_misaligned_fraction = r.number("gemm_misaligned_fraction", 1.0, false);
  d.attention_efficiency = r.number("attention_efficiency", 0, false);
  d.attention_bwd_efficiency = r.number("attention_bwd_efficiency", 0, false);
}

// A [codecs] key that names a codec: a family (every rate or level) or one codec.
void check_codec_key(const std::string& path, const std::string& key) {
  for (const char* family : {"bf16", "fp16", "int8", "int4", "zfp", "zstd"}) {
    if (key == family) return;
  }
  CodecSpec c;
  try {
    c = parse_codec(key, path + ": [codecs] key");
  } catch (const InputError&) {
    throw_input("{}: unknown key '{}' in [codecs] (known: cores, zstd_ratio, and codec names: bf16, fp16, int8, int4, zfp, "
                "zfp:RATE, zstd, zstd:LEVEL)",
                path, key);
  }
  if (c.off()) throw_input("{}: [codecs] off: 'off' is no codec, it has no speed", path);
}

// [codecs]: cores, zstd_ratio and [encode, decode] per codec name.
CodecRates read_codecs(const std::string& path, const toml::table& t) {
  CodecRates c;
  for (auto&& [k, v] : t) {
    const std::string key(k.str());
    if (key == "cores" || key == "zstd_ratio") {
      auto x = v.value<double>();
      if (!x || v.is_boolean()) throw_input("{}: [codecs] {} must be a number", path, key);
      if (!std::isfinite(*x)) throw_input("{}: [codecs] {} must be a finite number, got {}", path, key, *x);
      (key == "cores" ? c.cores : c.zstd_ratio) = *x;
      continue;
    }
    check_codec_key(path, key);
    const toml::array* a = v.as_array();
    if (!a || a->size() != 2 || !a->get(0)->value<double>() || !a->get(1)->value<double>()) {
      throw_input("{}: [codecs] {} must be [encode, decode] in bytes of fp32 input per second and core", path, key);
    }
    c.per_core[key] = CodecSpeed{*a->get(0)->value<double>(), *a->get(1)->value<double>()};
  }
  return c;
}

}  // namespace

std::string implicit_system_path() {
  if (const char* e = std::getenv("WEFT_SYSTEM"); e != nullptr && *e != '\0') {
    return std::string(e) == "none" ? std::string() : std::string(e);
  }
  std::error_code ec;
  return std::filesystem::is_regular_file("systems/local.toml", ec) ? "systems/local.toml" : "";
}

System load_system(const std::string& path) {
  check_system_file(path);
  toml::table tbl;
  try {
    tbl = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    const auto& src = e.source();
    throw_input("{}:{}:{}: invalid TOML: {}", path, src.begin.line, src.begin.column, e.description());
  }
  System s;
  s.path = path;
  s.name = std::filesystem::path(path).stem().string();
  for (auto&& [k, v] : tbl) {
    const std::string key(k.str());
    if (key != "system" && key != "device" && key != "level" && key != "defaults" && key != "codecs" &&
        key != "machine") {
      throw_input("{}: unknown section '{}' (known: [system], [device], [[level]], [defaults], [codecs], [machine])",
                  path, key);
    }
  }
  if (const toml::table* t = tbl["system"].as_table()) {
    Reader r{path, t, "system", {}};
    s.name = r.string("name", s.name);
    s.description = r.string("description", "");
    r.finish();
  }
  const toml::table* dt = tbl["device"].as_table();
  if (!dt) throw_input("{}: needs a [device] section", path);
  {
    Reader r{path, dt, "device", {}};
    Device& d = s.device;
    d.name = r.string("name", "device");
    d.peak_flops_16 = r.number("peak_flops_16", 0, true);
    d.peak_flops_32 = r.number("peak_flops_32", 0, true);
    d.memory_bytes = r.number("memory_bytes", 0, true);
    d.memory_bandwidth = r.number("memory_bandwidth", 0, true);
    d.matmul_efficiency = r.number("matmul_efficiency", 1.0, false);
    d.kernel_latency = r.number("kernel_latency", 0, false);
    if (const toml::node* fr = r.get("function_rates")) {
      const toml::table* t = fr->as_table();
      if (!t) throw_input("{}: [device] function_rates must be a table of function = elements per second", path);
      for (const auto& [key, value] : *t) {
        const std::optional<double> v = value.value<double>();
        if (!v) throw_input("{}: [device] function_rates.{} must be a number", path, key.str());
        d.function_rates[std::string(key.str())] = *v;
      }
    }
    d.fp32_kernel = r.string("fp32_kernel", "");
    d.native_bf16 = r.boolean("native_bf16", false);
    if (!cpu_fp32_kernel_known(d.fp32_kernel)) {
      throw_input("{}: [device] fp32_kernel = '{}': expected one of: {}", path, d.fp32_kernel, kCpuFp32Kernels);
    }
    if (const toml::node* c = r.get("matmul_curve")) {
      const toml::array* arr = c->as_array();
      if (!arr) throw_input("{}: [device] matmul_curve must be an array of [FLOPs, fraction] pairs", path);
      for (const auto& p : *arr) {
        const toml::array* pair = p.as_array();
        if (!pair || pair->size() != 2 || !pair->get(0)->value<double>() || !pair->get(1)->value<double>()) {
          throw_input("{}: [device] matmul_curve entries must be [FLOPs, fraction] pairs of numbers", path);
        }
        d.matmul_curve.emplace_back(*pair->get(0)->value<double>(), *pair->get(1)->value<double>());
      }
    }
    read_shape_model(path, r, d);
    r.finish();
  }
  const toml::array* levels = tbl["level"].as_array();
  if (!levels) throw_input("{}: needs [[level]] entries (link levels, innermost first)", path);
  for (const auto& node : *levels) {
    const toml::table* lt = node.as_table();
    if (!lt) throw_input("{}: every [[level]] must be a table", path);
    Reader r{path, lt, "level", {}};
    LinkLevel l;
    l.name = r.string("name", fmt::format("level{}", s.levels.size()));
    l.devices = level_devices(path, r.number("devices", 0, false));
    l.bandwidth = r.number("bandwidth", 0, true);
    l.latency = r.number("latency", 0, true);
    r.finish();
    s.levels.push_back(l);
  }
  if (const toml::table* t = tbl["defaults"].as_table()) {
    Reader r{path, t, "defaults", {}};
    s.defaults.flash_attention = r.boolean("flash_attention", false);
    s.defaults.dropout = r.boolean("dropout", false);
    s.defaults.attention_16 = r.boolean("attention_16", true);
    s.defaults.fp32_grad_accumulation = r.boolean("fp32_grad_accumulation", true);
    s.defaults.overlap_dp = r.boolean("overlap_dp", true);
    s.defaults.pp_scatter_gather = r.boolean("pp_scatter_gather", true);
    s.defaults.memory_model = r.string("memory_model", "megatron");
    s.defaults.step_overhead = r.number("step_overhead", 0, false);
    s.defaults.jitter = r.number("jitter", 0, false);
    s.defaults.world_allreduces = whole(path, "defaults", "world_allreduces", r.number("world_allreduces", 0, false));
    s.defaults.bubble_factor = r.number("bubble_factor", 1.0, false);
    if (s.defaults.memory_model != "megatron" && s.defaults.memory_model != "weft") {
      throw_input("{}: [defaults] memory_model = '{}': expected 'megatron' or 'weft'", path, s.defaults.memory_model);
    }
    // Absent: the software the memory model describes (files `weft calibrate` wrote before
    // this key existed say memory_model = "weft").
    s.defaults.tp_comm = r.string("tp_comm", s.defaults.memory_model);
    s.defaults.pp_p2p_overlap = r.boolean("pp_p2p_overlap", true);
    if (s.defaults.tp_comm != "megatron" && s.defaults.tp_comm != "weft") {
      throw_input("{}: [defaults] tp_comm = '{}': expected 'megatron' or 'weft'", path, s.defaults.tp_comm);
    }
    r.finish();
  }
  if (const toml::table* t = tbl["codecs"].as_table()) s.codecs = read_codecs(path, *t);
  if (const toml::table* t = tbl["machine"].as_table()) {
    Reader r{path, t, "machine", {}};
    MachineFingerprint& m = s.machine;
    m.cpu = r.string("cpu", "");
    m.hardware_threads = whole(path, "machine", "hardware_threads", r.number("hardware_threads", 0, false));
    m.ranks = whole(path, "machine", "ranks", r.number("ranks", 0, false));
    m.threads = whole(path, "machine", "threads", r.number("threads", 0, false));
    m.blas = r.string("blas", "");
    m.onednn = r.string("onednn", "");
    m.other_load = r.number("other_load", 0, false);
    m.spread = r.number("spread", 0, false);
    if (m.other_load < 0 || m.spread < 0) {
      throw_input("{}: [machine] other_load and spread must be >= 0, got {} and {}", path, m.other_load, m.spread);
    }
    r.finish();
  }
  try {
    s.validate();
  } catch (const InputError& e) {
    throw_input("{}: {}", path, e.what());
  }
  return s;
}

std::string system_to_toml(const System& s, const std::vector<std::string>& notes) {
  std::string out;
  for (const auto& n : notes) out += "# " + n + "\n";
  out += fmt::format("\n[system]\nname = \"{}\"\ndescription = \"{}\"\n", s.name, s.description);
  const Device& d = s.device;
  out += fmt::format(
      "\n[device]\nname = \"{}\"\npeak_flops_16 = {:.6g}\npeak_flops_32 = {:.6g}\nmemory_bytes = {:.6g}\n"
      "memory_bandwidth = {:.6g}\nmatmul_efficiency = {:.4g}\nkernel_latency = {:.4g}\n",
      d.name, d.peak_flops_16, d.peak_flops_32, d.memory_bytes, d.memory_bandwidth, d.matmul_efficiency,
      d.kernel_latency);
  if (!d.matmul_curve.empty()) {
    out += "matmul_curve = [";
    for (size_t i = 0; i < d.matmul_curve.size(); ++i) {
      out += fmt::format("{}[{:.6g}, {:.4f}]", i ? ", " : "", d.matmul_curve[i].first, d.matmul_curve[i].second);
    }
    out += "]\n";
  }
  if (d.compute_units > 0) {
    out += fmt::format("compute_units = {}\ngemm_tiles = [", d.compute_units);
    for (size_t i = 0; i < d.gemm_tiles.size(); ++i) {
      out += fmt::format("{}[{}, {}, {:.4g}]", i ? ", " : "", d.gemm_tiles[i].m, d.gemm_tiles[i].n, d.gemm_tiles[i].fraction);
    }
    out += fmt::format("]\ngemm_k_overhead = {:.6g}\ngemm_align = {}\ngemm_misaligned_fraction = {:.4g}\n",
                       d.gemm_k_overhead, d.gemm_align, d.gemm_misaligned_fraction);
  }
  if (!d.function_rates.empty()) {
    out += "function_rates = {";
    bool first = true;
    for (const auto& [fn, rate] : d.function_rates) {
      out += fmt::format("{} {} = {:.6g}", first ? "" : ",", fn, rate);
      first = false;
    }
    out += " }\n";
  }
  if (!d.fp32_kernel.empty()) out += fmt::format("fp32_kernel = \"{}\"\n", d.fp32_kernel);
  if (d.native_bf16) out += "native_bf16 = true\n";
  if (d.attention_efficiency > 0) {
    out += fmt::format("attention_efficiency = {:.4g}\nattention_bwd_efficiency = {:.4g}\n", d.attention_efficiency,
                       d.attention_bwd_efficiency);
  }
  for (const auto& l : s.levels) {
    out += fmt::format("\n[[level]]\nname = \"{}\"\ndevices = {}\nbandwidth = {:.6g}\nlatency = {:.6g}\n", l.name,
                       l.devices, l.bandwidth, l.latency);
  }
  out += fmt::format(
      "\n[defaults]\nflash_attention = {}\ndropout = {}\nfp32_grad_accumulation = {}\noverlap_dp = {}\npp_scatter_gather = {}\nmemory_model = \"{}\"\n",
      s.defaults.flash_attention, s.defaults.dropout, s.defaults.fp32_grad_accumulation, s.defaults.overlap_dp,
      s.defaults.pp_scatter_gather, s.defaults.memory_model);
  out += fmt::format("tp_comm = \"{}\"\npp_p2p_overlap = {}\nattention_16 = {}\n", s.defaults.tp_comm,
                     s.defaults.pp_p2p_overlap, s.defaults.attention_16);
  out += fmt::format("step_overhead = {:.6g}\njitter = {:.6g}\nworld_allreduces = {}\nbubble_factor = {:.6g}\n",
                     s.defaults.step_overhead, s.defaults.jitter, s.defaults.world_allreduces, s.defaults.bubble_factor);
  if (!s.machine.empty()) {
    const MachineFingerprint& m = s.machine;
    const auto esc = [](std::string v) {  // a TOML basic string
      std::string o;
      for (char c : v) {
        if (c == '"' || c == '\\') o += '\\';
        if (static_cast<unsigned char>(c) >= 0x20) o += c;
      }
      return o;
    };
    out += fmt::format(
        "\n[machine]\ncpu = \"{}\"\nhardware_threads = {}\nranks = {}\nthreads = {}\nblas = \"{}\"\nonednn = \"{}\"\n"
        "other_load = {:.3g}\nspread = {:.3g}\n",
        esc(m.cpu), m.hardware_threads, m.ranks, m.threads, esc(m.blas), esc(m.onednn), m.other_load, m.spread);
  }
  if (!s.codecs.empty()) {
    out += fmt::format("\n[codecs]\ncores = {:.6g}\n", s.codecs.cores);
    if (s.codecs.zstd_ratio > 0) out += fmt::format("zstd_ratio = {:.6g}\n", s.codecs.zstd_ratio);
    for (const auto& [name, v] : s.codecs.per_core) {
      out += fmt::format("\"{}\" = [{:.6g}, {:.6g}]\n", name, v.encode, v.decode);
    }
  }
  return out;
}

}  // namespace weft::plan
