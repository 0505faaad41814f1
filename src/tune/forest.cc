#include "tune/forest.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "tune/draws.h"

namespace weft::tune {
namespace {

void check_options(const ForestOptions& opt) {
  if (opt.n_trees < 1) throw_input("random forest: n_trees = {} must be at least 1", opt.n_trees);
  if (opt.max_depth < 0) throw_input("random forest: max_depth = {} must be >= 0 (0: unlimited)", opt.max_depth);
  if (opt.min_samples_split < 2)
    throw_input("random forest: min_samples_split = {} must be at least 2", opt.min_samples_split);
  if (opt.min_samples_leaf < 1)
    throw_input("random forest: min_samples_leaf = {} must be at least 1", opt.min_samples_leaf);
  if (!(opt.max_features > 0 && opt.max_features <= 1))
    throw_input("random forest: max_features = {} must be in (0, 1]", opt.max_features);
  if (!(opt.min_variance >= 0 && std::isfinite(opt.min_variance)))
    throw_input("random forest: min_variance = {} must be finite and >= 0", opt.min_variance);
}

void check_rows(const std::vector<std::vector<double>>& x, const std::vector<double>& y) {
  if (x.empty()) throw_input("random forest: no rows to fit");
  if (x.size() != y.size()) throw_input("random forest: {} rows of features but {} targets", x.size(), y.size());
  const size_t d = x[0].size();
  if (d == 0) throw_input("random forest: rows have no features");
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i].size() != d) throw_input("random forest: row {} has {} features, row 0 has {}", i, x[i].size(), d);
    for (size_t j = 0; j < d; ++j) {
      if (!std::isfinite(x[i][j])) throw_input("random forest: row {} feature {} is {}", i, j, x[i][j]);
    }
    if (!std::isfinite(y[i])) throw_input("random forest: target of row {} is {}", i, y[i]);
  }
}

// Mean and population variance of y over `rows` (two passes, for accuracy).
void node_statistics(const std::vector<double>& y, const std::vector<int>& rows, TreeNode& node) {
  const int n = static_cast<int>(rows.size());
  double sum = 0;
  for (int r : rows) sum += y[static_cast<size_t>(r)];
  const double mean = sum / n;
  double ss = 0;
  for (int r : rows) ss += (y[static_cast<size_t>(r)] - mean) * (y[static_cast<size_t>(r)] - mean);
  node.mean = mean;
  node.variance = ss / n;
  node.count = n;
}

struct Split {
  int feature = -1;
  double threshold = 0;
  double child_sse = 0;  // sum of squared deviations left + right
};

// The best split of `rows` on feature f: candidate thresholds halfway between consecutive
// distinct values with at least min_leaf rows on each side. Ties go to the lower threshold.
// Returns feature -1 when the feature offers no such threshold.
Split best_split_on(const std::vector<std::vector<double>>& x, const std::vector<double>& y,
                    const std::vector<int>& rows, int f, int min_leaf) {
  const size_t n = rows.size();
  std::vector<std::pair<double, double>> vy(n);  // (x[f], y), sorted by x[f]
  for (size_t i = 0; i < n; ++i) {
    const auto r = static_cast<size_t>(rows[i]);
    vy[i] = {x[r][static_cast<size_t>(f)], y[r]};
  }
  std::sort(vy.begin(), vy.end());
  double total = 0, total_sq = 0;
  for (const auto& [v, t] : vy) {
    total += t;
    total_sq += t * t;
  }
  Split best;
  double left = 0, left_sq = 0;
  for (size_t i = 1; i < n; ++i) {
    left += vy[i - 1].second;
    left_sq += vy[i - 1].second * vy[i - 1].second;
    if (vy[i - 1].first == vy[i].first) continue;
    const double nl = static_cast<double>(i), nr = static_cast<double>(n - i);
    if (nl < min_leaf || nr < min_leaf) continue;
    const double right = total - left, right_sq = total_sq - left_sq;
    const double sse = std::max(0.0, left_sq - left * left / nl) + std::max(0.0, right_sq - right * right / nr);
    if (best.feature < 0 || sse < best.child_sse) {
      double mid = 0.5 * (vy[i - 1].first + vy[i].first);
      if (mid >= vy[i].first) mid = vy[i - 1].first;  // rounding: keep the left value on the left
      best = {f, mid, sse};
    }
  }
  return best;
}

bool all_targets_equal(const std::vector<double>& y, const std::vector<int>& rows) {
  for (int r : rows) {
    if (y[static_cast<size_t>(r)] != y[static_cast<size_t>(rows[0])]) return false;
  }
  return true;
}

bool is_constant(const std::vector<std::vector<double>>& x, const std::vector<int>& rows, int f) {
  const double first = x[static_cast<size_t>(rows[0])][static_cast<size_t>(f)];
  for (int r : rows) {
    if (x[static_cast<size_t>(r)][static_cast<size_t>(f)] != first) return false;
  }
  return true;
}

// The best split over features visited in a random order until max_features non-constant ones
// have been searched (scikit-learn's rule). Returns feature -1 when none splits.
Split choose_split(const std::vector<std::vector<double>>& x, const std::vector<double>& y,
                   const std::vector<int>& rows, int max_features, int min_leaf, Draws& draws) {
  const int d = static_cast<int>(x[0].size());
  std::vector<int> order(static_cast<size_t>(d));
  std::iota(order.begin(), order.end(), 0);
  for (int i = d - 1; i > 0; --i) {  // Fisher-Yates
    std::swap(order[static_cast<size_t>(i)], order[draws.below(static_cast<uint64_t>(i) + 1)]);
  }
  Split best;
  int searched = 0;
  for (int f : order) {
    if (searched == max_features) break;
    if (is_constant(x, rows, f)) continue;
    ++searched;
    const Split s = best_split_on(x, y, rows, f, min_leaf);
    if (s.feature >= 0 && (best.feature < 0 || s.child_sse < best.child_sse)) best = s;
  }
  return best;
}

class TreeBuilder {
 public:
  TreeBuilder(const std::vector<std::vector<double>>& x, const std::vector<double>& y, const ForestOptions& opt,
              int max_features, Draws& draws)
      : x_(x), y_(y), opt_(opt), max_features_(max_features), draws_(draws) {}

  // Grows the subtree over `rows` at `depth` and returns its node index.
  int grow(const std::vector<int>& rows, int depth) {
    const int id = static_cast<int>(tree_.nodes.size());
    tree_.nodes.emplace_back();
    TreeNode node;
    node_statistics(y_, rows, node);
    const int n = node.count;
    const bool can_split = !all_targets_equal(y_, rows) && n >= opt_.min_samples_split && n >= 2 * opt_.min_samples_leaf &&
                           (opt_.max_depth == 0 || depth < opt_.max_depth);
    Split s;
    if (can_split) s = choose_split(x_, y_, rows, max_features_, opt_.min_samples_leaf, draws_);
    if (s.feature >= 0) {
      std::vector<int> left, right;
      for (int r : rows) {
        (x_[static_cast<size_t>(r)][static_cast<size_t>(s.feature)] <= s.threshold ? left : right).push_back(r);
      }
      node.feature = s.feature;
      node.threshold = s.threshold;
      node.left = grow(left, depth + 1);
      node.right = grow(right, depth + 1);
    }
    tree_.nodes[static_cast<size_t>(id)] = node;
    return id;
  }

  Tree take() { return std::move(tree_); }

 private:
  const std::vector<std::vector<double>>& x_;
  const std::vector<double>& y_;
  const ForestOptions& opt_;
  int max_features_;
  Draws& draws_;
  Tree tree_;
};

// The rows tree t is grown on: n bootstrap draws, or every row once.
std::vector<int> tree_rows(int n, bool bootstrap, Draws& draws) {
  std::vector<int> rows(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) rows[static_cast<size_t>(i)] = bootstrap ? static_cast<int>(draws.below(static_cast<uint64_t>(n))) : i;
  return rows;
}

const TreeNode& leaf_of(const Tree& tree, std::span<const double> x) {
  const TreeNode* node = &tree.nodes[0];
  while (node->feature >= 0) {
    node = &tree.nodes[static_cast<size_t>(x[static_cast<size_t>(node->feature)] <= node->threshold ? node->left
                                                                                                     : node->right)];
  }
  return *node;
}

}  // namespace

Forest Forest::fit(const std::vector<std::vector<double>>& x, const std::vector<double>& y, const ForestOptions& opt) {
  check_options(opt);
  check_rows(x, y);
  const int n = static_cast<int>(x.size());
  const int d = static_cast<int>(x[0].size());
  const int max_features = std::max(1, static_cast<int>(opt.max_features * d + 1e-9));
  std::vector<Tree> trees;
  trees.reserve(static_cast<size_t>(opt.n_trees));
  for (int t = 0; t < opt.n_trees; ++t) {
    Draws draws(opt.seed, kTuneStreamForest + static_cast<uint64_t>(t));
    const std::vector<int> rows = tree_rows(n, opt.bootstrap, draws);
    TreeBuilder builder(x, y, opt, max_features, draws);
    builder.grow(rows, 0);
    trees.push_back(builder.take());
  }
  return Forest(d, opt.min_variance, std::move(trees));
}

Prediction Forest::predict(std::span<const double> x) const {
  if (static_cast<int>(x.size()) != n_features_)
    throw_input("random forest: a point with {} features, the forest was fitted on {}", x.size(), n_features_);
  const double t = static_cast<double>(trees_.size());
  std::vector<const TreeNode*> leaves;
  leaves.reserve(trees_.size());
  double mean = 0;
  for (const Tree& tree : trees_) {
    leaves.push_back(&leaf_of(tree, x));
    mean += leaves.back()->mean;
  }
  mean /= t;
  double within = 0, between = 0;
  for (const TreeNode* leaf : leaves) {
    within += std::max(leaf->variance, min_variance_);
    between += (leaf->mean - mean) * (leaf->mean - mean);
  }
  return {mean, within / t + between / t};
}

}  // namespace weft::tune
