// ProcessGrid arithmetic (GridLayout) for several sizes and orders against closed forms, the
// grid on a one-rank world, and every layout validation message.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "comm/self_comm.h"
#include "core/error.h"
#include "parallel/grid.h"

namespace weft {
namespace {

constexpr int kTp = 0, kPp = 1, kDp = 2;

std::string input_error(const GridSpec& spec, int world) {
  try {
    validate_layout(spec, world);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(GridLayout, DefaultOrderPutsTpInnermost) {
  GridLayout g(GridSpec{2, 2, 2});  // tp 2, pp 2, dp 2, order tp-dp-pp
  for (int r = 0; r < 8; ++r) {
    const GridCoords c = g.coords_of(r);
    EXPECT_EQ(c[kTp], r % 2) << r;
    EXPECT_EQ(c[kDp], (r / 2) % 2) << r;
    EXPECT_EQ(c[kPp], r / 4) << r;
    EXPECT_EQ(g.world_rank_of(c), r);
  }
  EXPECT_EQ(g.group_of(Axis::kTp, 5), (std::vector<int>{4, 5}));
  EXPECT_EQ(g.group_of(Axis::kDp, 5), (std::vector<int>{5, 7}));
  EXPECT_EQ(g.group_of(Axis::kPp, 5), (std::vector<int>{1, 5}));
  EXPECT_EQ(g.describe(), "world 8 = tp 2 x dp 2 x pp 2 (order tp-dp-pp)");
}

TEST(GridLayout, HandCheckedRanksOfOtherOrders) {
  // pp-tp-dp, tp 2 pp 3 dp 2: rank = pp + 3 * (tp + 2 * dp).
  GridLayout g(GridSpec{2, 3, 2, "pp-tp-dp"});
  EXPECT_EQ(g.world_rank_of({1, 2, 1}), 2 + 3 * (1 + 2 * 1));  // tp 1, pp 2, dp 1 -> 11
  EXPECT_EQ(g.coords_of(7), (GridCoords{0, 1, 1}));          // 7 = 1 + 3 * (0 + 2 * 1)
  EXPECT_EQ(g.group_of(Axis::kTp, 7), (std::vector<int>{7, 10}));
  EXPECT_EQ(g.group_of(Axis::kPp, 7), (std::vector<int>{6, 7, 8}));
  EXPECT_EQ(g.group_of(Axis::kDp, 7), (std::vector<int>{1, 7}));
  // dp-pp-tp, tp 4 pp 1 dp 2: rank = dp + 2 * tp.
  GridLayout h(GridSpec{4, 1, 2, "dp-pp-tp"});
  EXPECT_EQ(h.group_of(Axis::kTp, 1), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(h.group_of(Axis::kDp, 6), (std::vector<int>{6, 7}));
  EXPECT_EQ(h.describe(), "world 8 = dp 2 x pp 1 x tp 4 (order dp-pp-tp)");
}

// Every order and several sizes: coordinates are the mixed-radix digits of the rank with the
// first axis of the order least significant; groups partition the world.
TEST(GridLayout, AllOrdersMixedRadix) {
  const std::vector<std::string> orders = {"tp-dp-pp", "tp-pp-dp", "dp-tp-pp", "dp-pp-tp", "pp-tp-dp", "pp-dp-tp"};
  const std::vector<std::array<int, 3>> sizes = {{1, 1, 1}, {2, 1, 1}, {1, 3, 1}, {1, 1, 4}, {2, 2, 2},
                                                 {4, 2, 1}, {3, 2, 5}, {2, 4, 3}};
  for (const std::string& order : orders) {
    for (const auto& s : sizes) {
      GridSpec spec{s[0], s[1], s[2], order};
      GridLayout g(spec);
      const int world = s[0] * s[1] * s[2];
      ASSERT_EQ(g.world_size(), world);
      // The order's axes as indices, fastest first.
      std::array<int, 3> ax{};
      for (int i = 0; i < 3; ++i) {
        const std::string name = order.substr(static_cast<size_t>(3 * i), 2);
        ax[static_cast<size_t>(i)] = name == "tp" ? kTp : name == "pp" ? kPp : kDp;
      }
      const int s0 = s[static_cast<size_t>(ax[0])], s1 = s[static_cast<size_t>(ax[1])];
      for (int r = 0; r < world; ++r) {
        const GridCoords c = g.coords_of(r);
        EXPECT_EQ(c[static_cast<size_t>(ax[0])], r % s0) << order << " rank " << r;
        EXPECT_EQ(c[static_cast<size_t>(ax[1])], (r / s0) % s1) << order << " rank " << r;
        EXPECT_EQ(c[static_cast<size_t>(ax[2])], r / (s0 * s1)) << order << " rank " << r;
        EXPECT_EQ(g.world_rank_of(c), r);
      }
      for (Axis a : kAllAxes) {
        std::set<int> covered;
        for (int r = 0; r < world; ++r) {
          const std::vector<int> grp = g.group_of(a, r);
          ASSERT_EQ(static_cast<int>(grp.size()), g.size(a));
          EXPECT_TRUE(std::find(grp.begin(), grp.end(), r) != grp.end());
          EXPECT_EQ(grp[static_cast<size_t>(g.coords_of(r)[static_cast<size_t>(a)])], r);  // group rank = coordinate
          for (int m : grp) {
            GridCoords cm = g.coords_of(m), cr = g.coords_of(r);
            cm[static_cast<size_t>(a)] = cr[static_cast<size_t>(a)] = 0;
            EXPECT_EQ(cm, cr) << "members differ only on axis " << axis_name(a);
          }
          covered.insert(grp.begin(), grp.end());
        }
        EXPECT_EQ(static_cast<int>(covered.size()), world);
      }
    }
  }
}

TEST(Grid, OnOneRankEveryAxisIsSizeOne) {
  auto world = make_self_communicator();
  ProcessGrid grid(*world, GridSpec{});
  for (Axis a : kAllAxes) {
    EXPECT_EQ(grid.size(a), 1);
    EXPECT_EQ(grid.coord(a), 0);
    EXPECT_EQ(grid.comm(a).size(), 1);
    EXPECT_EQ(grid.comm(a).axis(), axis_name(a));
  }
  EXPECT_EQ(&grid.world(), world.get());
  EXPECT_EQ(grid.describe(), "world 1 = tp 1 x dp 1 x pp 1 (order tp-dp-pp); rank 0: tp 0, dp 0, pp 0");
  float x = 2.0f;
  grid.comm(Axis::kDp).all_reduce_sum(&x, 1);
  EXPECT_EQ(x, 2.0f);
}

TEST(Grid, LayoutThatDoesNotMatchTheWorldIsAnInputError) {
  auto world = make_self_communicator();
  try {
    ProcessGrid grid(*world, GridSpec{2, 1, 1});
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "world size 1 does not equal tp 2 x pp 1 x dp 1 = 2");
  }
}

TEST(GridValidate, AcceptsGoodLayouts) {
  EXPECT_NO_THROW(validate_layout(GridSpec{2, 2, 2}, 8));
  EXPECT_NO_THROW(validate_layout(GridSpec{1, 1, 1}, 1));
  EXPECT_NO_THROW(validate_layout(GridSpec{4, 1, 1, "dp-pp-tp"}, 4));
  EXPECT_NO_THROW(validate_layout(GridSpec{1, 1, 3}, 3));
}

TEST(GridValidate, MessagesNameTheNumbers) {
  EXPECT_EQ(input_error(GridSpec{2, 2, 2}, 6), "world size 6 does not equal tp 2 x pp 2 x dp 2 = 8");
  // What the model and the batch require (heads % tp, layers, batch) is a layout rule:
  // tests/parallel/layout_rules_test.cc.
  EXPECT_EQ(input_error(GridSpec{0, 1, 1}, 0), "tp size 0 must be at least 1");
  EXPECT_EQ(input_error(GridSpec{1, -2, 1}, 1), "pp size -2 must be at least 1");
  EXPECT_EQ(input_error(GridSpec{1, 1, 0}, 1), "dp size 0 must be at least 1");
  EXPECT_EQ(input_error(GridSpec{1, 1, 1, "tp-xp-pp"}, 1), "unknown axis 'xp' in order 'tp-xp-pp' (axes: tp, pp, dp)");
  EXPECT_EQ(input_error(GridSpec{1, 1, 1, "tp-tp-pp"}, 1), "axis 'tp' appears twice in order 'tp-tp-pp'");
  EXPECT_EQ(input_error(GridSpec{1, 1, 1, "tp-dp"}, 1),
            "order 'tp-dp' does not name axis pp (it must list each of tp, pp, dp once)");
  EXPECT_EQ(input_error(GridSpec{1, 1, 1, ""}, 1), "unknown axis '' in order '' (axes: tp, pp, dp)");
  EXPECT_THROW(GridLayout(GridSpec{1, 1, 1, "tp-dp-pp-cp"}), InputError);
}

// HSDP: dp = dp_shard x dp_replicate with dp_shard fastest inside dp, so with the default order
// (ORBIT's: tp innermost, then dp_shard, then dp_replicate) world rank = tp + 2 * (shard + 2 *
// replica) for tp 2, dp_shard 2, dp_replicate 2.
TEST(GridLayout, HybridShardedDpPutsTpThenShardThenReplica) {
  GridSpec spec{2, 1, 4};
  spec.dp_replicate = 2;
  GridLayout g(spec);
  EXPECT_EQ(g.dp_shard(), 2);
  EXPECT_EQ(g.dp_replicate(), 2);
  for (int tp = 0; tp < 2; ++tp) {
    for (int shard = 0; shard < 2; ++shard) {
      for (int replica = 0; replica < 2; ++replica) {
        const int r = tp + 2 * (shard + 2 * replica);
        const GridCoords c = g.coords_of(r);
        EXPECT_EQ(c[kTp], tp) << r;
        EXPECT_EQ(c[kDp], shard + 2 * replica) << r;  // the dp rank: the data order is the dp rank's
        EXPECT_EQ(g.dp_shard_index(r), shard) << r;
        EXPECT_EQ(g.dp_replicate_index(r), replica) << r;
        // The dp_shard group: same tp and replica, shards 0, 1; the dp_replicate group: same
        // tp and shard, replicas 0, 1.
        EXPECT_EQ(g.dp_shard_group(r), (std::vector<int>{tp + 2 * (0 + 2 * replica), tp + 2 * (1 + 2 * replica)})) << r;
        EXPECT_EQ(g.dp_replicate_group(r), (std::vector<int>{tp + 2 * shard, tp + 2 * (shard + 2)})) << r;
      }
    }
  }
  EXPECT_EQ(g.group_of(Axis::kDp, 5), (std::vector<int>{1, 3, 5, 7}));  // the whole dp group is unchanged
  EXPECT_EQ(g.describe(), "world 8 = tp 2 x dp 4 x pp 1 (order tp-dp-pp; dp 4 = dp_shard 2 x dp_replicate 2)");
  EXPECT_EQ(dp_split_text(spec), "dp 4 = dp_shard 2 x dp_replicate 2");
  EXPECT_EQ(dp_split_text(GridSpec{2, 1, 4}), "dp 4");
  // Plain dp: the shard group is the dp group, each rank its own replica group.
  GridLayout plain(GridSpec{2, 1, 4});
  EXPECT_EQ(plain.dp_shard_group(5), plain.group_of(Axis::kDp, 5));
  EXPECT_EQ(plain.dp_replicate_group(5), (std::vector<int>{5}));
  EXPECT_EQ(plain.describe(), "world 8 = tp 2 x dp 4 x pp 1 (order tp-dp-pp)");
}

TEST(GridLayout, HybridShardedDpGroupsPartitionTheDpGroups) {
  for (const std::string order : {"tp-dp-pp", "dp-tp-pp", "pp-dp-tp"}) {
    for (const auto& [dp, rep] : std::vector<std::pair<int, int>>{{4, 2}, {6, 3}, {6, 2}, {8, 4}, {4, 4}, {4, 1}}) {
      GridSpec spec{2, 2, dp, order};
      spec.dp_replicate = rep;
      GridLayout g(spec);
      const int S = dp / rep;
      for (int r = 0; r < g.world_size(); ++r) {
        const std::vector<int> shard = g.dp_shard_group(r), repl = g.dp_replicate_group(r);
        ASSERT_EQ(static_cast<int>(shard.size()), S);
        ASSERT_EQ(static_cast<int>(repl.size()), rep);
        EXPECT_EQ(shard[static_cast<size_t>(g.dp_shard_index(r))], r);
        EXPECT_EQ(repl[static_cast<size_t>(g.dp_replicate_index(r))], r);
        const std::vector<int> dpg = g.group_of(Axis::kDp, r);
        // Shard groups are runs of S consecutive dp ranks; replicate groups stride S.
        const int q = g.dp_replicate_index(r), k = g.dp_shard_index(r);
        for (int i = 0; i < S; ++i) EXPECT_EQ(shard[static_cast<size_t>(i)], dpg[static_cast<size_t>(q * S + i)]);
        for (int i = 0; i < rep; ++i) EXPECT_EQ(repl[static_cast<size_t>(i)], dpg[static_cast<size_t>(k + S * i)]);
      }
    }
  }
}

TEST(Grid, OnOneRankHybridOfOneIsPlain) {
  auto world = make_self_communicator();
  ProcessGrid grid(*world, GridSpec{});
  EXPECT_EQ(grid.dp_shard_coord(), 0);
  EXPECT_EQ(grid.dp_replicate_coord(), 0);
}

TEST(GridValidate, HybridShardedDpMessagesNameTheNumbers) {
  GridSpec spec{2, 1, 4};
  spec.dp_replicate = 3;
  EXPECT_EQ(input_error(spec, 8), "dp_replicate 3 does not divide dp 4 (dp = dp_shard x dp_replicate)");
  spec.dp_replicate = 0;
  EXPECT_EQ(input_error(spec, 8), "dp_replicate 0 must be at least 1");
  EXPECT_THROW(GridLayout{spec}, InputError);
  spec.dp_replicate = 2;
  EXPECT_NO_THROW(validate_layout(spec, 8));
}

}  // namespace
}  // namespace weft
