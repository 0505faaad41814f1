// The Markdown summary of `weft report`: one section per aspect of the run(s) (## Runs,
// ## Loss, ## Throughput, ## Memory, ## Pipeline, ## Communication), each with its plot and
// the numbers behind it; with two runs, both side by side and B against A. Communication ends
// with a compression table (### Compression) when any run compressed a training call.
#pragma once
#include <string>
#include <vector>

#include "report/plots.h"
#include "report/run_reader.h"

namespace weft::report {

// The numbers the report states for one run.
struct RunNumbers {
  double final_loss = 0;
  int64_t final_step = 0;
  double final_val_loss = -1;  // -1: no validation
  int timed_steps = 0;         // steps averaged: all but the first (one-time costs), or the only one
  double mean_tokens_per_s = 0, mean_step_ms = 0;
  double step_error_pct = 0;  // (predicted - measured) / measured of step_time_report, if any
};
RunNumbers run_numbers(const Run& run);

// (predicted - measured) / measured in percent ("+1.2%"), "-" when measured is 0.
std::string error_pct(double predicted, double measured);

// The whole report.md; `plots` names the PNG files beside it (empty: not drawn).
std::string report_markdown(const std::vector<const Run*>& runs, const PlotFiles& plots);

}  // namespace weft::report
