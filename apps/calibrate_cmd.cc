// `weft calibrate`: measures this machine (sgemm, memory, MPI links) and writes a system file.
#include <fmt/format.h>

#include <string>

#include "cli_util.h"
#include "commands.h"
#include "core/error.h"
#include "plan/calibrate.h"

namespace weft {

int cmd_calibrate(CLI::App& app, int argc, char** argv, Communicator& world) {
  std::string out = "systems/local.toml", name = "local";
  int64_t threads = 0;
  bool quick = false;
  app.add_option("--out", out, "system file to write");
  app.add_option("--name", name, "system name");
  app.add_option("--threads", threads, "threads per rank (0: OMP_NUM_THREADS or all cores)");
  app.add_flag("--quick", quick, "fewer sizes and repetitions (seconds instead of a minute)");
  app.parse(argc - 1, argv + 1);
  check_threads_option(threads);
  check_output_file(out, "--out");  // before a minute of measuring, not after
  plan::CalibrationOptions o;
  o.threads = static_cast<int>(threads);
  o.quick = quick;
  o.name = name;
  const plan::Calibration c = plan::calibrate(o, world);
  if (world.rank() == 0) {
    write_output_file(out, plan::system_to_toml(c.system, c.notes));
    for (const auto& n : c.notes) fmt::print("{}\n", n);
    fmt::print("wrote {}\n", out);
  }
  return 0;
}

}  // namespace weft
