#pragma once
// A device's matrix-product rate by shape, measured (`weft calibrate` on a CPU: the cpu backend's
// products over a grid of m x n x k for each operand layout weft's layers use), and its
// interpolation. A planner pricing a product of another shape interpolates the rate trilinearly
// in log m, log n, log k (clamped to the grid: rates settle beyond its largest sizes).
//
// Layouts (GemmTrans): kNN  C = A B         (a linear layer's forward: rows @ weight)
//                      kNT  C = A B^T       (its input gradient: dY @ W^T)
//                      kTN  C = A^T B       (its weight gradient: X^T @ dY)
#include <array>
#include <string>
#include <vector>

namespace weft::plan {

enum class GemmTrans { kNN = 0, kNT = 1, kTN = 2 };
inline constexpr std::array<const char*, 3> kGemmTransNames = {"nn", "nt", "tn"};

struct GemmTable {
  std::vector<double> m, n, k;  // grid sizes, each increasing
  // FLOP/s per layout, m-major (index (i n.size() + j) k.size() + l); empty: not measured.
  std::array<std::vector<double>, 3> rates;

  bool empty() const { return rates[0].empty(); }
  // FLOP/s of one (m x k) @ (k x n) product in layout t (nn's where t was not measured).
  double rate(GemmTrans t, double m, double n, double k) const;
  // Throws (naming `where`) unless the grid is increasing and positive and every measured
  // layout has m n k positive rates.
  void validate(const std::string& where) const;
};

}  // namespace weft::plan
