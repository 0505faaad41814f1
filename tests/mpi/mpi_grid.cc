// ProcessGrid on the real world: for every layout of the world size (and every order of a
// balanced one), each axis group's all-reduce of the world rank equals the closed-form sum
// of its members, computed from the rank arithmetic alone:
//   members of rank r's group on axis a = { r + (j - c_a) * stride_a : j = 0 .. size_a - 1 },
//   stride_a = product of the sizes of the axes before a in the order.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "comm/tracer.h"
#include "core/error.h"
#include "mpi_test_util.h"
#include "parallel/grid.h"

namespace weft {
namespace {

struct Case {
  int tp, pp, dp;
  std::string order;
};

std::vector<Case> cases_for(int n) {
  std::vector<Case> cases;
  for (int tp = 1; tp <= n; ++tp) {
    for (int pp = 1; tp * pp <= n; ++pp) {
      if (n % (tp * pp) == 0) cases.push_back({tp, pp, n / (tp * pp), "tp-dp-pp"});
    }
  }
  // Every order of the most balanced layout (8 ranks: tp 2 x pp 2 x dp 2).
  const Case balanced = n == 8 ? Case{2, 2, 2, ""} : n == 4 ? Case{2, 1, 2, ""} : Case{1, 1, n, ""};
  for (const char* order : {"tp-pp-dp", "dp-tp-pp", "dp-pp-tp", "pp-tp-dp", "pp-dp-tp"}) {
    Case c = balanced;
    c.order = order;
    cases.push_back(c);
  }
  return cases;
}

// The closed form above, written independently of GridLayout.
int64_t expected_group_sum(const Case& c, Axis a, int r) {
  auto size_of = [&](const std::string& name) { return name == "tp" ? c.tp : name == "pp" ? c.pp : c.dp; };
  int stride = 1;
  for (int i = 0; i < 3; ++i) {
    const std::string name = c.order.substr(static_cast<size_t>(3 * i), 2);
    if (name == axis_name(a)) break;
    stride *= size_of(name);
  }
  const int size = size_of(axis_name(a));
  const int coord = (r / stride) % size;
  int64_t sum = 0;
  for (int j = 0; j < size; ++j) sum += r + (j - coord) * stride;
  return sum;
}

TEST(MpiGrid, AxisGroupsSumTheirMembersForEveryLayout) {
  auto world = test::fresh_world();
  const int n = world->size(), r = world->rank();
  for (const Case& c : cases_for(n)) {
    SCOPED_TRACE(::testing::Message() << "tp " << c.tp << " pp " << c.pp << " dp " << c.dp << " order " << c.order);
    ProcessGrid grid(*world, GridSpec{c.tp, c.pp, c.dp, c.order});
    for (Axis a : kAllAxes) {
      Communicator& comm = grid.comm(a);
      EXPECT_EQ(comm.axis(), axis_name(a));
      EXPECT_EQ(comm.size(), grid.size(a));
      EXPECT_EQ(comm.rank(), grid.coord(a));
      EXPECT_EQ(comm.world_ranks(), grid.layout().group_of(a, r));
      int64_t x[2] = {r, 1};
      comm.all_reduce(x, 2, CommDType::kI64, ReduceOp::kSum);
      EXPECT_EQ(x[0], expected_group_sum(c, a, r)) << axis_name(a);
      EXPECT_EQ(x[1], grid.size(a)) << axis_name(a);
    }
  }
}

TEST(MpiGrid, DescribeAndTracerOnEightRanks) {
  auto world = test::fresh_world();
  if (world->size() != 8) GTEST_SKIP() << "needs 8 ranks (runs in the np 8 case)";
  Tracer tracer;
  world->set_tracer(&tracer);
  ProcessGrid grid(*world, GridSpec{2, 2, 2});
  if (world->rank() == 5) {
    EXPECT_EQ(grid.describe(), "world 8 = tp 2 x dp 2 x pp 2 (order tp-dp-pp); rank 5: tp 1, dp 0, pp 1");
  }
  float g[4] = {1, 1, 1, 1};
  grid.comm(Axis::kDp).all_reduce(g, 4, CommDType::kF32, ReduceOp::kSum);
  EXPECT_EQ(g[0], 2.0f);
  ASSERT_EQ(tracer.events().size(), 1u);
  EXPECT_EQ(tracer.events()[0].axis, "dp");
  EXPECT_EQ(tracer.events()[0].bytes, 16);
  // dp partners differ by the tp size: rank r pairs with r ^ 2.
  const int r = world->rank();
  const int lo = std::min(r, r ^ 2), hi = std::max(r, r ^ 2);
  EXPECT_EQ(tracer.events()[0].group, "ranks " + std::to_string(lo) + "," + std::to_string(hi));
}

TEST(MpiGrid, MismatchedLayoutIsAnInputErrorOnEveryRank) {
  auto world = test::fresh_world();
  const int n = world->size();
  try {
    ProcessGrid grid(*world, GridSpec{n + 1, 1, 1});
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "world size " + std::to_string(n) + " does not equal tp " + std::to_string(n + 1) +
                                         " x pp 1 x dp 1 = " + std::to_string(n + 1));
  }
}

}  // namespace
}  // namespace weft
