// Link levels (comm/topology.h): nested domains built from the node map, and the bytes of one
// call that cross each level's domain boundaries, against closed forms worked out by hand
// from "what enters each domain from outside".
#include "comm/topology.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"

namespace weft {
namespace {

// 8 ranks, nodes of 4, pairs of 2: pairs {0,1} {2,3} {4,5} {6,7} inside nodes {0-3} {4-7}.
LinkLevels pairs_in_nodes() {
  LinkLevels l = LinkLevels::from_nodes(emulated_node_map(8, 4));
  l.add_inner_level("pair", 2);
  return l;
}
constexpr int kPair = 0, kNode = 1;

TEST(LinkLevels, FromNodesIsOneNodeLevel) {
  const LinkLevels l = LinkLevels::from_nodes(emulated_node_map(8, 4));
  EXPECT_EQ(l.names, std::vector<std::string>{"node"});
  EXPECT_EQ(l.domain_of_rank.at(0), (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(l.domains(0), 2);
  EXPECT_EQ(l.ranks_per_domain(0), 4);
  EXPECT_NO_THROW(l.validate());
}

TEST(LinkLevels, InnerLevelSplitsEachDomainIntoConsecutiveRanks) {
  const LinkLevels l = pairs_in_nodes();
  EXPECT_EQ(l.names, (std::vector<std::string>{"pair", "node"}));
  EXPECT_EQ(l.domain_of_rank.at(kPair), (std::vector<int>{0, 0, 1, 1, 2, 2, 3, 3}));
  EXPECT_EQ(l.domain_of_rank.at(kNode), (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(l.domains(kPair), 4);
  EXPECT_EQ(l.ranks_per_domain(kPair), 2);
  EXPECT_NO_THROW(l.validate());
  // Nodes of interleaved ranks (0,2 | 1,3): the pairs follow the nodes, not the world order.
  LinkLevels x = LinkLevels::from_nodes(node_map_from_keys({0, 1, 0, 1}, "x"));
  x.add_inner_level("one", 1);
  EXPECT_EQ(x.domain_of_rank.at(0), (std::vector<int>{0, 1, 2, 3}));
  LinkLevels y = LinkLevels::from_nodes(node_map_from_keys({0, 1, 0, 1}, "x"));
  y.add_inner_level("pair", 2);
  EXPECT_EQ(y.domain_of_rank.at(0), (std::vector<int>{0, 1, 0, 1}));
  EXPECT_NO_THROW(y.validate());
}

TEST(LinkLevels, BadLevelsAreInputErrorsWithTheValues) {
  LinkLevels l = LinkLevels::from_nodes(emulated_node_map(8, 4));
  try {
    l.add_inner_level("triple", 3);
    FAIL() << "3 does not divide a node of 4";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("3 ranks per domain does not divide domain 0 of level 'node' (4 ranks)"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(l.add_inner_level("zero", 0), InputError);
  EXPECT_THROW(l.add_inner_level("node", 2), InputError);
  EXPECT_THROW(l.add_inner_level("", 2), InputError);
  EXPECT_EQ(l.levels(), 1);  // nothing was added
  LinkLevels bad = pairs_in_nodes();
  bad.domain_of_rank[kPair] = {0, 0, 1, 1, 1, 2, 3, 3};  // pair 1 = ranks 2,3,4 spans both nodes
  EXPECT_THROW(bad.validate(), InputError);
}

TEST(CrossingBytes, GatherAndScatterMoveEveryOutsideBlockIntoEachDomain) {
  const LinkLevels l = pairs_in_nodes();
  const std::vector<int> all = {0, 1, 2, 3, 4, 5, 6, 7};
  for (const char* kind : {"all_gather", "reduce_scatter"}) {
    // 8 ranks, 100 B blocks: each pair receives the 6 outside blocks (600 B) x 4 pairs; each
    // node the 4 outside blocks (400 B) x 2 nodes.
    EXPECT_EQ(crossing_bytes(kind, 800, all, l, kPair), 2400) << kind;
    EXPECT_EQ(crossing_bytes(kind, 800, all, l, kNode), 800) << kind;
    // Ranks 0,1,2 (100 B blocks): pair {0,1} receives 100, pair {2} 200; one node: nothing.
    EXPECT_EQ(crossing_bytes(kind, 300, {0, 1, 2}, l, kPair), 300) << kind;
    EXPECT_EQ(crossing_bytes(kind, 300, {0, 1, 2}, l, kNode), 0) << kind;
    EXPECT_EQ(crossing_bytes(kind, 300, {4, 5}, l, kPair), 0) << kind;  // inside one pair
  }
}

TEST(CrossingBytes, AllReduceIsTwiceTheGather) {
  const LinkLevels l = pairs_in_nodes();
  EXPECT_EQ(crossing_bytes("all_reduce", 800, {0, 1, 2, 3, 4, 5, 6, 7}, l, kPair), 4800);
  EXPECT_EQ(crossing_bytes("all_reduce", 800, {0, 1, 2, 3, 4, 5, 6, 7}, l, kNode), 1600);
  EXPECT_EQ(crossing_bytes("all_reduce", 800, {0, 4}, l, kNode), 1600);  // 2 x 800 (n - 1)/n x 2 nodes
  EXPECT_EQ(crossing_bytes("all_reduce", 800, {3}, l, kNode), 0);        // a group of one
}

TEST(CrossingBytes, BroadcastEntersEachDomainWithoutTheRootOnce) {
  const LinkLevels l = pairs_in_nodes();
  EXPECT_EQ(crossing_bytes("broadcast", 100, {0, 2, 4, 6}, l, kPair), 300);
  EXPECT_EQ(crossing_bytes("broadcast", 100, {0, 2, 4, 6}, l, kNode), 100);
  EXPECT_EQ(crossing_bytes("broadcast", 100, {6, 7}, l, kPair), 0);
}

TEST(CrossingBytes, AllToAllMovesTheBlocksBetweenDomains) {
  const LinkLevels l = pairs_in_nodes();
  const std::vector<int> all = {0, 1, 2, 3, 4, 5, 6, 7};
  // 64 blocks of 10 B: a block stays inside a pair for 4 x 2 x 2 = 16 of them, inside a node
  // for 2 x 4 x 4 = 32.
  EXPECT_EQ(crossing_bytes("all_to_all", 640, all, l, kPair), 480);
  EXPECT_EQ(crossing_bytes("all_to_all", 640, all, l, kNode), 320);
  // Ranks 0,1,2: 9 blocks of 100 B, 4 + 1 stay inside a pair.
  EXPECT_EQ(crossing_bytes("all_to_all", 900, {0, 1, 2}, l, kPair), 400);
  EXPECT_EQ(crossing_bytes("all_to_all", 900, {0, 1, 2}, l, kNode), 0);
  EXPECT_EQ(crossing_bytes("all_to_all", 10, {0, 1, 2}, l, kPair), 4);  // 40/9: rounded to the nearest byte
}

TEST(CrossingBytes, PointToPointCrossesWhenThePeersLieApart) {
  const LinkLevels l = pairs_in_nodes();
  for (const char* kind : {"send", "recv"}) {
    EXPECT_EQ(crossing_bytes(kind, 64, {0, 1}, l, kPair), 0) << kind;
    EXPECT_EQ(crossing_bytes(kind, 64, {1, 2}, l, kPair), 64) << kind;
    EXPECT_EQ(crossing_bytes(kind, 64, {1, 2}, l, kNode), 0) << kind;
    EXPECT_EQ(crossing_bytes(kind, 64, {3, 4}, l, kNode), 64) << kind;
  }
  EXPECT_EQ(crossing_bytes("barrier", 0, {0, 7}, l, kNode), 0);
}

TEST(CrossingBytes, BadArgumentsAreInputErrors) {
  const LinkLevels l = pairs_in_nodes();
  EXPECT_THROW(crossing_bytes("all_scatter", 8, {0, 1}, l, kPair), InputError);
  EXPECT_THROW(crossing_bytes("all_gather", 8, {0, 8}, l, kPair), InputError);
  EXPECT_THROW(crossing_bytes("all_gather", 8, {0, 1}, l, 2), InputError);
}

}  // namespace
}  // namespace weft
