// The plots of `weft report`, one gnuplot script each, for one run or two overlaid: loss
// against tokens, throughput and step time against the planner, memory by category per rank
// (predicted and measured), the pipeline per stage, communication bytes per axis and level.
#pragma once
#include <string>
#include <vector>

#include "report/gnuplot.h"
#include "report/run_reader.h"

namespace weft::report {

// The scripts (data inline); each draws NAME.png, NAME being the function's plot name.
std::string loss_script(const Gnuplot& gp, const std::vector<const Run*>& runs);        // "loss"
std::string tasks_script(const Gnuplot& gp, const std::vector<const Run*>& runs);       // "tasks" ([eval] tasks)
std::string throughput_script(const Gnuplot& gp, const std::vector<const Run*>& runs);  // "throughput"
std::string memory_script(const Gnuplot& gp, const std::vector<const Run*>& runs);      // "memory"
std::string pipeline_script(const Gnuplot& gp, const std::vector<const Run*>& runs);    // "pipeline"
std::string comm_script(const Gnuplot& gp, const std::vector<const Run*>& runs);        // "communication"

// The PNG files drawn (names relative to the report folder); pipeline is empty when no run
// has more than one stage, comm when no run communicated.
struct PlotFiles {
  std::string loss, tasks, throughput, memory, pipeline, comm;  // "": not drawn
};
// Draws every plot into `dir` (RuntimeError from gnuplot, see run_script).
PlotFiles draw_plots(const Gnuplot& gp, const std::string& dir, const std::vector<const Run*>& runs);

}  // namespace weft::report
