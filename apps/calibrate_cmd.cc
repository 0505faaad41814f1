// `weft calibrate`: measures this machine (sgemm, memory, MPI links) and writes a system file.
#include <fmt/format.h>

#include <string>

#include "cli_util.h"
#include "commands.h"
#include "core/error.h"
#include "plan/calibrate.h"
#include "plan/gemm_fit.h"

namespace weft {

namespace {

// --gemm-sweep: fit `base`'s per-shape product model to a measured sweep and write `out`.
int calibrate_from_sweep(const std::string& sweep_path, const std::string& base_path, const std::string& out) {
  if (base_path.empty()) throw_input("--gemm-sweep {} needs --system BASE.toml (the system whose device it measured)", sweep_path);
  const plan::System base = plan::load_system(base_path);
  const plan::GemmSweep sweep = plan::read_gemm_sweep(sweep_path);
  const plan::GemmFit fit = plan::fit_gemm_model(base.device, sweep.samples);
  plan::System sys = base;
  sys.device = fit.device;
  const std::vector<std::string> notes = {
      fmt::format("{} with its device's product model fitted by `weft calibrate --gemm-sweep`", base_path),
      fmt::format("sweep {}: {} products on '{}', measured {}", sweep_path, sweep.samples.size(),
                  sweep.device.empty() ? "an unnamed device" : sweep.device, sweep.date.empty() ? "(no date)" : sweep.date),
      fmt::format("fitted matmul_efficiency {:.4f}, gemm_k_overhead {:g}; per-product time error mean {:.2f}%, worst {:.2f}%",
                  fit.device.matmul_efficiency, fit.device.gemm_k_overhead, 100 * fit.mean_abs_error,
                  100 * fit.worst_abs_error),
      "the base file's comments (sources) are not copied: keep them beside this file"};
  write_output_file(out, plan::system_to_toml(sys, notes));
  for (const auto& n : notes) fmt::print("{}\n", n);
  fmt::print("wrote {}\n", out);
  return 0;
}

// --check FILE: a few figures measured again beside the file's; exit 1 when they no longer hold.
int check_calibrated_file(const std::string& path, int threads, Communicator& world) {
  const plan::System sys = plan::load_system(path);
  const plan::CalibrationCheck c = plan::check_calibration(sys, threads, world);
  if (world.rank() != 0) return c.holds() ? 0 : 1;
  fmt::print("weft calibrate --check {}:\n", path);
  fmt::print("{:<48} {:>12} {:>12} {:>8}\n", "figure", "file", "now", "now/file");
  for (const plan::CheckRow& r : c.rows) {
    fmt::print("{:<48} {:>12.4g} {:>12.4g} {:>7.2f}{}\n", r.name, r.file, r.now, r.file > 0 ? r.now / r.file : 0.0,
               r.ok ? "" : "  <- off");
  }
  for (const std::string& d : c.differences) fmt::print("machine differs: {}\n", d);
  if (sys.machine.empty()) fmt::print("the file has no [machine]: not written by weft calibrate on a machine\n");
  fmt::print("other processes kept {:.2f} hardware threads busy while checking\n", c.other_load);
  if (c.holds()) {
    fmt::print("{} holds on this machine (products and functions within 25%, triad 35%, latency 2x)\n", path);
    return 0;
  }
  fmt::print("{} does not hold here: run `weft calibrate --out {}` again{}\n", path, path,
             c.other_load > 0.25 ? " on a quiet machine (it is busy now)" : "");
  return 1;
}

}  // namespace

int cmd_calibrate(CLI::App& app, int argc, char** argv, Communicator& world) {
  std::string out = "systems/local.toml", name = "local", sweep, base;
  int64_t threads = 0;
  bool quick = false, sync_jitter = false;
  app.add_option("--out", out, "system file to write");
  app.add_option("--name", name, "system name");
  app.add_option("--threads", threads, "threads per rank (0: OMP_NUM_THREADS or all cores)");
  app.add_flag("--quick", quick, "fewer sizes and repetitions (seconds instead of a minute)");
  app.add_flag("--sync-jitter", sync_jitter,
               "with >= 2 ranks, price the ranks' waits at each synchronisation from the measured variation "
               "([defaults] sync_jitter; measured and noted either way; docs/planner.md)");
  app.add_option("--gemm-sweep", sweep, "fit a GPU system's per-shape product model to this measured sweep (weft bench --gemm-sweep) instead of measuring");
  app.add_option("--system", base, "--gemm-sweep: the system file whose device the sweep measured");
  std::string check;
  app.add_option("--check", check, "measure a few figures of this system file again (seconds) and say whether it holds "
                 "(exit 0) or not (exit 1)");
  app.parse(argc - 1, argv + 1);
  if (!check.empty()) {
    check_threads_option(threads);
    return check_calibrated_file(check, static_cast<int>(threads), world);
  }
  if (!sweep.empty()) {
    check_output_file(out, "--out");
    if (world.rank() != 0) return 0;
    return calibrate_from_sweep(sweep, base, out);
  }
  if (!base.empty()) throw_input("--system {} is for --gemm-sweep; plain `weft calibrate` measures this machine", base);
  check_threads_option(threads);
  check_output_file(out, "--out");  // before a minute of measuring, not after
  plan::CalibrationOptions o;
  o.threads = static_cast<int>(threads);
  o.quick = quick;
  o.sync_jitter = sync_jitter;
  o.name = name;
  const plan::Calibration c = plan::calibrate(o, world);
  if (world.rank() == 0 && !c.warning.empty()) fmt::print(stderr, "weft calibrate: warning: {}\n", c.warning);
  if (world.rank() == 0) {
    write_output_file(out, plan::system_to_toml(c.system, c.notes));
    for (const auto& n : c.notes) fmt::print("{}\n", n);
    fmt::print("wrote {}\n", out);
  }
  return 0;
}

}  // namespace weft
