// ZeRO++'s arithmetic and settings (parallel/dp/zeropp.h): the gradient hops' routing, the
// data-parallel levels, and the refusals, without processes. The mechanisms on real ranks:
// tests/mpi/mpi_zeropp.cc and tests/parallel/zeropp_runs_test.cc.
#include <gtest/gtest.h>

#include <numeric>

#include "core/error.h"
#include "parallel/dp/zeropp.h"
#include "train/config.h"
#include "train/engine_config.h"

namespace weft {
namespace {

// Plays the hops on P simulated ranks: rank r starts with one unit of every chunk q (a vector
// over q of how many ranks' contributions it holds); each hop moves the chunks as
// chunks_to_member says and sums what arrives. At the end every rank must hold exactly its own
// chunk with all P contributions, and each hop's group must be what grad_hops says.
void play_hops(int P, const std::vector<int>& levels) {
  SCOPED_TRACE(::testing::Message() << "P " << P << ", levels " << ::testing::PrintToString(levels));
  std::vector<std::map<int, int>> held(static_cast<size_t>(P));
  for (int r = 0; r < P; ++r) {
    for (int q = 0; q < P; ++q) held[static_cast<size_t>(r)][q] = 1;
  }
  const size_t H = grad_hops(0, P, levels).size();
  for (size_t k = 0; k < H; ++k) {
    // Members of each hop group, by colour, in index order.
    std::map<int, std::vector<int>> groups;
    for (int r = 0; r < P; ++r) {
      const GradHop h = grad_hops(r, P, levels)[k];
      auto& g = groups[h.color];
      if (g.size() <= static_cast<size_t>(h.index)) g.resize(static_cast<size_t>(h.index) + 1, -1);
      g[static_cast<size_t>(h.index)] = r;
      EXPECT_EQ(chunks_before_hop(r, P, levels, static_cast<int>(k)).size(), held[static_cast<size_t>(r)].size());
    }
    std::vector<std::map<int, int>> next(static_cast<size_t>(P));
    for (const auto& [color, members] : groups) {
      const int n = static_cast<int>(members.size());
      for (int r : members) {
        ASSERT_GE(r, 0) << "hop " << k << " colour " << color << " has a gap";
        EXPECT_EQ(grad_hops(r, P, levels)[k].size, n);
      }
      for (int i = 0; i < n; ++i) {
        const int r = members[static_cast<size_t>(i)];
        for (int m = 0; m < n; ++m) {
          const int dest = members[static_cast<size_t>(m)];
          for (int q : chunks_to_member(r, P, levels, static_cast<int>(k), m)) {
            ASSERT_TRUE(held[static_cast<size_t>(r)].count(q)) << "rank " << r << " sends chunk " << q << " it does not hold";
            next[static_cast<size_t>(dest)][q] += held[static_cast<size_t>(r)][q];
          }
        }
      }
    }
    held = next;
  }
  for (int r = 0; r < P; ++r) {
    ASSERT_EQ(held[static_cast<size_t>(r)].size(), 1u) << "rank " << r;
    EXPECT_EQ(held[static_cast<size_t>(r)].begin()->first, r);
    EXPECT_EQ(held[static_cast<size_t>(r)].begin()->second, P) << "rank " << r << " holds a partial sum";
  }
}

TEST(ZeroPPHops, EveryRankEndsWithItsChunkSummedOverAllRanks) {
  play_hops(1, {});
  play_hops(4, {});
  play_hops(4, {2});
  play_hops(8, {2, 4});
  play_hops(8, {4});
  play_hops(16, {2, 8});
  play_hops(12, {2, 6});
  play_hops(24, {2, 4, 8});
}

TEST(ZeroPPHops, TwoLevelGroupsAreTheNodeAndTheSameSlotAcrossNodes) {
  // 8 ranks, nodes of 4: hop 0 inside the node, hop 1 across nodes among equal local indices.
  const auto h5 = grad_hops(5, 8, {4});
  ASSERT_EQ(h5.size(), 2u);
  EXPECT_EQ(h5[0].size, 4);
  EXPECT_EQ(h5[0].index, 1);
  EXPECT_EQ(h5[1].size, 2);
  EXPECT_EQ(h5[1].index, 1);
  EXPECT_EQ(grad_hops(4, 8, {4})[0].color, h5[0].color);  // same node
  EXPECT_EQ(grad_hops(1, 8, {4})[1].color, h5[1].color);  // same local index 1, other node
  EXPECT_NE(grad_hops(2, 8, {4})[1].color, h5[1].color);
  // The swizzle: rank 5 sends its node peer of index 2 the chunks of ranks 2 and 6.
  EXPECT_EQ(chunks_to_member(5, 8, {4}, 0, 2), (std::vector<int>{2, 6}));
  EXPECT_EQ(chunks_before_hop(5, 8, {4}, 1), (std::vector<int>{1, 5}));
}

TEST(ZeroPPLevels, PeersPerNodeFollowTheGridOrder) {
  // tp 2 x dp 4, nodes of 4 ranks: 2 data-parallel ranks per node.
  GridSpec s;
  s.tp = 2;
  s.dp = 4;
  EXPECT_EQ(dp_peers_per_node(GridLayout(s), emulated_node_map(8, 4)), 2);
  // tp 4 x dp 2 with nodes of 4: each node holds one tp group, so 1 dp rank per node.
  s.tp = 4;
  s.dp = 2;
  EXPECT_EQ(dp_peers_per_node(GridLayout(s), emulated_node_map(8, 4)), 1);
  // dp 8, nodes of 3 do not split the groups evenly (8 is not a multiple of 3): unknown.
  GridSpec d;
  d.dp = 6;
  EXPECT_EQ(dp_peers_per_node(GridLayout(d), emulated_node_map(6, 3)), 3);
}

TEST(ZeroPPLevels, ResolveDerivesTheNodeLevelAndChecksTheList) {
  ZeroPPConfig want;
  want.hpz = 2;
  ZeroPPConfig z = resolve_zeropp(want, 3, 8, 4, {});
  EXPECT_EQ(z.levels, (std::vector<int>{4}));
  EXPECT_EQ(z.level_names, (std::vector<std::string>{"node"}));
  z = resolve_zeropp(want, 3, 8, 4, {2, 4});
  EXPECT_EQ(z.levels, (std::vector<int>{2, 4}));
  EXPECT_EQ(z.level_names, (std::vector<std::string>{"pair", "node"}));
  z = resolve_zeropp(want, 3, 8, 4, {2, 4, 8});  // the whole group may be named last
  EXPECT_EQ(z.levels, (std::vector<int>{2, 4}));
  // One dp rank per node: no level, and a note saying the node level is empty.
  z = resolve_zeropp(want, 3, 2, 1, {});
  EXPECT_TRUE(z.levels.empty());
  ASSERT_FALSE(z.notes.empty());
  EXPECT_NE(z.notes[0].find("node level is empty"), std::string::npos) << z.notes[0];
  // Off: nothing resolved, nothing refused.
  EXPECT_FALSE(resolve_zeropp(ZeroPPConfig{}, 1, 8, 4, {}).active());
}

void expect_refused(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "not refused (expected: " << part << ")";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(ZeroPPLevels, InvalidCombinationsAreRefusedWithTheValues) {
  ZeroPPConfig hpz;
  hpz.hpz = 2;
  expect_refused([&] { resolve_zeropp(hpz, 2, 4, 2, {}); }, "needs zero 3, got zero 2");
  hpz.hpz = 3;
  expect_refused([&] { resolve_zeropp(hpz, 3, 4, 2, {}); }, "hpz_partition_size 3 does not divide the data-parallel group of 4");
  hpz.hpz = 2;
  expect_refused([&] { resolve_zeropp(hpz, 3, 8, 4, {3}); }, "3 does not divide it");
  expect_refused([&] { resolve_zeropp(hpz, 3, 8, 4, {2}); }, "leaves out the node level: the nodes hold 4");
  ZeroPPConfig q;
  q.quantized_weights = true;
  q.weights.bits = 5;
  expect_refused([&] { resolve_zeropp(q, 3, 4, 2, {}); }, "5");
}

RunConfig config_with(std::vector<std::pair<std::string, std::string>> o) {
  o.insert(o.begin(), {{"micro_batch", "1"}, {"global_batch", "8"}});
  return load_run_config("", o);
}

TEST(ZeroPPConfigKeys, DeepSpeedNamesOnTheCommandLineAndInToml) {
  RunConfig c = config_with({{"zero_quantized_weights", "true"},
                             {"zero_hpz_partition_size", "2"},
                             {"zero.quantized_gradients", "true"},
                             {"hierarchy", "2,4"},
                             {"error_feedback", "true"}});
  EXPECT_TRUE(c.quantized_weights);
  EXPECT_EQ(c.hpz_partition_size, 2);
  EXPECT_TRUE(c.quantized_gradients);
  EXPECT_EQ(c.hierarchy, (std::vector<int64_t>{2, 4}));
  // The resolved config reloads to the same values.
  const std::string toml = c.to_toml();
  EXPECT_NE(toml.find("hierarchy = [2, 4]"), std::string::npos) << toml;
  EXPECT_EQ(config_with({{"hierarchy", "[2, 8]"}}).hierarchy, (std::vector<int64_t>{2, 8}));
  expect_refused([] { config_with({{"hierarchy", "2,x"}}); }, "list of integers");
  expect_refused([] { config_with({{"hierarchy", "4,2"}}); }, "larger multiple");
  expect_refused([] { config_with({{"hierarchy", "2,6,8"}}); }, "8 is not of 6");
  expect_refused([] { config_with({{"weight_bits", "6"}}); }, "zero.weight_bits must be 8 or 4, got 6");
  expect_refused([] { config_with({{"block_size", "0"}}); }, "zero.block_size");
  expect_refused([] { config_with({{"error_feedback", "true"}}); }, "needs zero.quantized_gradients");
}

TEST(ZeroPPConfigKeys, LayoutChecksNameTheValues) {
  RunConfig c = config_with({{"zero", "1"}, {"hpz_partition_size", "2"}});
  expect_refused([&] { engine_config(c, 4); }, "needs zero 3, got zero 1");
  c = config_with({{"zero", "3"}, {"hpz_partition_size", "4"}, {"ranks_per_node", "2"}});
  EXPECT_EQ(engine_config(c, 4).data_parallel.zeropp.hpz, 4);  // allowed, spans nodes (a note says so)
  EXPECT_FALSE(engine_config(c, 4).data_parallel.zeropp.notes.empty());
  c = config_with({{"zero", "3"}, {"hpz_partition_size", "3"}});
  expect_refused([&] { engine_config(c, 4); }, "does not divide the data-parallel group of 4");
  c = config_with({{"zero", "3"}, {"quantized_gradients", "true"}, {"hierarchy", "2,4"}, {"ranks_per_node", "4"}});
  const ZeroPPConfig z = engine_config(c, 8).data_parallel.zeropp;
  EXPECT_EQ(z.levels, (std::vector<int>{2, 4}));
  EXPECT_EQ(z.level_names, (std::vector<std::string>{"pair", "node"}));
}

// The engine's layout is the planner's: ZeRO++ as resolved (EngineConfig::set_zeropp) in both the
// store's settings and the layout's knobs; none requested: the layout's defaults.
TEST(ZeroPPConfigKeys, TheEnginesLayoutHoldsTheResolvedKnobs) {
  RunConfig c = config_with({{"zero", "3"}, {"quantized_gradients", "true"}, {"quantized_weights", "true"},
                             {"hierarchy", "2,4"}, {"ranks_per_node", "4"}, {"block_size", "512"}});
  const EngineConfig ec = engine_config(c, 8);
  EXPECT_EQ(ec.layout.zeropp, ZeroPP::kCustom);
  EXPECT_TRUE(ec.layout.qwz);
  EXPECT_TRUE(ec.layout.qgz);
  EXPECT_EQ(ec.layout.hpz, ec.data_parallel.zeropp.hpz);
  EXPECT_EQ(ec.layout.hierarchy, ec.data_parallel.zeropp.levels);
  EXPECT_EQ(ec.layout.quant_block, 512);
  EXPECT_EQ(ec.layout.zero, 3);
  EXPECT_EQ(ec.layout.dp, 8);
  const EngineConfig plain = engine_config(config_with({{"zero", "3"}}), 8);
  EXPECT_EQ(plain.layout.zeropp, ZeroPP::kNone);
  EXPECT_FALSE(plain.layout.zeropp_on());
  Layout want;
  want.dp = 8, want.zero = 3;
  EXPECT_EQ(plain.layout.describe(), want.describe());
  EXPECT_EQ(plain.store_config().zero, 3);
  EXPECT_EQ(plain.store_config().prefetch, plain.data_parallel.prefetch);
}

}  // namespace
}  // namespace weft
