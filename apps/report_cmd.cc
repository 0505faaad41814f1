// `weft report RUN_DIR [RUN_DIR_B] [--out DIR]`: a Markdown summary and PNG plots of a traced
// run, or of two runs overlaid (see docs/report.md).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string>
#include <vector>

#include "commands.h"
#include "core/error.h"
#include "report/report.h"

namespace weft {

int cmd_report(CLI::App& app, int argc, char** argv, Communicator& world) {
  std::vector<std::string> runs;
  std::string out;
  app.description(
      "A Markdown summary (report.md) and PNG plots of a run trained with --trace true; with two runs, B overlaid on "
      "A");
  app.add_option("RUN_DIR", runs, "run folder, and optionally a second one to compare with it (B against A)")
      ->required()
      ->expected(1, 2);
  app.add_option("--out", out, "output folder (default: RUN/report, or RUN_A/compare-NAME_B for two runs)");
  app.parse(argc - 1, argv + 1);
  if (world.size() > 1) {
    throw_input("weft report reads a finished run: run it as one process, not under mpirun ({} ranks)", world.size());
  }
  const report::ReportResult r = report::write_report(runs, out);
  fmt::print("wrote {}/report.md and {} other file(s): {}\n", r.out_dir, r.files.size() - 1, fmt::join(r.files, ", "));
  return 0;
}

}  // namespace weft
