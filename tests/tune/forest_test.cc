// The tuner's random-forest surrogate (tune/forest.h): it fits a step and a smooth function,
// its variance grows away from the data, its leaves hold the mean and variance of their rows,
// its prediction is the law of total variance over the trees, and a seed fixes it.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <numbers>

#include "tune/forest.h"
#include "tune/tune_test_util.h"

namespace weft::tune {
namespace {

using test::expect_input_error;
using test::uniform_rows;

double rmse(const Forest& f, const std::vector<std::vector<double>>& x, const std::function<double(double, double)>& g) {
  double ss = 0;
  for (const auto& r : x) {
    const double e = f.predict(r).mean - g(r[0], r[1]);
    ss += e * e;
  }
  return std::sqrt(ss / static_cast<double>(x.size()));
}

TEST(Forest, FitsStepFunction) {
  // y = 1 below 0.4, 3 above, on 200 evenly spaced x; checked on 1000 other x.
  std::vector<std::vector<double>> x;
  std::vector<double> y;
  for (int i = 0; i < 200; ++i) {
    const double v = (i + 0.5) / 200;
    x.push_back({v});
    y.push_back(v < 0.4 ? 1.0 : 3.0);
  }
  ForestOptions opt;
  opt.seed = 7;
  const Forest f = Forest::fit(x, y, opt);
  double worst_far = 0, ss = 0;
  for (int i = 0; i < 1000; ++i) {
    const double v = (i + 0.25) / 1000;
    const double err = std::abs(f.predict(std::vector<double>{v}).mean - (v < 0.4 ? 1.0 : 3.0));
    ss += err * err;
    // Away from the step every tree's leaf is pure: a bootstrap would have to miss the ~10
    // grid points between x and the step for a tree to err there.
    if (std::abs(v - 0.4) > 0.05) worst_far = std::max(worst_far, err);
  }
  EXPECT_LT(worst_far, 1e-12);
  EXPECT_LT(std::sqrt(ss / 1000), 0.05);  // the step is blurred over about one grid spacing
}

TEST(Forest, FitsSmoothFunction2D) {
  // f = sin(2 pi x1) + 2 x2^2 (range about [-1, 3], standard deviation 0.94 on the square).
  auto g = [](double a, double b) { return std::sin(2 * std::numbers::pi * a) + 2 * b * b; };
  const auto train = uniform_rows(500, 2, 11), held_out = uniform_rows(500, 2, 12);
  std::vector<double> y;
  for (const auto& r : train) y.push_back(g(r[0], r[1]));
  ForestOptions opt;
  opt.seed = 3;
  const Forest f = Forest::fit(train, y, opt);
  EXPECT_LT(rmse(f, train, g), 0.05);
  EXPECT_LT(rmse(f, held_out, g), 0.10);
}

TEST(Forest, VarianceIsLargerAwayFromData) {
  // y = 4x on x in [0, 0.3] and [0.7, 1] (step 0.01): in the gap the trees disagree on where
  // the two sides meet, near the data they agree (measured: 0.57 in the gap, 0.0009 on the
  // data, seed 5).
  std::vector<std::vector<double>> x;
  std::vector<double> y;
  for (int i = 0; i <= 100; ++i) {
    const double v = i / 100.0;
    if (v > 0.3 + 1e-9 && v < 0.7 - 1e-9) continue;
    x.push_back({v});
    y.push_back(4 * v);
  }
  ForestOptions opt;
  opt.seed = 5;
  const Forest f = Forest::fit(x, y, opt);
  double data_mean_var = 0;
  for (const auto& r : x) data_mean_var += f.predict(r).variance;
  data_mean_var /= static_cast<double>(x.size());
  const Prediction gap = f.predict(std::vector<double>{0.5});
  EXPECT_GT(gap.variance, 100 * data_mean_var) << "gap " << gap.variance << " data " << data_mean_var;
  EXPECT_GT(gap.mean, 1.2);  // between the sides' edge values 1.2 and 2.8
  EXPECT_LT(gap.mean, 2.8);
}

TEST(Forest, LeavesHoldMeanAndVarianceOfTheirRows) {
  // No bootstrap, depth 1: every tree makes the one best split, x <= 1.5, of y = 1, 2, 10, 11.
  const std::vector<std::vector<double>> x = {{0}, {1}, {2}, {3}};
  const std::vector<double> y = {1, 2, 10, 11};
  ForestOptions opt;
  opt.n_trees = 3;
  opt.bootstrap = false;
  opt.max_depth = 1;
  const Forest f = Forest::fit(x, y, opt);
  for (const Tree& t : f.trees()) {
    ASSERT_EQ(t.nodes.size(), 3u);
    EXPECT_EQ(t.nodes[0].feature, 0);
    EXPECT_DOUBLE_EQ(t.nodes[0].threshold, 1.5);
  }
  const Prediction left = f.predict(std::vector<double>{0.2}), right = f.predict(std::vector<double>{7});
  EXPECT_DOUBLE_EQ(left.mean, 1.5);
  EXPECT_DOUBLE_EQ(left.variance, 0.25);  // identical trees: the leaf variance alone
  EXPECT_DOUBLE_EQ(right.mean, 10.5);
  EXPECT_DOUBLE_EQ(right.variance, 0.25);
  // One leaf (no split allowed): the sample mean 6 and population variance 20.5.
  opt.min_samples_split = 5;
  const Prediction all = Forest::fit(x, y, opt).predict(std::vector<double>{1});
  EXPECT_DOUBLE_EQ(all.mean, 6);
  EXPECT_DOUBLE_EQ(all.variance, 20.5);
  // min_variance floors each leaf's variance.
  opt.min_samples_split = 2;
  opt.min_variance = 1.0;
  EXPECT_DOUBLE_EQ(Forest::fit(x, y, opt).predict(std::vector<double>{0.2}).variance, 1.0);
}

// The leaf x falls in, walked from the root by a plain loop.
const TreeNode& walk(const Tree& t, const std::vector<double>& x) {
  int i = 0;
  while (t.nodes[static_cast<size_t>(i)].feature >= 0) {
    const TreeNode& n = t.nodes[static_cast<size_t>(i)];
    i = x[static_cast<size_t>(n.feature)] <= n.threshold ? n.left : n.right;
  }
  return t.nodes[static_cast<size_t>(i)];
}

TEST(Forest, PredictionIsTotalVarianceOverTrees) {
  const auto x = uniform_rows(60, 3, 21);
  std::vector<double> y;
  for (const auto& r : x) y.push_back(r[0] * r[1] + r[2]);
  ForestOptions opt;
  opt.n_trees = 25;
  opt.min_samples_leaf = 4;  // leaves with several rows: a non-zero within-leaf term
  opt.max_features = 0.5;
  opt.seed = 9;
  const Forest f = Forest::fit(x, y, opt);
  for (const auto& q : uniform_rows(20, 3, 22)) {
    // E[v_t] + Var[mu_t] as E[v_t + mu_t^2] - E[mu_t]^2 (skopt's form), a different route.
    double m = 0, second = 0;
    for (const Tree& t : f.trees()) {
      const TreeNode& leaf = walk(t, q);
      m += leaf.mean;
      second += leaf.variance + leaf.mean * leaf.mean;
    }
    m /= 25;
    const Prediction p = f.predict(q);
    EXPECT_NEAR(p.mean, m, 1e-12);
    EXPECT_NEAR(p.variance, second / 25 - m * m, 1e-9);
  }
}

TEST(Forest, LeavesRespectMinSamplesLeafAndMaxDepth) {
  const auto x = uniform_rows(200, 2, 31);
  std::vector<double> y;
  for (const auto& r : x) y.push_back(std::sin(5 * r[0]) + r[1]);
  ForestOptions opt;
  opt.n_trees = 10;
  opt.min_samples_leaf = 5;
  opt.max_depth = 4;
  opt.seed = 1;
  const Forest f = Forest::fit(x, y, opt);
  for (const Tree& t : f.trees()) {
    // Depth of every node by a walk from the root.
    std::vector<int> depth(t.nodes.size(), 0);
    int max_depth = 0, leaves = 0;
    for (size_t i = 0; i < t.nodes.size(); ++i) {
      const TreeNode& n = t.nodes[i];
      if (n.feature < 0) {
        EXPECT_GE(n.count, 5);
        ++leaves;
        continue;
      }
      depth[static_cast<size_t>(n.left)] = depth[static_cast<size_t>(n.right)] = depth[i] + 1;
      max_depth = std::max(max_depth, depth[i] + 1);
      EXPECT_EQ(t.nodes[static_cast<size_t>(n.left)].count + t.nodes[static_cast<size_t>(n.right)].count, n.count);
    }
    EXPECT_EQ(max_depth, 4);  // 200 rows of a non-constant function fill the allowed depth
    EXPECT_LE(leaves, 16);
    EXPECT_EQ(t.nodes[0].count, 200);
  }
}

TEST(Forest, SeedFixesTheForest) {
  const auto x = uniform_rows(80, 2, 41);
  std::vector<double> y;
  for (const auto& r : x) y.push_back(r[0] - 2 * r[1] * r[1]);
  ForestOptions opt;
  opt.n_trees = 20;
  opt.seed = 123;
  const Forest a = Forest::fit(x, y, opt), b = Forest::fit(x, y, opt);
  opt.seed = 124;
  const Forest c = Forest::fit(x, y, opt);
  int differ = 0;
  for (const auto& q : uniform_rows(50, 2, 42)) {
    EXPECT_EQ(a.predict(q).mean, b.predict(q).mean);
    EXPECT_EQ(a.predict(q).variance, b.predict(q).variance);
    differ += a.predict(q).mean != c.predict(q).mean;
  }
  EXPECT_GT(differ, 25);  // another seed: other bootstraps, other trees
}

TEST(Forest, RefusesBadInput) {
  const std::vector<std::vector<double>> x = {{0, 1}, {1, 2}};
  const std::vector<double> y = {1, 2};
  ForestOptions opt;
  expect_input_error([&] { Forest::fit({}, {}, opt); }, {"no rows"});
  expect_input_error([&] { Forest::fit(x, {1}, opt); }, {"2 rows", "1 targets"});
  expect_input_error([&] { Forest::fit({{0, 1}, {1}}, y, opt); }, {"row 1 has 1 features", "row 0 has 2"});
  expect_input_error([&] { Forest::fit(x, {1, std::nan("")}, opt); }, {"target of row 1", "nan"});
  expect_input_error([&] { Forest::fit({{0, 1}, {INFINITY, 2}}, y, opt); }, {"row 1 feature 0 is inf"});
  ForestOptions bad = opt;
  bad.max_features = 1.5;
  expect_input_error([&] { Forest::fit(x, y, bad); }, {"max_features = 1.5"});
  bad = opt;
  bad.n_trees = 0;
  expect_input_error([&] { Forest::fit(x, y, bad); }, {"n_trees = 0"});
  bad = opt;
  bad.min_samples_leaf = 0;
  expect_input_error([&] { Forest::fit(x, y, bad); }, {"min_samples_leaf = 0"});
  const Forest f = Forest::fit(x, y, opt);
  expect_input_error([&] { f.predict(std::vector<double>{1, 2, 3}); }, {"3 features", "fitted on 2"});
}

}  // namespace
}  // namespace weft::tune
