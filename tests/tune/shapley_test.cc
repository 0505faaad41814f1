// Exact Shapley values (tune/shapley.h) against closed forms: an additive function's terms,
// the product's even split, the permutation definition, efficiency; the validity rule on a
// tp * pp * dp = 8 constraint; the mean |phi| ranking; the sensitivity of a fitted surrogate.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>

#include "tune/forest.h"
#include "tune/shapley.h"
#include "tune/tune_test_util.h"

namespace weft::tune {
namespace {

using test::expect_input_error;
using test::uniform_rows;
using Rows = std::vector<std::vector<double>>;

double sum(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0); }

// The four terms of an additive function f(x) = sum_i g_i(x_i).
double g(int i, double v) {
  switch (i) {
    case 0: return v * v;
    case 1: return std::sin(3 * v);
    case 2: return 2 * v;
    default: return std::exp(v);
  }
}

TEST(Shapley, AdditiveFunctionGivesCenteredTerms) {
  // phi_i = g_i(x_i) - mean_b g_i(b_i): each term only moves with its own feature.
  const Model f = [](std::span<const double> x) { return g(0, x[0]) + g(1, x[1]) + g(2, x[2]) + g(3, x[3]); };
  const Rows points = uniform_rows(6, 4, 1), background = uniform_rows(15, 4, 2);
  const ShapleyValues s = shapley_values(f, points, background);
  ASSERT_EQ(s.phi.size(), 6u);
  double base = 0;
  for (const auto& b : background) base += f(b);
  EXPECT_NEAR(s.base, base / 15, 1e-12);
  for (size_t p = 0; p < points.size(); ++p) {
    ASSERT_EQ(s.phi[p].size(), 4u);
    EXPECT_EQ(s.value[p], f(points[p]));
    for (int i = 0; i < 4; ++i) {
      double mean_g = 0;
      for (const auto& b : background) mean_g += g(i, b[static_cast<size_t>(i)]);
      EXPECT_NEAR(s.phi[p][static_cast<size_t>(i)], g(i, points[p][static_cast<size_t>(i)]) - mean_g / 15, 1e-12)
          << "point " << p << " feature " << i;
    }
  }
}

TEST(Shapley, ProductSplitsTheInteraction) {
  const Model f = [](std::span<const double> x) { return x[0] * x[1]; };
  const Rows points = {{2, 3}, {-1, 4}, {0.5, 0.5}};
  // Baseline 0: the textbook even split, x1 x2 / 2 each.
  const ShapleyValues zero = shapley_values(f, points, {{0, 0}});
  for (size_t p = 0; p < points.size(); ++p) {
    EXPECT_NEAR(zero.phi[p][0], points[p][0] * points[p][1] / 2, 1e-15);
    EXPECT_NEAR(zero.phi[p][1], points[p][0] * points[p][1] / 2, 1e-15);
  }
  // A background B: phi_1 = (x1 E[b2] - E[b1 b2] + x1 x2 - E[b1] x2) / 2, phi_2 likewise.
  const Rows background = {{1, 2}, {3, -1}, {0, 5}};
  const double e1 = 4.0 / 3, e2 = 2.0, e12 = (2.0 - 3.0 + 0.0) / 3;
  const ShapleyValues s = shapley_values(f, points, background);
  for (size_t p = 0; p < points.size(); ++p) {
    const double x1 = points[p][0], x2 = points[p][1];
    EXPECT_NEAR(s.phi[p][0], (x1 * e2 - e12 + x1 * x2 - e1 * x2) / 2, 1e-12);
    EXPECT_NEAR(s.phi[p][1], (e1 * x2 - e12 + x1 * x2 - x1 * e2) / 2, 1e-12);
  }
}

// A model with interactions and a kink, and a sixth feature it ignores.
double nonlinear(std::span<const double> x) {
  return std::exp(x[0]) * x[1] + x[2] * x[3] * x[4] - std::max(x[0], x[4]);
}

TEST(Shapley, EfficiencyAndTheNullFeature) {
  const Rows points = uniform_rows(8, 6, 3), background = uniform_rows(20, 6, 4);
  const ShapleyValues s = shapley_values(nonlinear, points, background);
  for (size_t p = 0; p < points.size(); ++p) {
    EXPECT_NEAR(sum(s.phi[p]), nonlinear(points[p]) - s.base, 1e-12) << "point " << p;
    // f never reads feature 5: v(S u {5}) = v(S) up to the rounding of a mean.
    EXPECT_NEAR(s.phi[p][5], 0.0, 1e-15);
  }
}

// Shapley values by their first definition: the mean over all K! orders of the features of
// each feature's marginal contribution when it joins, with v given by a function of the mask.
std::vector<double> shapley_by_permutations(int k, const std::function<double(uint32_t)>& v) {
  std::vector<int> order(static_cast<size_t>(k));
  std::iota(order.begin(), order.end(), 0);
  std::vector<double> phi(static_cast<size_t>(k), 0.0);
  int n_orders = 0;
  do {
    uint32_t mask = 0;
    for (int i : order) {
      phi[static_cast<size_t>(i)] += v(mask | (1u << i)) - v(mask);
      mask |= 1u << i;
    }
    ++n_orders;
  } while (std::next_permutation(order.begin(), order.end()));
  for (double& p : phi) p /= n_orders;
  return phi;
}

TEST(Shapley, MatchesThePermutationDefinition) {
  const Rows points = uniform_rows(3, 5, 5), background = uniform_rows(7, 5, 6);
  const Model f = [](std::span<const double> x) { return nonlinear(std::vector<double>{x[0], x[1], x[2], x[3], x[4], 0}); };
  const ShapleyValues s = shapley_values(f, points, background);
  for (size_t p = 0; p < points.size(); ++p) {
    auto v = [&](uint32_t mask) {
      double total = 0;
      for (const auto& b : background) {
        std::vector<double> z(5);
        for (int j = 0; j < 5; ++j) z[static_cast<size_t>(j)] = (mask >> j) & 1u ? points[p][static_cast<size_t>(j)] : b[static_cast<size_t>(j)];
        total += f(z);
      }
      return total / static_cast<double>(background.size());
    };
    const std::vector<double> expected = shapley_by_permutations(5, v);
    for (int i = 0; i < 5; ++i) EXPECT_NEAR(s.phi[p][static_cast<size_t>(i)], expected[static_cast<size_t>(i)], 1e-12);
  }
}

TEST(Shapley, DeterminedFeaturesShareTheirEffect) {
  // a + b = 1 on {0, 1}: x = (1, 0), background (0, 1). Neither hybrid, (1, 1) or (0, 0), is
  // valid, so v({a}) = v({b}) = f(x) (shapley.h) and the effect f(x) - f(b) = 10 - 1 is split
  // evenly: fixing either feature fixes the other.
  const Validity valid = [](std::span<const double> x) { return x[0] + x[1] == 1; };
  const Model f = [&](std::span<const double> x) {
    EXPECT_TRUE(valid(x)) << "model called on the invalid (" << x[0] << ", " << x[1] << ")";
    return 10 * x[0] + x[1];
  };
  const ShapleyValues s = shapley_values(f, {{1, 0}}, {{0, 1}}, valid);
  EXPECT_DOUBLE_EQ(s.phi[0][0], 4.5);
  EXPECT_DOUBLE_EQ(s.phi[0][1], 4.5);
  // Without the predicate the hybrids count: phi = (10 * (1 - 0), 0 - 1) = (10, -1).
  const Model plain = [](std::span<const double> x) { return 10 * x[0] + x[1]; };
  const ShapleyValues u = shapley_values(plain, {{1, 0}}, {{0, 1}});
  EXPECT_DOUBLE_EQ(u.phi[0][0], 10);
  EXPECT_DOUBLE_EQ(u.phi[0][1], -1);
}

TEST(Shapley, ValidityRuleOnALayoutConstraint) {
  // Features log2 tp, log2 pp, log2 dp of 8 ranks: valid iff they sum to 3. The background is
  // 8 of the 10 layouts ((8,1,1) and (1,1,8) left out), so for x = (8,1,1) the coalition
  // {tp} has no valid hybrid (the fallback), and for x = (2,2,2) {tp} keeps 3 of 8 rows.
  const Validity valid = [](std::span<const double> x) { return x[0] + x[1] + x[2] == 3; };
  int invalid_calls = 0;
  const Model f = [&](std::span<const double> x) {
    invalid_calls += !valid(x);
    return 3 * x[0] - (x[1] - 1) * (x[1] - 1) + x[0] * x[2];
  };
  Rows background;
  for (int t = 0; t <= 3; ++t) {
    for (int p = 0; t + p <= 3; ++p) {
      if ((t == 3) || (t == 0 && p == 0)) continue;  // (8,1,1) and (1,1,8)
      background.push_back({double(t), double(p), double(3 - t - p)});
    }
  }
  ASSERT_EQ(background.size(), 8u);
  const Rows points = {{3, 0, 0}, {1, 1, 1}, {0, 1, 2}};
  const ShapleyValues s = shapley_values(f, points, background, valid);
  EXPECT_EQ(invalid_calls, 0);
  std::vector<int> fallbacks(points.size(), 0), partial(points.size(), 0);  // coalitions with no / some rows dropped
  for (size_t p = 0; p < points.size(); ++p) {
    EXPECT_NEAR(sum(s.phi[p]), f(points[p]) - s.base, 1e-12);
    // The rule of shapley.h written as a recursion: the valid hybrids' mean, else the mean
    // over one-larger coalitions.
    std::map<uint32_t, double> memo;
    std::function<double(uint32_t)> v = [&](uint32_t mask) -> double {
      if (auto it = memo.find(mask); it != memo.end()) return it->second;
      double total = 0;
      int n = 0;
      for (const auto& b : background) {
        std::vector<double> z(3);
        for (int j = 0; j < 3; ++j) z[static_cast<size_t>(j)] = (mask >> j) & 1u ? points[p][static_cast<size_t>(j)] : b[static_cast<size_t>(j)];
        if (valid(z)) {
          total += f(z);
          ++n;
        }
      }
      partial[p] += n > 0 && n < 8;
      if (n == 0) {
        ++fallbacks[p];
        for (int j = 0; j < 3; ++j) {
          if (!((mask >> j) & 1u)) {
            total += v(mask | (1u << j));
            ++n;
          }
        }
      }
      return memo[mask] = total / n;
    };
    const std::vector<double> expected = shapley_by_permutations(3, v);
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(s.phi[p][static_cast<size_t>(i)], expected[static_cast<size_t>(i)], 1e-12);
  }
  // Both branches of the rule were taken: x = (8,1,1) has coalitions without a valid hybrid
  // ({tp}: only (8,1,1) completes it), x = (2,2,2) has coalitions that keep some rows.
  EXPECT_GT(fallbacks[0], 0);
  EXPECT_EQ(fallbacks[1], 0);
  EXPECT_GT(partial[1], 0);
}

TEST(Shapley, RanksFeaturesByMeanAbsolutePhi) {
  // f = 5 x0 + 0.1 x1 + x2 - 2 x3: phi_i = a_i (x_i - mean b_i), so mean |phi_i| is |a_i| times
  // the mean |x_i - mean b_i|.
  const std::vector<double> a = {5, 0.1, 1, -2};
  const Model f = [&](std::span<const double> x) { return a[0] * x[0] + a[1] * x[1] + a[2] * x[2] + a[3] * x[3]; };
  const Rows points = uniform_rows(10, 4, 7), background = uniform_rows(10, 4, 8);
  const std::vector<FeatureImportance> r = rank_by_mean_abs(shapley_values(f, points, background));
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[0].feature, 0);
  EXPECT_EQ(r[1].feature, 3);
  EXPECT_EQ(r[2].feature, 2);
  EXPECT_EQ(r[3].feature, 1);
  for (const FeatureImportance& fi : r) {
    const auto j = static_cast<size_t>(fi.feature);
    double mean_b = 0, expected = 0;
    for (const auto& b : background) mean_b += b[j] / 10;
    for (const auto& x : points) expected += std::abs(a[j] * (x[j] - mean_b)) / 10;
    EXPECT_NEAR(fi.mean_abs_phi, expected, 1e-12);
  }
  expect_input_error([] { rank_by_mean_abs(ShapleyValues{}); }, {"no explained points"});
}

TEST(Shapley, SurrogateSensitivityFindsTheKnobsThatMatter) {
  // A forest fitted to y = 3 x0 + 2 sin(3 x2) over five knobs; knobs 1, 3, 4 do nothing.
  const Rows x = uniform_rows(300, 5, 9);
  std::vector<double> y;
  for (const auto& r : x) y.push_back(3 * r[0] + 2 * std::sin(3 * r[2]));
  ForestOptions opt;
  opt.n_trees = 50;
  opt.seed = 4;
  const Forest forest = Forest::fit(x, y, opt);
  const Model surrogate = [&](std::span<const double> q) { return forest.predict(q).mean; };
  const Rows points(x.begin(), x.begin() + 25), background(x.begin() + 25, x.begin() + 50);
  const ShapleyValues s = shapley_values(surrogate, points, background);
  const std::vector<FeatureImportance> r = rank_by_mean_abs(s);
  EXPECT_EQ(r[0].feature, 0);
  EXPECT_EQ(r[1].feature, 2);
  for (size_t i = 2; i < 5; ++i) EXPECT_LT(r[i].mean_abs_phi, 0.1 * r[1].mean_abs_phi) << "feature " << r[i].feature;
  for (size_t p = 0; p < points.size(); ++p) EXPECT_NEAR(sum(s.phi[p]), s.value[p] - s.base, 1e-9);
}

TEST(Shapley, RefusesTooManyFeaturesAndBadInput) {
  const Model f = [](std::span<const double> x) { return x[0]; };
  const Rows wide = uniform_rows(2, 13, 10);
  expect_input_error([&] { shapley_values(f, wide, wide); }, {"K = 13 features", "the 12 that exact", "8192 coalitions"});
  const Rows ok = {{0, 1}, {1, 0}};
  expect_input_error([&] { shapley_values(f, {}, ok); }, {"no points"});
  expect_input_error([&] { shapley_values(f, ok, {}); }, {"no background"});
  expect_input_error([&] { shapley_values(f, {{0, 1}, {1}}, ok); }, {"point 1 has 1 features", "point 0 has 2"});
  expect_input_error([&] { shapley_values(f, ok, {{0, 1}, {1, 2, 3}}); }, {"background row 1 has 3 features"});
  const Validity sums_to_one = [](std::span<const double> x) { return x[0] + x[1] == 1; };
  expect_input_error([&] { shapley_values(f, {{0, 1}, {1, 1}}, ok, sums_to_one); }, {"point 1 is not a valid"});
  expect_input_error([&] { shapley_values(f, ok, {{0, 1}, {0, 0}}, sums_to_one); }, {"background row 1 is not a valid"});
}

}  // namespace
}  // namespace weft::tune
