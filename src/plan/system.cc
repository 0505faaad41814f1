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
  for (size_t i = 0; i < s.sync_jitter.size(); ++i) {
    const auto& [seg, cv] = s.sync_jitter[i];
    if (!(seg > 0 && seg < 3600) || !(cv >= 0 && cv < 1) || (i > 0 && !(seg > s.sync_jitter[i - 1].first))) {
      throw_input("system '{}': [defaults] sync_jitter point {} is [{}, {}]: segments must increase within (0, 3600) s "
                  "and the coefficient of variation be in [0, 1)",
                  name, i, seg, cv);
    }
  }
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
  if (!(d.memory_efficiency > 0 && d.memory_efficiency <= 1)) {
    throw_input("system '{}': device memory_efficiency must be in (0, 1], got {}", name, d.memory_efficiency);
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
  for (size_t i = 0; i < d.memory_curve.size(); ++i) {
    const auto& [b, bw] = d.memory_curve[i];
    if (!(b > 0) || !(bw > 0) || !std::isfinite(bw)) {
      throw_input("system '{}': memory_curve point {} is [{}, {}]: bytes and bytes per second must be > 0", name, i, b, bw);
    }
    if (i > 0 && !(b > d.memory_curve[i - 1].first)) {
      throw_input("system '{}': memory_curve bytes must increase, point {} has {} after {}", name, i, b,
                  d.memory_curve[i - 1].first);
    }
  }
  d.gemm_table.validate(fmt::format("system '{}'", name));
  for (size_t i = 0; i < d.adamw_curve.size(); ++i) {
    const auto& [n, sec] = d.adamw_curve[i];
    if (!(n > 0) || !(sec > 0) || (i > 0 && !(n > d.adamw_curve[i - 1].first))) {
      throw_input("system '{}': adamw_curve point {} is [{}, {}]: parameters must increase and seconds be > 0", name, i,
                  n, sec);
    }
  }
  if (!(d.norm_param_seconds >= 0)) {
    throw_input("system '{}': norm_param_seconds must be >= 0, got {}", name, d.norm_param_seconds);
  }
  if (!(defaults.comm_overlap >= 0 && defaults.comm_overlap <= 1)) {
    throw_input("system '{}': [defaults] comm_overlap must be in [0, 1], got {}", name, defaults.comm_overlap);
  }
  if (levels.empty()) throw_input("system '{}': needs at least one [[level]] of links", name);
  int64_t prev = 1;
  for (size_t i = 0; i < levels.size(); ++i) {
    const LinkLevel& l = levels[i];
    if (!(l.bandwidth > 0) || !(l.latency >= 0)) {
      throw_input("system '{}': level '{}' needs bandwidth > 0 (got {}) and latency >= 0 (got {})", name, l.name,
                  l.bandwidth, l.latency);
    }
    for (const auto& [kind, share] : l.collective_efficiency) {
      if (kind != "all_reduce" && kind != "all_gather" && kind != "reduce_scatter") {
        throw_input("system '{}': level '{}': collective_efficiency.{} is not a collective (all_reduce, all_gather, "
                    "reduce_scatter)", name, l.name, kind);
      }
      if (!(share > 0 && share <= 2)) {
        throw_input("system '{}': level '{}': collective_efficiency.{} must be in (0, 2], got {}", name, l.name, kind,
                    share);
      }
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

// [device] KEY: an array of [x, y] pairs of numbers (what: their names, for the message).
std::vector<std::pair<double, double>> read_pairs(const std::string& path, Reader& r, const char* key, const char* what,
                                                  const char* section = "device") {
  std::vector<std::pair<double, double>> out;
  const toml::node* c = r.get(key);
  if (!c) return out;
  const toml::array* arr = c->as_array();
  if (!arr) throw_input("{}: [{}] {} must be an array of {} pairs", path, section, key, what);
  for (const auto& p : *arr) {
    const toml::array* pair = p.as_array();
    if (!pair || pair->size() != 2 || !pair->get(0)->value<double>() || !pair->get(1)->value<double>()) {
      throw_input("{}: [{}] {} entries must be {} pairs of numbers", path, section, key, what);
    }
    out.emplace_back(*pair->get(0)->value<double>(), *pair->get(1)->value<double>());
  }
  return out;
}

// [device] gemm_grid_m/n/k and gemm_rates_nn/nt/tn: arrays of numbers (plan/gemm_table.h).
std::vector<double> read_numbers(const std::string& path, Reader& r, const std::string& key) {
  std::vector<double> out;
  const toml::node* c = r.get(key);
  if (!c) return out;
  const toml::array* arr = c->as_array();
  if (!arr) throw_input("{}: [device] {} must be an array of numbers", path, key);
  for (const auto& v : *arr) {
    const std::optional<double> x = v.value<double>();
    if (!x) throw_input("{}: [device] {} must be an array of numbers", path, key);
    out.push_back(*x);
  }
  return out;
}

GemmTable read_gemm_table(const std::string& path, Reader& r) {
  GemmTable t;
  t.m = read_numbers(path, r, "gemm_grid_m");
  t.n = read_numbers(path, r, "gemm_grid_n");
  t.k = read_numbers(path, r, "gemm_grid_k");
  for (size_t i = 0; i < t.rates.size(); ++i) t.rates[i] = read_numbers(path, r, fmt::format("gemm_rates_{}", kGemmTransNames[i]));
  if (t.empty() && (!t.m.empty() || !t.rates[1].empty() || !t.rates[2].empty())) {
    throw_input("{}: [device] gemm_grid_m/n/k need gemm_rates_nn (and gemm_rates_nn needs the grid)", path);
  }
  t.validate(path + ": [device]");
  return t;
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

namespace {

toml::table parse_system_file(const std::string& path) {
  check_system_file(path);
  try {
    return toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    const auto& src = e.source();
    throw_input("{}:{}:{}: invalid TOML: {}", path, src.begin.line, src.begin.column, e.description());
  }
}

// `over`'s keys replace `into`'s; tables present in both merge key by key; arrays (the [[level]]
// entries among them) are replaced whole.
void merge_over(toml::table& into, const toml::table& over) {
  for (const auto& [k, v] : over) {
    toml::table* mine = into[k].as_table();
    if (mine != nullptr && v.is_table()) {
      merge_over(*mine, *v.as_table());
    } else {
      into.insert_or_assign(k, v);
    }
  }
}

constexpr int kMaxBaseDepth = 8;

// A system file's table with its `[system] base = "FILE"` (relative to the file's folder) read
// first and this file's keys merged over it: a software stack on the same hardware, or a
// cluster that differs in a few figures, names its base instead of copying it. The base's own
// name is not inherited (the file's stem, or its own `name`).
toml::table read_system_table(const std::string& path, int depth) {
  toml::table tbl = parse_system_file(path);
  toml::table* sys = tbl["system"].as_table();
  const toml::node* base = sys != nullptr ? sys->get("base") : nullptr;
  if (base == nullptr) return tbl;
  const std::optional<std::string> b = base->value<std::string>();
  if (!b || b->empty()) throw_input("{}: [system] base must be the path of a system file (relative to this file's folder)", path);
  if (depth >= kMaxBaseDepth) {
    throw_input("{}: [system] base = '{}': more than {} files deep (does a base name a file that names it?)", path, *b,
                kMaxBaseDepth);
  }
  const std::filesystem::path bp = std::filesystem::path(*b).is_absolute()
                                       ? std::filesystem::path(*b)
                                       : std::filesystem::path(path).parent_path() / *b;
  std::error_code ec;
  if (std::filesystem::exists(bp, ec) && !std::filesystem::is_regular_file(bp, ec)) {
    // A device or a pipe (/dev/zero) would be read without end.
    throw_input("{}: [system] base = '{}' is not a regular file", path, *b);
  }
  toml::table merged;
  try {
    merged = read_system_table(bp.string(), depth + 1);
  } catch (const InputError& e) {
    throw_input("{}: [system] base = '{}': {}", path, *b, e.what());
  }
  if (toml::table* bs = merged["system"].as_table()) bs->erase("name");
  sys->erase("base");
  merge_over(merged, tbl);
  return merged;
}

}  // namespace

std::string implicit_fp32_kernel() {
  const std::string path = implicit_system_path();
  return path.empty() ? std::string() : load_system(path).device.fp32_kernel;
}

System load_system(const std::string& path) {
  const toml::table tbl = read_system_table(path, 0);
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
    d.memory_efficiency = r.number("memory_efficiency", 1.0, false);
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
    d.matmul_curve = read_pairs(path, r, "matmul_curve", "[FLOPs, fraction]");
    d.memory_curve = read_pairs(path, r, "memory_curve", "[bytes, bytes per second]");
    d.gemm_table = read_gemm_table(path, r);
    d.adamw_curve = read_pairs(path, r, "adamw_curve", "[parameters, seconds per parameter]");
    d.norm_param_seconds = r.number("norm_param_seconds", 0, false);
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
    if (const toml::node* ce = r.get("collective_efficiency")) {
      const toml::table* t = ce->as_table();
      if (!t) throw_input("{}: [[level]] '{}': collective_efficiency must be a table of collective = share", path, l.name);
      for (const auto& [key, value] : *t) {
        const std::optional<double> v = value.value<double>();
        if (!v) throw_input("{}: [[level]] '{}': collective_efficiency.{} must be a number", path, l.name, key.str());
        l.collective_efficiency[std::string(key.str())] = *v;
      }
    }
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
    s.defaults.comm_overlap = r.number("comm_overlap", 1.0, false);
    s.defaults.pp_scatter_gather = r.boolean("pp_scatter_gather", true);
    s.defaults.memory_model = r.string("memory_model", "megatron");
    s.defaults.step_overhead = r.number("step_overhead", 0, false);
    s.defaults.jitter = r.number("jitter", 0, false);
    s.defaults.sync_jitter = read_pairs(path, r, "sync_jitter", "[segment seconds, coefficient of variation]", "defaults");
    s.defaults.world_allreduces = whole(path, "defaults", "world_allreduces", r.number("world_allreduces", 0, false));
    s.defaults.bubble_factor = r.number("bubble_factor", 1.0, false);
    if (s.defaults.memory_model != "megatron" && s.defaults.memory_model != "fsdp" && s.defaults.memory_model != "weft") {
      throw_input("{}: [defaults] memory_model = '{}': expected 'megatron', 'fsdp' or 'weft'", path,
                  s.defaults.memory_model);
    }
    // Absent: the software the memory model describes (files `weft calibrate` wrote before
    // this key existed say memory_model = "weft"; FSDP stacks run Megatron-style layers).
    s.defaults.tp_comm = r.string("tp_comm", s.defaults.memory_model == "weft" ? "weft" : "megatron");
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

namespace {

// `key = { a = 1, b = 2 }` with each value formatted by `fmt_value`.
std::string inline_table(const char* key, const std::map<std::string, double>& values, const char* fmt_value) {
  std::string out = fmt::format("{} = {{", key);
  bool first = true;
  for (const auto& [name, v] : values) {
    out += fmt::format("{} {} = ", first ? "" : ",", name) + fmt::format(fmt::runtime(fmt_value), v);
    first = false;
  }
  return out + " }\n";
}

// `key = [[x, y], ...]`.
std::string pairs_array(const char* key, const std::vector<std::pair<double, double>>& pairs) {
  std::string out = fmt::format("{} = [", key);
  for (size_t i = 0; i < pairs.size(); ++i) out += fmt::format("{}[{:.6g}, {:.6g}]", i ? ", " : "", pairs[i].first, pairs[i].second);
  return out + "]\n";
}

}  // namespace

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
  if (d.memory_efficiency != 1.0) out += fmt::format("memory_efficiency = {:.4g}\n", d.memory_efficiency);
  if (!d.matmul_curve.empty()) {
    out += "matmul_curve = [";
    for (size_t i = 0; i < d.matmul_curve.size(); ++i) {
      out += fmt::format("{}[{:.6g}, {:.4f}]", i ? ", " : "", d.matmul_curve[i].first, d.matmul_curve[i].second);
    }
    out += "]\n";
  }
  if (!d.memory_curve.empty()) out += pairs_array("memory_curve", d.memory_curve);
  if (!d.gemm_table.empty()) {
    const GemmTable& t = d.gemm_table;
    auto list = [](const std::vector<double>& v) {
      std::string s;
      for (size_t i = 0; i < v.size(); ++i) s += fmt::format("{}{:.6g}", i ? ", " : "", v[i]);
      return s;
    };
    out += fmt::format("gemm_grid_m = [{}]\ngemm_grid_n = [{}]\ngemm_grid_k = [{}]\n", list(t.m), list(t.n), list(t.k));
    for (size_t i = 0; i < t.rates.size(); ++i) {
      if (!t.rates[i].empty()) out += fmt::format("gemm_rates_{} = [{}]\n", kGemmTransNames[i], list(t.rates[i]));
    }
  }
  if (!d.adamw_curve.empty()) out += pairs_array("adamw_curve", d.adamw_curve);
  if (d.norm_param_seconds > 0) out += fmt::format("norm_param_seconds = {:.6g}\n", d.norm_param_seconds);
  if (d.compute_units > 0) {
    out += fmt::format("compute_units = {}\ngemm_tiles = [", d.compute_units);
    for (size_t i = 0; i < d.gemm_tiles.size(); ++i) {
      out += fmt::format("{}[{}, {}, {:.4g}]", i ? ", " : "", d.gemm_tiles[i].m, d.gemm_tiles[i].n, d.gemm_tiles[i].fraction);
    }
    out += fmt::format("]\ngemm_k_overhead = {:.6g}\ngemm_align = {}\ngemm_misaligned_fraction = {:.4g}\n",
                       d.gemm_k_overhead, d.gemm_align, d.gemm_misaligned_fraction);
  }
  if (!d.function_rates.empty()) out += inline_table("function_rates", d.function_rates, "{:.6g}");
  if (!d.fp32_kernel.empty()) out += fmt::format("fp32_kernel = \"{}\"\n", d.fp32_kernel);
  if (d.native_bf16) out += "native_bf16 = true\n";
  if (d.attention_efficiency > 0) {
    out += fmt::format("attention_efficiency = {:.4g}\nattention_bwd_efficiency = {:.4g}\n", d.attention_efficiency,
                       d.attention_bwd_efficiency);
  }
  for (const auto& l : s.levels) {
    out += fmt::format("\n[[level]]\nname = \"{}\"\ndevices = {}\nbandwidth = {:.6g}\nlatency = {:.6g}\n", l.name,
                       l.devices, l.bandwidth, l.latency);
    if (!l.collective_efficiency.empty()) out += inline_table("collective_efficiency", l.collective_efficiency, "{:.4g}");
  }
  out += fmt::format(
      "\n[defaults]\nflash_attention = {}\ndropout = {}\nfp32_grad_accumulation = {}\noverlap_dp = {}\npp_scatter_gather = {}\nmemory_model = \"{}\"\n",
      s.defaults.flash_attention, s.defaults.dropout, s.defaults.fp32_grad_accumulation, s.defaults.overlap_dp,
      s.defaults.pp_scatter_gather, s.defaults.memory_model);
  out += fmt::format("tp_comm = \"{}\"\npp_p2p_overlap = {}\nattention_16 = {}\n", s.defaults.tp_comm,
                     s.defaults.pp_p2p_overlap, s.defaults.attention_16);
  if (s.defaults.comm_overlap != 1.0) out += fmt::format("comm_overlap = {:.4g}\n", s.defaults.comm_overlap);
  out += fmt::format("step_overhead = {:.6g}\njitter = {:.6g}\nworld_allreduces = {}\nbubble_factor = {:.6g}\n",
                     s.defaults.step_overhead, s.defaults.jitter, s.defaults.world_allreduces, s.defaults.bubble_factor);
  if (!s.defaults.sync_jitter.empty()) out += pairs_array("sync_jitter", s.defaults.sync_jitter);
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
