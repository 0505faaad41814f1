#include "plan/zeropp.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "plan/predict.h"

namespace weft::plan {

std::vector<DpLevel> dp_levels(const System& sys, const Layout& l) {
  std::vector<DpLevel> out;
  const int64_t stride = axis_stride(l, "dp");
  const int64_t dp = l.dp_shard();  // ZeRO's group: dp_shard consecutive dp ranks under HSDP
  int64_t below = 1;
  for (size_t i = 0; i + 1 < sys.levels.size(); ++i) {
    if (sys.levels[i].devices <= 0) break;
    DpLevel d;
    d.name = sys.levels[i].name;
    d.dp_ranks = std::min<int64_t>(dp, std::max<int64_t>(1, sys.levels[i].devices / stride));
    if (d.dp_ranks <= 1) {
      d.dropped = "1 dp peer";
    } else if (d.dp_ranks >= dp) {
      d.dropped = "whole dp group";
    } else if (d.dp_ranks <= below) {
      d.dropped = "as the level inside it";
    } else if (dp % d.dp_ranks != 0 || d.dp_ranks % below != 0) {
      d.dropped = fmt::format("{} does not divide dp {}", d.dp_ranks, dp);
    }
    if (d.dropped.empty()) below = d.dp_ranks;
    out.push_back(d);
  }
  return out;
}

std::vector<int> dp_hierarchy(const System& sys, const Layout& l) {
  std::vector<int> h;
  for (const DpLevel& d : dp_levels(sys, l)) {
    if (d.dropped.empty()) h.push_back(static_cast<int>(d.dp_ranks));
  }
  return h;
}

Layout resolve_zeropp(const Layout& l, const System& sys) {
  if (l.zeropp == ZeroPP::kCustom) return l;
  Layout r = l;
  r.qwz = false, r.hpz = 1, r.qgz = false, r.hierarchy.clear();
  if (l.zeropp == ZeroPP::kNone) {
    if (l.zeropp_on()) r = l, r.zeropp = ZeroPP::kCustom;  // knobs set by hand
    return r;
  }
  const std::vector<DpLevel> levels = dp_levels(sys, l);
  // The node: the level named "node", else the outermost level under the machine.
  size_t node = levels.size();
  for (size_t i = 0; i < levels.size(); ++i) {
    if (levels[i].name == "node") node = i;
  }
  if (node == levels.size() && !levels.empty()) node = levels.size() - 1;
  // dp ranks of the node (all of dp when it holds them), or 1 without one.
  int64_t node_ranks = 1;
  if (node < levels.size() && (levels[node].dropped.empty() || levels[node].dp_ranks >= l.dp_shard())) {
    node_ranks = levels[node].dp_ranks;
  }
  std::vector<int> kept;  // kept levels up to the node, innermost first
  for (size_t i = 0; i < levels.size() && i <= node; ++i) {
    if (levels[i].dropped.empty()) kept.push_back(static_cast<int>(levels[i].dp_ranks));
  }
  r.qwz = true;
  r.qgz = true;
  if (l.zeropp == ZeroPP::kZeroPP) {
    r.hpz = static_cast<int>(node_ranks);
    if (node_ranks > 1 && node_ranks < l.dp_shard()) r.hierarchy = {static_cast<int>(node_ranks)};
  } else {
    // The innermost level that holds more than one dp rank carries the secondary partition.
    int64_t pair = kept.empty() ? node_ranks : kept.front();
    r.hpz = static_cast<int>(pair);
    r.hierarchy = kept;
  }
  return r;
}

std::string zeropp_error(const Layout& l) {
  if (!l.zeropp_on() && l.zeropp == ZeroPP::kNone) return "";
  std::vector<std::string> on;
  if (l.qwz) on.push_back("qwz");
  if (l.hpz != 1) on.push_back(fmt::format("hpz {}", l.hpz));
  if (l.qgz) on.push_back("qgz");
  const std::string knobs = fmt::format("({})", fmt::join(on, ", "));
  if (l.zero != 3 && (l.zeropp_on() || l.zeropp == ZeroPP::kZeroPP || l.zeropp == ZeroPP::kThreeLevel)) {
    return fmt::format("ZeRO++ {} needs zero 3 (its gathers and secondary partition are ZeRO-3's), got zero {}",
                       l.zeropp == ZeroPP::kNone || l.zeropp == ZeroPP::kCustom ? knobs : zeropp_name(l.zeropp), l.zero);
  }
  if (l.hpz < 1) return fmt::format("hpz must be at least 1 (1: off), got {}", l.hpz);
  // ZeRO++ works inside ZeRO's group: dp_shard under HSDP.
  const char* group = l.dp_replicate > 1 ? "dp_shard" : "dp";
  if (l.dp_shard() % l.hpz != 0) return fmt::format("hpz {} does not divide {} {}", l.hpz, group, l.dp_shard());
  if (l.quant_block < 1) return fmt::format("the quantization block must be positive, got {}", l.quant_block);
  if (!l.hierarchy.empty() && !l.qgz) {
    return fmt::format("a qgz hierarchy [{}] without qgz", fmt::join(l.hierarchy, ","));
  }
  int inner = 1;
  for (int h : l.hierarchy) {
    if (h <= inner || h % inner != 0 || h >= l.dp_shard() || l.dp_shard() % h != 0) {
      return fmt::format("qgz hierarchy [{}] over {} {}: each level must be larger than the one inside it, a multiple "
                         "of it, and divide {} below it (at {})",
                         fmt::join(l.hierarchy, ","), group, l.dp_shard(), group, h);
    }
    inner = h;
  }
  return "";
}

}  // namespace weft::plan
