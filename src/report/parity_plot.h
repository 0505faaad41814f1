// A parity plot (predicted against true, one panel per quantity, with the diagonal), the
// standard figure of atomistic models' errors: `weft eval` of a graph network draws its energies
// per atom and force components (issue 33, item 6).
#pragma once
#include <string>
#include <vector>

#include "report/gnuplot.h"

namespace weft::report {

struct ParityPanel {
  std::string title;  // "energy per atom"
  std::string unit;   // "eV/atom"
  std::vector<double> truth, pred;
  double mae = 0.0;   // shown in the panel's title
};

// Draws the panels side by side into DIR/NAME.png (and DIR/NAME.gp). InputError for a panel
// whose truth and predictions differ in length, that is empty, or holds a value that is not
// finite; points beyond 20000 per panel are thinned evenly (the .gp file stays small).
void draw_parity_plot(const Gnuplot& gp, const std::string& dir, const std::string& name,
                      const std::vector<ParityPanel>& panels);

}  // namespace weft::report
