#include "train/memory_fit.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "comm/world.h"
#include "core/error.h"
#include "core/log.h"
#include "parallel/grid.h"
#include "plan/weft_memory.h"
#include "train/run_report.h"

namespace weft {

namespace {

std::string read_small_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The value of `key` in a "key value" file (memory.stat), or 0.
double stat_value(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  std::string k;
  double v = 0;
  while (in >> k >> v) {
    if (k == key) return v;
  }
  return 0;
}

std::string gib(double bytes) { return fmt::format("{:.2f} GiB", bytes / 1073741824.0); }

// "params 1.00 GiB, grads ..., total ..." of a breakdown.
std::string categories(const plan::MemoryBreakdown& b) {
  return fmt::format("params {}, grads {}, optimizer {}, activations {}, workspace {}, comm buffers {}; total {}",
                     gib(b.params), gib(b.grads), gib(b.optimizer), gib(b.activations), gib(b.workspace), gib(b.comm),
                     gib(b.total));
}

void add_to(plan::MemoryBreakdown& sum, const plan::MemoryBreakdown& b) {
  sum.params += b.params;
  sum.grads += b.grads;
  sum.optimizer += b.optimizer;
  sum.activations += b.activations;
  sum.workspace += b.workspace;
  sum.comm += b.comm;
  sum.sum();
}

// The cgroup headroom of this process, v2 first, then v1 (nullopt: no limit or no cgroup).
std::optional<MemoryAvailable> cgroup_available() {
  const std::string v2 = read_small_file("/sys/fs/cgroup/memory.max");
  if (!v2.empty()) {
    const double inactive = stat_value(read_small_file("/sys/fs/cgroup/memory.stat"), "inactive_file");
    auto h = cgroup_headroom(v2, read_small_file("/sys/fs/cgroup/memory.current"), inactive);
    if (h) return MemoryAvailable{*h, "cgroup v2 memory.max - memory.current"};
    return std::nullopt;
  }
  const std::string v1 = read_small_file("/sys/fs/cgroup/memory/memory.limit_in_bytes");
  if (v1.empty()) return std::nullopt;
  const double inactive = stat_value(read_small_file("/sys/fs/cgroup/memory/memory.stat"), "total_inactive_file");
  auto h = cgroup_headroom(v1, read_small_file("/sys/fs/cgroup/memory/memory.usage_in_bytes"), inactive);
  if (h) return MemoryAvailable{*h, "cgroup v1 memory.limit_in_bytes - memory.usage_in_bytes"};
  return std::nullopt;
}

// The ranks that share this rank's node, and their predicted bytes summed.
MemoryNeed node_need(const EngineConfig& ec, Communicator& world, bool native_products) {
  const NodeMap nodes = make_node_map(world);
  const plan::WeftRunShape shape = run_memory_shape(ec, native_products);
  const int mine = nodes.node_of_rank.at(static_cast<size_t>(world.rank()));
  MemoryNeed need;
  need.ranks = 0;
  std::string ranks;
  for (int r = 0; r < world.size(); ++r) {
    if (nodes.node_of_rank.at(static_cast<size_t>(r)) != mine) continue;
    const auto [stage, dp_rank] = stage_and_dp_rank(ec, r);
    add_to(need.bytes, plan::weft_rank_memory(shape, stage, dp_rank));
    ranks += fmt::format("{}{}", ranks.empty() ? "" : ",", r);
    ++need.ranks;
  }
  need.where = fmt::format("node {} (ranks {})", mine, ranks);
  return need;
}

}  // namespace

std::pair<int, int> stage_and_dp_rank(const EngineConfig& ec, int world_rank) {
  const GridCoords c = GridLayout(ec.layout.grid()).coords_of(world_rank);
  return {c[static_cast<size_t>(Axis::kPp)], c[static_cast<size_t>(Axis::kDp)]};
}

std::optional<double> meminfo_available(const std::string& meminfo) {
  std::istringstream in(meminfo);
  std::string line;
  while (std::getline(in, line)) {
    double kb = 0;
    if (std::sscanf(line.c_str(), "MemAvailable: %lf kB", &kb) == 1) return kb * 1024.0;
  }
  return std::nullopt;
}

std::optional<double> cgroup_headroom(const std::string& limit, const std::string& usage, double inactive_file) {
  char* end = nullptr;
  const double lim = std::strtod(limit.c_str(), &end);
  // "max" (v2) or v1's "no limit" (the page counter's maximum, about 2^63 rounded to pages).
  if (end == limit.c_str() || lim >= 4.6e18) return std::nullopt;
  const double used = std::strtod(usage.c_str(), nullptr);
  return std::clamp(lim - used + inactive_file, 0.0, lim);
}

std::optional<MemoryAvailable> host_memory_available() {
  std::optional<MemoryAvailable> best;
  if (auto a = meminfo_available(read_small_file("/proc/meminfo"))) best = MemoryAvailable{*a, "MemAvailable of /proc/meminfo"};
  if (auto c = cgroup_available(); c && (!best || c->bytes < best->bytes)) best = c;
  return best;
}

void require_memory_fit(const MemoryNeed& need, const MemoryAvailable& avail, const std::string& mode) {
  if (mode == "off" || need.bytes.total <= avail.bytes) return;
  const std::string what = fmt::format(
      "the run does not fit in memory: {} needs {} ({} rank{}: {}) but {} are available ({}); use fewer ranks per "
      "node, a smaller model or batch, more parallelism (tp, pp, zero), recompute, or set memory_check = \"warn\" or "
      "\"off\" (--memory_check off) to start it anyway",
      need.where, gib(need.bytes.total), need.ranks, need.ranks == 1 ? "" : "s", categories(need.bytes),
      gib(avail.bytes), avail.source);
  if (mode == "warn") {
    log_warn("{}", what);
    return;
  }
  throw InputError(what);
}

void check_memory_fit(const RunConfig& cfg, const EngineConfig& ec, Communicator& world, const Backend& backend) {
  if (cfg.memory_check == "off") return;
  if (const int64_t device_free = backend.device_memory_free(); device_free >= 0) {
    const auto [stage, dp_rank] = stage_and_dp_rank(ec, world.rank());
    MemoryNeed need{plan::weft_rank_memory(run_memory_shape(ec, backend.native_16bit_products()), stage, dp_rank), 1,
                    fmt::format("the {} device of rank {}", backend.name(), world.rank())};
    require_memory_fit(need, {static_cast<double>(device_free), "free device memory"}, cfg.memory_check);
    return;
  }
  const MemoryNeed need = node_need(ec, world, backend.native_16bit_products());  // collective: every rank calls it
  const std::optional<MemoryAvailable> avail = host_memory_available();
  if (!avail) {
    log_warn("memory check skipped: neither /proc/meminfo nor a cgroup limit could be read");
    return;
  }
  require_memory_fit(need, *avail, cfg.memory_check);
}

}  // namespace weft
