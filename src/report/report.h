// `weft report`: reads one run folder (or two, to compare), then writes report.md and its PNG
// plots (with the gnuplot script of each) into an output folder. Everything is read and
// checked before anything is written, and the files are drawn in a scratch folder first, so a
// failure leaves the output folder as it was.
#pragma once
#include <string>
#include <vector>

namespace weft::report {

struct ReportResult {
  std::string out_dir;
  std::vector<std::string> files;  // names inside out_dir: report.md, the PNGs and their .gp scripts
};

// `run_dirs`: one or two run folders; `out_dir` empty: RUN/report for one run, RUN_A/compare-LABEL_B
// for two. InputError for a folder that is not a finished traced run (naming the file and line)
// or when gnuplot is missing; RuntimeError when gnuplot fails or a file cannot be written.
ReportResult write_report(const std::vector<std::string>& run_dirs, const std::string& out_dir);

}  // namespace weft::report
