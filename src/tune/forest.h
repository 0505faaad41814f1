// A regression random forest with per-leaf mean and variance: the surrogate of the tuner's
// Bayesian search (tune/cbo.h) and the model its sensitivity analysis explains
// (tune/shapley.h). It follows scikit-learn's RandomForestRegressor, which DeepHyper's CBO
// uses through deephyper.skopt.learning.RandomForestRegressor:
//
//  - each tree is grown on a bootstrap sample (n draws with replacement from the n rows);
//  - at every node the features are visited in a random order, and the best split (largest
//    reduction of the sum of squared deviations of y, thresholds halfway between consecutive
//    distinct values, x <= threshold goes left) is searched over max_features of them; like
//    scikit-learn, features constant in the node do not count towards max_features;
//  - a node becomes a leaf when its y are all equal, it has fewer than min_samples_split rows,
//    it sits at max_depth, or no split leaves min_samples_leaf rows on each side;
//  - each leaf keeps the mean and the (population) variance of its rows' y, bootstrap
//    duplicates counted, i.e. the node impurity of scikit-learn's squared-error criterion.
//
// Prediction is the law of total variance over the T trees (skopt's forest.py): with
// mu_t(x), v_t(x) the mean and variance of the leaf x falls in, in tree t,
//   mean(x)     = (1/T) sum_t mu_t(x)
//   variance(x) = (1/T) sum_t max(v_t(x), min_variance) + (1/T) sum_t (mu_t(x) - mean(x))^2.
// The second term (disagreement between trees) is what grows away from the data.
//
// Features are numbers; a categorical knob arrives encoded as numbers by the caller. A fit is
// a pure function of (rows, options): the random draws are Philox(seed, kTuneStreamForest +
// tree, i) (tune/draws.h).
#pragma once
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace weft::tune {

struct ForestOptions {
  int n_trees = 100;
  int max_depth = 0;           // 0: unlimited
  int min_samples_split = 2;   // a node with fewer rows is a leaf
  int min_samples_leaf = 1;    // a split leaves at least this many rows on each side
  double max_features = 1.0;   // fraction of the features searched per split, (0, 1]; at least 1
  bool bootstrap = true;       // false: every tree sees every row once
  double min_variance = 0.0;   // floor on each leaf's variance in predictions (skopt's min_variance)
  uint64_t seed = 0;
};

// The forest's prediction at one point.
struct Prediction {
  double mean = 0;
  double variance = 0;  // total variance over trees (see above); >= 0
};

// One node of a tree. A leaf has feature == -1; an inner node sends x to `left` when
// x[feature] <= threshold, else to `right`. Every node keeps the statistics of its rows.
struct TreeNode {
  int feature = -1;
  double threshold = 0;
  int left = -1, right = -1;
  double mean = 0, variance = 0;
  int count = 0;  // rows (bootstrap duplicates counted)
};

struct Tree {
  std::vector<TreeNode> nodes;  // nodes[0] is the root
};

class Forest {
 public:
  // Fits a forest to rows x (n rows of d features, n >= 1, d >= 1) and targets y (n values).
  // InputError, naming the values, for no rows, ragged rows, a size mismatch, a non-finite
  // feature or target, or options out of range.
  static Forest fit(const std::vector<std::vector<double>>& x, const std::vector<double>& y,
                    const ForestOptions& opt);

  // Mean and total variance at x (d features). InputError when x has another length.
  Prediction predict(std::span<const double> x) const;

  int n_features() const { return n_features_; }
  const std::vector<Tree>& trees() const { return trees_; }

 private:
  Forest(int n_features, double min_variance, std::vector<Tree> trees)
      : n_features_(n_features), min_variance_(min_variance), trees_(std::move(trees)) {}

  int n_features_ = 0;
  double min_variance_ = 0;
  std::vector<Tree> trees_;
};

}  // namespace weft::tune
