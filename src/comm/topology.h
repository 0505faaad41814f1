// Which node each world rank runs on, and the link level a call crosses: a collective is
// inter-node when its group's ranks span more than one node, a send/receive when its two
// peers are on different nodes; everything else stays inside a node. These are the two
// lowest levels of the planner's alpha-beta model (plan/system.h: the first level is the
// node's links, e.g. NVLink; every level above is reached by leaving the node), so a byte
// attributed here is priced there at the level it crossed.
//
// The mapping is real (make_node_map in comm/world.h: one node per host) or emulated (emulated_node_map: nodes of `ranks_per_node`
// consecutive world ranks, so a 2-core machine can stand for several nodes).
//
// LinkLevels generalise the two levels to nested link domains (e.g. Frontier: pairs of GCDs
// inside nodes of 8, then the network), and crossing_bytes says how many bytes of one traced
// call cross the boundaries of one level's domains.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace weft {

enum class LinkLevel { kIntraNode, kInterNode };
const char* link_level_name(LinkLevel l);  // "intra-node", "inter-node"

struct NodeMap {
  std::vector<int> node_of_rank;  // world rank -> node index (0-based, in order of first rank)
  std::string source;             // "emulated", "mpi-hostname", "single-process"
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

// Nested link domains, innermost first (e.g. {"pair", "node"}); world rank -> domain index per
// level (0-based, in order of first rank); every domain of level k lies inside one domain of
// level k+1. Above the last level is the network.
struct LinkLevels {
  std::vector<std::string> names;
  std::vector<std::vector<int>> domain_of_rank;  // [level][world rank]

  int levels() const { return static_cast<int>(names.size()); }
  int world() const { return domain_of_rank.empty() ? 0 : static_cast<int>(domain_of_rank.front().size()); }
  int domains(int level) const;  // number of domains of `level`
  // Ranks per domain of `level` when every domain holds the same number, else 0.
  int ranks_per_domain(int level) const;

  // From the node map alone: one level "node" (a node's domain index is its node index).
  static LinkLevels from_nodes(const NodeMap& nodes);
  // Adds a level `name` below the innermost one: each of its domains splits into domains of
  // `size` consecutive ranks (in world-rank order; with nodes of consecutive ranks, simply
  // `size` consecutive world ranks). InputError naming the values unless size >= 1 divides
  // the rank count of every innermost domain, or if `name` is taken or empty.
  void add_inner_level(const std::string& name, int size);
  // InputError unless the levels are well formed: one map per name, all of one world, each
  // domain of level k inside one domain of level k+1.
  void validate() const;
};

// Bytes of one traced call (kind and bytes as in comm/tracer.h) that cross the boundaries of
// level `level`'s domains, under the node-aware algorithm: what enters each domain from
// outside, summed over the domains the group touches (blocks assumed even over the group's n
// ranks, as in the tracer's bytes; n_d of them lie in domain d, D domains are touched):
//   all_gather, reduce_scatter   sum_d bytes (n - n_d) / n  =  bytes (D - 1)
//   all_reduce                   twice that: 2 bytes (D - 1) (a reduce-scatter, then an all-gather)
//   broadcast                    bytes per domain not holding the root: bytes (D - 1)
//   all_to_all                   bytes (1 - sum_d n_d^2 / n^2) (rounded to the nearest byte)
//   send, recv                   bytes when the two peers lie in different domains, else 0
//   barrier                      0
// `ranks` are the group's world ranks (send/recv: the rank and its peer). InputError for an
// unknown kind, a rank outside the levels' world or a level out of range.
int64_t crossing_bytes(const std::string& kind, int64_t bytes, const std::vector<int>& ranks,
                       const LinkLevels& levels, int level);

}  // namespace weft
