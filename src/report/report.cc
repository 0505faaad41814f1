#include "report/report.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "core/durable_file.h"
#include "core/error.h"
#include "data/text_util.h"
#include "report/gnuplot.h"
#include "report/markdown.h"
#include "report/plots.h"
#include "report/run_reader.h"

namespace fs = std::filesystem;

namespace weft::report {

namespace {

// "runs/x/" -> "x".
std::string folder_name(const std::string& dir) {
  fs::path p = fs::path(dir).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  return p.filename().string();
}

// Runs are named by their folder's name; two of the same name by the paths as given.
void label_runs(std::vector<Run>& runs) {
  for (Run& r : runs) r.label = folder_name(r.dir);
  if (runs.size() == 2 && runs[0].label == runs[1].label) {
    runs[0].label = runs[0].dir;
    runs[1].label = runs[1].dir;
  }
}

// Every file a report may write: those a new report does not write (a pipeline plot, when
// the new run has pp = 1) are removed from the output folder, so that none is left stale.
constexpr const char* kReportFiles[] = {"report.md",     "loss.png",          "loss.gp",         "throughput.png",
                                        "throughput.gp", "memory.png",        "memory.gp",       "pipeline.png",
                                        "pipeline.gp",   "communication.png", "communication.gp",
                                        "tasks.png",     "tasks.gp"};

std::string default_out(const std::vector<std::string>& run_dirs) {
  if (run_dirs.size() == 1) return (fs::path(run_dirs[0]) / "report").string();
  return (fs::path(run_dirs[0]) / ("compare-" + folder_name(run_dirs[1]))).string();
}

// Moves every file of `from` into `to` (created if needed), replacing files of the same name.
std::vector<std::string> move_files(const fs::path& from, const fs::path& to) {
  fs::create_directories(to);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(from)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  for (const std::string& n : names) fs::rename(from / n, to / n);
  for (const char* n : kReportFiles) {
    if (std::find(names.begin(), names.end(), n) == names.end()) fs::remove(to / n);
  }
  return names;
}

// Draws the plots and writes report.md into `scratch`.
void render(const std::vector<Run>& runs, const Gnuplot& gp, const std::string& scratch) {
  std::vector<const Run*> ptrs;
  for (const Run& r : runs) ptrs.push_back(&r);
  const PlotFiles plots = draw_plots(gp, scratch, ptrs);
  write_file_atomic((fs::path(scratch) / "report.md").string(), report_markdown(ptrs, plots));
}

}  // namespace

ReportResult write_report(const std::vector<std::string>& run_dirs, const std::string& out_dir) {
  if (run_dirs.empty() || run_dirs.size() > 2) {
    throw_input("weft report takes one or two run folders, got {}", run_dirs.size());
  }
  ReportResult res{out_dir.empty() ? default_out(run_dirs) : out_dir, {}};
  std::error_code ec;
  // The output is tried before the runs are read (issue 34 class 5), creating nothing: a run
  // folder that does not exist is not made by its default output, and a failure leaves no folder.
  for (const std::string& d : run_dirs) {
    if (!fs::is_directory(d, ec)) throw_input("{}: not a run folder (no such directory)", d);
  }
  probe_writable(res.out_dir, "--out", true);
  std::vector<Run> runs;
  for (const std::string& d : run_dirs) runs.push_back(read_run(d));
  label_runs(runs);
  const Gnuplot gp = find_gnuplot();
  // The scratch folder sits beside the output folder, so that moving the files is a rename.
  fs::path out = fs::absolute(res.out_dir).lexically_normal();
  if (!out.has_filename()) out = out.parent_path();  // "dir/" names dir
  const fs::path parent = out.parent_path();
  const fs::path scratch = parent / fmt::format(".weft-report-{}.tmp", ::getpid());
  fs::create_directories(scratch, ec);
  if (ec) throw_input("--out {}: cannot create the folder {} beside it ({})", res.out_dir, scratch.string(), ec.message());
  try {
    render(runs, gp, scratch.string());
    res.files = move_files(scratch, res.out_dir);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(scratch, ec);
    throw;
  }
  fs::remove_all(scratch);
  return res;
}

}  // namespace weft::report
