#include "report/parity_plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace weft::report {

namespace {
constexpr size_t kMaxPoints = 20000;

std::string panel_script(const ParityPanel& p, size_t k) {
  const auto [tlo, thi] = std::minmax_element(p.truth.begin(), p.truth.end());
  const auto [plo, phi] = std::minmax_element(p.pred.begin(), p.pred.end());
  double lo = std::min(*tlo, *plo), hi = std::max(*thi, *phi);
  const double pad = hi > lo ? 0.04 * (hi - lo) : 1.0;
  lo -= pad, hi += pad;
  const size_t step = (p.truth.size() + kMaxPoints - 1) / kMaxPoints;
  std::vector<std::string> rows;
  for (size_t i = 0; i < p.truth.size(); i += step) rows.push_back(fmt::format("{:.9g} {:.9g}", p.truth[i], p.pred[i]));
  std::string s = datablock(fmt::format("P{}", k), rows);
  s += fmt::format("set title {}\nset xlabel {}\nset ylabel {}\n",
                   quoted(fmt::format("{} (MAE {:.4g} {}, {} points)", p.title, p.mae, p.unit, p.truth.size())),
                   quoted(fmt::format("true ({})", p.unit)), quoted(fmt::format("predicted ({})", p.unit)));
  s += fmt::format("set xrange [{:.9g}:{:.9g}]\nset yrange [{:.9g}:{:.9g}]\nset size ratio -1\n", lo, hi, lo, hi);
  s += fmt::format("plot $P{} using 1:2 with points pt 7 ps 0.4 lc rgb '#1f4e9c' notitle, x with lines dt 2 lc rgb "
                   "'#808080' notitle\n",
                   k);
  return s;
}
}  // namespace

void draw_parity_plot(const Gnuplot& gp, const std::string& dir, const std::string& name,
                      const std::vector<ParityPanel>& panels) {
  if (panels.empty()) throw_input("a parity plot needs at least one panel");
  for (const ParityPanel& p : panels) {
    if (p.truth.empty() || p.truth.size() != p.pred.size()) {
      throw_input("parity plot '{}': {} true values and {} predictions", p.title, p.truth.size(), p.pred.size());
    }
    for (size_t i = 0; i < p.truth.size(); ++i) {
      if (!std::isfinite(p.truth[i]) || !std::isfinite(p.pred[i])) {
        throw_input("parity plot '{}': point {} is not finite (true {}, predicted {})", p.title, i, p.truth[i], p.pred[i]);
      }
    }
  }
  const int n = static_cast<int>(panels.size());
  std::string s = script_header(gp, name, 520 * n, 520);
  s += "set key off\n";
  s += fmt::format("set multiplot layout 1,{}\n", n);
  for (size_t k = 0; k < panels.size(); ++k) s += panel_script(panels[k], k);
  s += "unset multiplot\n";
  run_script(gp, dir, name, s);
}

}  // namespace weft::report
