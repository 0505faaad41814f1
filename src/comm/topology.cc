#include "comm/topology.h"

#include <algorithm>
#include <map>

#include "core/error.h"

namespace weft {

const char* link_level_name(LinkLevel l) { return l == LinkLevel::kInterNode ? "inter-node" : "intra-node"; }

int NodeMap::nodes() const {
  int n = 0;
  for (int x : node_of_rank) n = std::max(n, x + 1);
  return n;
}

int NodeMap::ranks_per_node() const {
  std::vector<int> count(static_cast<size_t>(nodes()), 0);
  for (int x : node_of_rank) ++count[static_cast<size_t>(x)];
  if (count.empty()) return 0;
  for (int c : count) {
    if (c != count.front()) return 0;
  }
  return count.front();
}

LinkLevel NodeMap::level(const std::vector<int>& ranks) const {
  int first = -1;
  for (int r : ranks) {
    if (r < 0 || r >= world()) throw_input("rank {} is outside the node map of {} ranks", r, world());
    const int n = node_of_rank[static_cast<size_t>(r)];
    if (first < 0) first = n;
    if (n != first) return LinkLevel::kInterNode;
  }
  return LinkLevel::kIntraNode;
}

NodeMap emulated_node_map(int world, int ranks_per_node) {
  if (ranks_per_node < 1) throw_input("ranks_per_node must be >= 1, got {}", ranks_per_node);
  if (ranks_per_node < world && world % ranks_per_node != 0) {
    throw_input("ranks_per_node {} does not divide the world of {} ranks into equal nodes", ranks_per_node, world);
  }
  NodeMap m;
  m.source = "emulated";
  for (int r = 0; r < world; ++r) m.node_of_rank.push_back(r / ranks_per_node);
  return m;
}

NodeMap node_map_from_keys(const std::vector<int>& key_of_rank, const std::string& source) {
  NodeMap m;
  m.source = source;
  std::map<int, int> index;
  for (int k : key_of_rank) {
    auto it = index.find(k);
    if (it == index.end()) it = index.emplace(k, static_cast<int>(index.size())).first;
    m.node_of_rank.push_back(it->second);
  }
  return m;
}

}  // namespace weft
