#include "parallel/dp/zeropp.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>

#include "core/error.h"

namespace weft {

namespace {

// levels + the whole group.
std::vector<int> with_whole(const std::vector<int>& levels, int dp) {
  std::vector<int> l = levels;
  if (l.empty() || l.back() != dp) l.push_back(dp);
  return l;
}

}  // namespace

std::string ZeroPPConfig::describe(int dp) const {
  std::vector<std::string> parts;
  if (quantized_weights) parts.push_back(fmt::format("qwZ int{} (block {})", weights.bits, weights.block));
  if (hpz > 1) parts.push_back(fmt::format("hpZ {}", hpz));
  if (quantized_gradients) {
    parts.push_back(fmt::format("qgZ int{} (block {}){}", gradients.bits, gradients.block,
                                error_feedback ? " + error feedback" : ""));
  }
  if (parts.empty()) return "off";
  std::vector<std::string> lv;
  for (size_t i = 0; i < levels.size(); ++i) lv.push_back(fmt::format("{} {}", level_names[i], levels[i]));
  lv.push_back(fmt::format("net {}", dp));
  return fmt::format("{} (levels {})", fmt::join(parts, " + "), fmt::join(lv, ", "));
}

std::vector<GradHop> grad_hops(int dp_rank, int dp, const std::vector<int>& levels) {
  const std::vector<int> l = with_whole(levels, dp);
  std::vector<GradHop> hops;
  for (size_t k = 0; k < l.size(); ++k) {
    GradHop h;
    h.inner = k == 0 ? 1 : l[k - 1];
    h.outer = l[k];
    h.size = h.outer / h.inner;
    h.index = (dp_rank % h.outer) / h.inner;
    h.color = (dp_rank / h.outer) * h.inner + dp_rank % h.inner;
    hops.push_back(h);
  }
  return hops;
}

std::vector<int> chunks_before_hop(int dp_rank, int dp, const std::vector<int>& levels, int k) {
  const std::vector<int> l = with_whole(levels, dp);
  const int inner = k == 0 ? 1 : l[static_cast<size_t>(k) - 1];
  std::vector<int> q;
  for (int c = 0; c < dp; ++c) {
    if (c % inner == dp_rank % inner) q.push_back(c);
  }
  return q;
}

std::vector<int> chunks_to_member(int dp_rank, int dp, const std::vector<int>& levels, int k, int m) {
  const std::vector<int> l = with_whole(levels, dp);
  const int inner = k == 0 ? 1 : l[static_cast<size_t>(k) - 1], outer = l[static_cast<size_t>(k)];
  std::vector<int> out;
  for (int q : chunks_before_hop(dp_rank, dp, levels, k)) {
    if ((q % outer) / inner == m) out.push_back(q);
  }
  return out;
}

int dp_peers_per_node(const std::vector<int>& dp_group, const NodeMap& nodes) {
  if (dp_group.empty()) return 0;
  std::vector<int> runs;
  std::map<int, int> seen;
  int prev = -1;
  for (int w : dp_group) {
    if (w < 0 || w >= nodes.world()) return 0;
    const int node = nodes.node_of_rank[static_cast<size_t>(w)];
    if (node != prev) {
      if (seen.count(node) != 0) return 0;  // a node visited twice: not one run per node
      seen[node] = 1;
      runs.push_back(0);
      prev = node;
    }
    ++runs.back();
  }
  for (int r : runs) {
    if (r != runs.front()) return 0;
  }
  return runs.front();
}

int64_t ZeroPPBuffers::comm_bytes() const {
  int64_t c = 3 * qgz_group_elems * static_cast<int64_t>(sizeof(float)) + qgz_send_bytes + qgz_recv_bytes;
  for (const auto& [send, recv] : qwz_slot_wires) c += send + recv;
  return c + qwz_stage_elems * static_cast<int64_t>(sizeof(float));
}

ZeroPPBuffers zeropp_buffers(const ZeroPPConfig& z, const std::vector<std::pair<int64_t, int64_t>>& groups, int64_t n,
                             int dp_rank, int dp, int slots, bool training, DType param_dtype) {
  ZeroPPBuffers b;
  const int64_t shard = (n + dp - 1) / dp;
  auto piece = [&](int q, int64_t gb, int64_t ge) {
    return std::max<int64_t>(0, std::clamp(std::min(n, (q + 1) * shard), gb, ge) - std::clamp(std::min(n, q * shard), gb, ge));
  };
  if (z.hpz > 1) {
    const int j = dp_rank % z.hpz;
    for (const auto& [gb, ge] : groups) {
      const int64_t len = ge - gb, c = (len + z.hpz - 1) / z.hpz;
      b.hpz_elems += std::max<int64_t>(0, std::min(len, (j + 1) * c) - j * c);
    }
  }
  if (z.quantized_weights) {
    for (int s = 0; s < slots; ++s) {
      int64_t send = 0, recv = 0;
      for (size_t g = 0; g < groups.size(); ++g) {
        if ((s == 0) != (g == 0)) continue;
        const auto [gb, ge] = groups[g];
        int64_t all = 0;
        for (int q = 0; q < dp; ++q) all += quant_wire_bytes(piece(q, gb, ge), z.weights);
        send = std::max(send, quant_wire_bytes(piece(dp_rank, gb, ge), z.weights));
        recv = std::max(recv, all);
      }
      b.qwz_slot_wires.emplace_back(send, recv);
    }
    if (param_dtype != DType::kF32) {
      for (const auto& [gb, ge] : groups) {
        for (int q = 0; q < dp; ++q) b.qwz_stage_elems = std::max(b.qwz_stage_elems, piece(q, gb, ge));
      }
    }
  }
  if (z.quantized_gradients && training) {
    const std::vector<GradHop> hops = grad_hops(dp_rank, dp, z.levels);
    int64_t max_len = 1, max_send = 4, max_recv = 4;
    for (const auto& [gb, ge] : groups) {
      max_len = std::max(max_len, ge - gb);
      for (size_t k = 0; k < hops.size(); ++k) {
        int64_t send = 0, mine = 0;
        for (int m = 0; m < hops[k].size; ++m) {
          int64_t E = 0;
          for (int q : chunks_to_member(dp_rank, dp, z.levels, static_cast<int>(k), m)) E += piece(q, gb, ge);
          send += quant_wire_bytes(E, z.gradients);
          if (m == hops[k].index) mine = quant_wire_bytes(E, z.gradients);
        }
        max_send = std::max(max_send, send);
        max_recv = std::max(max_recv, mine * hops[k].size);
      }
    }
    b.qgz_group_elems = max_len;
    b.qgz_send_bytes = max_send;
    b.qgz_recv_bytes = max_recv;
    if (z.error_feedback) b.residual_elems = n;
  }
  return b;
}

int dp_peers_per_node(const GridLayout& grid, const NodeMap& nodes) {
  int common = -1;
  for (int r = 0; r < grid.world_size(); ++r) {
    const int p = dp_peers_per_node(grid.dp_shard_group(r), nodes);  // ZeRO's group (HSDP: dp_shard)
    if (p == 0 || (common >= 0 && p != common)) return 0;
    common = p;
  }
  return common < 0 ? 0 : common;
}

ZeroPPConfig resolve_zeropp(ZeroPPConfig want, int zero, int dp, int peers_per_node,
                            const std::vector<int>& hierarchy) {
  want.levels.clear();
  want.level_names.clear();
  want.notes.clear();
  std::vector<std::string>* notes = &want.notes;
  if (!want.active()) return want;
  if (zero != 3) {
    throw_input("ZeRO++ ({}) works on ZeRO-3's gathered parameters: it needs zero 3, got zero {}",
                want.describe(dp), zero);
  }
  check_quant_spec(want.weights, "zero.weight_bits / zero.block_size");
  check_quant_spec(want.gradients, "zero.gradient_bits / zero.block_size");
  if (want.hpz < 1 || want.hpz > dp || dp % want.hpz != 0) {
    throw_input("zero.hpz_partition_size {} does not divide the data-parallel group of {} ranks", want.hpz, dp);
  }
  auto note = [&](std::string s) {
    if (notes != nullptr) notes->push_back(std::move(s));
  };
  const bool node_known = peers_per_node > 0;
  const bool node_inside = node_known && peers_per_node > 1 && peers_per_node < dp;
  if (!hierarchy.empty()) {
    for (size_t i = 0; i < hierarchy.size(); ++i) {
      const int h = hierarchy[i];
      if (h == dp && i + 1 == hierarchy.size()) break;  // the whole group, named last
      if (h > dp || dp % h != 0) {
        throw_input("zero.hierarchy [{}] does not fit the data-parallel group of {} ranks: {} does not divide it",
                    fmt::join(hierarchy, ", "), dp, h);
      }
      want.levels.push_back(h);
    }
    if (node_inside && std::find(want.levels.begin(), want.levels.end(), peers_per_node) == want.levels.end()) {
      throw_input("zero.hierarchy [{}] leaves out the node level: the nodes hold {} data-parallel ranks each",
                  fmt::join(hierarchy, ", "), peers_per_node);
    }
    int inside_node = 0;
    for (int h : want.levels) inside_node += node_known && h < peers_per_node ? 1 : 0;
    for (int h : want.levels) {
      if (!node_known) {
        want.level_names.push_back(fmt::format("l{}", h));
      } else if (h == peers_per_node) {
        want.level_names.push_back("node");
      } else if (h < peers_per_node) {
        want.level_names.push_back(inside_node == 1 ? "pair" : fmt::format("sub{}", h));
      } else {
        want.level_names.push_back(fmt::format("group{}", h));
      }
    }
  } else if (node_inside) {
    want.levels = {peers_per_node};
    want.level_names = {"node"};
  }
  if (node_known && peers_per_node == 1) {
    note(fmt::format("the node level is empty: each node holds 1 rank of this data-parallel group (the others are its "
                     "tp x pp peers), so every data-parallel collective leaves the node"));
  } else if (node_known && peers_per_node == dp && hierarchy.empty()) {
    note(fmt::format("the whole data-parallel group of {} ranks lies in one node: one level", dp));
  } else if (!node_known && hierarchy.empty()) {
    note("no node map (set run.ranks_per_node or zero.hierarchy): the data-parallel group is one level");
  }
  if (want.hpz > 1 && node_known && (want.hpz > peers_per_node || peers_per_node % want.hpz != 0)) {
    note(fmt::format("the hpZ group of {} ranks does not fit in a node of {} data-parallel ranks: its gathers cross nodes",
                     want.hpz, peers_per_node));
  }
  return want;
}

}  // namespace weft
