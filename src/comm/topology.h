// Which node each world rank runs on, and the link level a call crosses: a collective is
// inter-node when its group's ranks span more than one node, a send/receive when its two
// peers are on different nodes; everything else stays inside a node. These are the two
// lowest levels of the planner's alpha-beta model (plan/system.h: the first level is the
// node's links, e.g. NVLink; every level above is reached by leaving the node), so a byte
// attributed here is priced there at the level it crossed.
//
// The mapping is real (make_node_map in comm/world.h: MPI's shared-memory split, one node
// per shared-memory domain) or emulated (emulated_node_map: nodes of `ranks_per_node`
// consecutive world ranks, so a 2-core machine can stand for several nodes).
#pragma once
#include <string>
#include <vector>

namespace weft {

enum class LinkLevel { kIntraNode, kInterNode };
const char* link_level_name(LinkLevel l);  // "intra-node", "inter-node"

struct NodeMap {
  std::vector<int> node_of_rank;  // world rank -> node index (0-based, in order of first rank)
  std::string source;             // "emulated", "mpi-shared-memory", "single-process"
  int world() const { return static_cast<int>(node_of_rank.size()); }
  int nodes() const;
  // Ranks per node when every node holds the same number, else 0.
  int ranks_per_node() const;
  // inter-node when `ranks` (world ranks) lie on more than one node. InputError for a rank
  // outside the map.
  LinkLevel level(const std::vector<int>& ranks) const;
};

// Nodes of `ranks_per_node` consecutive ranks. InputError naming the values unless
// ranks_per_node >= 1 and it divides the world (or covers it: one node).
NodeMap emulated_node_map(int world, int ranks_per_node);
// From any per-rank node key (e.g. the lowest world rank of each shared-memory domain):
// nodes numbered in order of their first rank.
NodeMap node_map_from_keys(const std::vector<int>& key_of_rank, const std::string& source);

}  // namespace weft
