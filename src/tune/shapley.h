// Exact Shapley values of a model's features (the tuner's SHAP sensitivity: how much each
// knob moves the surrogate's predicted throughput), by enumerating all 2^K coalitions.
//
// Value function (interventional SHAP, Janzing et al. 2020; the "interventional" mode of
// shap's explainers): for a point x and a background set B of configurations,
//   v(S) = mean over b in B of f(x_S, b_notS),
// the model at x's values on the features of S and b's on the others. Then
//   phi_i(x) = sum over S not containing i of |S|! (K - |S| - 1)! / K! * (v(S u {i}) - v(S)),
// which satisfies efficiency: sum_i phi_i(x) = v(all) - v(none) = f(x) - mean_b f(b).
//
// Constraints between knobs (tp * pp * dp = world size, micro-batch * accumulation * dp =
// global batch) make some hybrids (x_S, b_notS) configurations that cannot exist, on which
// the model's value means nothing. With a validity predicate:
//  - every explained point and every background row must be valid (InputError naming it);
//  - v(S) is the mean over the background rows whose hybrid is valid only; the model is never
//    called on an invalid hybrid;
//  - when no row completes x_S validly, v(S) is the mean of v(S u {j}) over the features j not
//    in S (computed from the largest coalitions down; v(all) = f(x) always exists). Reason: if
//    x's values on S admit no other completion in the background, then fixing S effectively
//    fixes more of x, so S is credited with the value of its extensions. Example: with
//    tp * pp = 8 and only tp fixed to 8, the only completion is x's own pp = 1; a background
//    without pp = 1 leaves {tp} no valid hybrid and v({tp}) = v({tp, pp}) = f(x).
// Efficiency holds with or without the predicate (any v gives it).
//
// Cost: 2^K * |B| model calls per explained point. K is refused above kMaxShapleyFeatures.
#pragma once
#include <functional>
#include <span>
#include <vector>

namespace weft::tune {

// The model explained (e.g. the forest surrogate's mean) and the optional validity predicate.
using Model = std::function<double(std::span<const double>)>;
using Validity = std::function<bool(std::span<const double>)>;

// 2^12 = 4096 coalitions: exact enumeration stays cheap for the ~10 knobs of a layout search.
constexpr int kMaxShapleyFeatures = 12;

struct ShapleyValues {
  std::vector<std::vector<double>> phi;  // [point][feature]
  std::vector<double> value;             // f(x) per point
  double base = 0;                       // mean over the background of f(b)
};

// Shapley values of f at each of `points` (K features each, 1 <= K <= kMaxShapleyFeatures)
// against `background` (K features per row, at least one row), as above; `valid` may be empty
// (every hybrid is valid). InputError for no points, no background, ragged rows, K out of range,
// or an invalid point or background row.
ShapleyValues shapley_values(const Model& f, const std::vector<std::vector<double>>& points,
                             const std::vector<std::vector<double>>& background, const Validity& valid = {});

struct FeatureImportance {
  int feature = 0;
  double mean_abs_phi = 0;  // mean over the explained points of |phi|
};

// Features by decreasing mean |phi| (the global SHAP bar chart), ties by feature index.
// InputError when there are no points.
std::vector<FeatureImportance> rank_by_mean_abs(const ShapleyValues& s);

}  // namespace weft::tune
