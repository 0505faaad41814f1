#include "comm/topology.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/ranges.h>

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

namespace {

// Numbers the keys in order of first appearance.
std::vector<int> renumber(const std::vector<int64_t>& key_of_rank) {
  std::map<int64_t, int> index;
  std::vector<int> out;
  out.reserve(key_of_rank.size());
  for (int64_t k : key_of_rank) {
    auto it = index.find(k);
    if (it == index.end()) it = index.emplace(k, static_cast<int>(index.size())).first;
    out.push_back(it->second);
  }
  return out;
}

std::vector<int> domain_sizes(const std::vector<int>& domain_of_rank) {
  std::vector<int> count;
  for (int d : domain_of_rank) {
    if (static_cast<size_t>(d) >= count.size()) count.resize(static_cast<size_t>(d) + 1, 0);
    ++count[static_cast<size_t>(d)];
  }
  return count;
}

}  // namespace

int LinkLevels::domains(int level) const {
  WEFT_CHECK(level >= 0 && level < levels(), "link level {} outside the {} levels", level, levels());
  return static_cast<int>(domain_sizes(domain_of_rank[static_cast<size_t>(level)]).size());
}

int LinkLevels::ranks_per_domain(int level) const {
  WEFT_CHECK(level >= 0 && level < levels(), "link level {} outside the {} levels", level, levels());
  const std::vector<int> count = domain_sizes(domain_of_rank[static_cast<size_t>(level)]);
  if (count.empty()) return 0;
  for (int c : count) {
    if (c != count.front()) return 0;
  }
  return count.front();
}

LinkLevels LinkLevels::from_nodes(const NodeMap& nodes) {
  LinkLevels l;
  l.names = {"node"};
  l.domain_of_rank = {nodes.node_of_rank};
  return l;
}

void LinkLevels::add_inner_level(const std::string& name, int size) {
  if (name.empty()) throw_input("a link level needs a name");
  if (std::find(names.begin(), names.end(), name) != names.end()) {
    throw_input("link level '{}' exists already (levels: {})", name, fmt::join(names, ", "));
  }
  if (levels() == 0) throw_input("link level '{}': no outer level to split (start from LinkLevels::from_nodes)", name);
  if (size < 1) throw_input("link level '{}': {} ranks per domain, must be >= 1", name, size);
  const std::vector<int>& outer = domain_of_rank.front();
  const std::vector<int> count = domain_sizes(outer);
  for (size_t d = 0; d < count.size(); ++d) {
    if (count[d] % size != 0) {
      throw_input("link level '{}' of {} ranks per domain does not divide domain {} of level '{}' ({} ranks)", name,
                  size, d, names.front(), count[d]);
    }
  }
  // The k-th rank (in world order) of outer domain d goes to inner domain (d, k / size).
  std::vector<int> seen(count.size(), 0);
  std::vector<int64_t> key(outer.size());
  for (size_t r = 0; r < outer.size(); ++r) {
    const size_t d = static_cast<size_t>(outer[r]);
    key[r] = static_cast<int64_t>(d) * (static_cast<int64_t>(outer.size()) + 1) + seen[d]++ / size;
  }
  names.insert(names.begin(), name);
  domain_of_rank.insert(domain_of_rank.begin(), renumber(key));
}

void LinkLevels::validate() const {
  if (names.size() != domain_of_rank.size()) {
    throw_input("link levels: {} names for {} rank maps", names.size(), domain_of_rank.size());
  }
  std::set<std::string> unique(names.begin(), names.end());
  if (unique.size() != names.size()) throw_input("link levels: a name repeats ({})", fmt::join(names, ", "));
  for (int k = 0; k < levels(); ++k) {
    const std::vector<int>& inner = domain_of_rank[static_cast<size_t>(k)];
    if (static_cast<int>(inner.size()) != world()) {
      throw_input("link level '{}' maps {} ranks, level '{}' {}", names[static_cast<size_t>(k)], inner.size(),
                  names.front(), world());
    }
    for (int d : inner) {
      if (d < 0) throw_input("link level '{}': negative domain {}", names[static_cast<size_t>(k)], d);
    }
    if (k + 1 == levels()) break;
    const std::vector<int>& outer = domain_of_rank[static_cast<size_t>(k) + 1];
    std::map<int, int> outer_of;  // inner domain -> the outer domain holding its first rank
    for (size_t r = 0; r < inner.size(); ++r) {
      const auto [it, fresh] = outer_of.emplace(inner[r], outer[r]);
      if (!fresh && it->second != outer[r]) {
        throw_input("link level '{}' domain {} spans two '{}' domains ({} and {}, at world rank {})",
                    names[static_cast<size_t>(k)], inner[r], names[static_cast<size_t>(k) + 1], it->second, outer[r], r);
      }
    }
  }
}

int64_t crossing_bytes(const std::string& kind, int64_t bytes, const std::vector<int>& ranks, const LinkLevels& levels,
                       int level) {
  if (level < 0 || level >= levels.levels()) {
    throw_input("link level {} outside the {} levels ({})", level, levels.levels(), fmt::join(levels.names, ", "));
  }
  const std::vector<int>& dom = levels.domain_of_rank[static_cast<size_t>(level)];
  std::map<int, int64_t> members;  // domain -> n_d
  for (int r : ranks) {
    if (r < 0 || r >= static_cast<int>(dom.size())) {
      throw_input("rank {} is outside the link levels of {} ranks", r, dom.size());
    }
    ++members[dom[static_cast<size_t>(r)]];
  }
  const int64_t touched = static_cast<int64_t>(members.size());
  if (kind == "send" || kind == "recv") return touched > 1 ? bytes : 0;
  if (kind == "all_gather" || kind == "reduce_scatter" || kind == "broadcast") return bytes * (touched - 1);
  if (kind == "all_reduce") return 2 * bytes * (touched - 1);
  if (kind == "all_to_all") {
    const __int128 n = static_cast<__int128>(ranks.size());
    if (n == 0) return 0;
    __int128 same = 0;
    for (const auto& [d, nd] : members) same += static_cast<__int128>(nd) * nd;
    const __int128 den = n * n;
    return static_cast<int64_t>((static_cast<__int128>(bytes) * (den - same) + den / 2) / den);
  }
  if (kind == "barrier") return 0;
  throw_input("crossing_bytes: unknown call kind '{}'", kind);
}

}  // namespace weft
