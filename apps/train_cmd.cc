// `weft train CONFIG [--key value | --key=value]... [--resume [DIR|latest-valid]] [--overwrite]`: every
// config key is an option, so the arguments are parsed here rather than with CLI11.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "cli_util.h"
#include "commands.h"
#include "core/error.h"
#include "train/config.h"
#include "train/preemption.h"
#include "train/trainer.h"

namespace weft {

namespace {

// What the arguments of `weft train` ask for.
struct TrainArgs {
  bool help = false;  // -h/--help: print the usage and stop
  std::string config_path;
  std::vector<std::pair<std::string, std::string>> overrides;  // config key -> value
  TrainOptions opt;
};

void print_train_help() {
  fmt::print("usage: weft train CONFIG.toml [--key value ...] [--resume [CHECKPOINT | latest-valid]] [--overwrite]\n\n"
             "  --resume               continue from the newest checkpoint of the run folder (verified; exit 2 if corrupt)\n"
             "  --resume latest-valid  continue from the newest checkpoint that verifies, skipping corrupt ones\n"
             "  --resume CHECKPOINT    continue from that checkpoint folder (verified)\n\n"
             "config keys (each also a --option):\n");
  for (const auto& k : run_config_keys()) fmt::print("  {}\n", k);
}

TrainArgs parse_train_args(const std::vector<std::string>& args) {
  TrainArgs t;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      t.help = true;
      return t;
    }
    if (a == "--resume") {
      t.opt.resume = true;
      if (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0 && !t.config_path.empty()) t.opt.resume_from = args[++i];
    } else if (a.rfind("--resume=", 0) == 0) {
      t.opt.resume = true;
      t.opt.resume_from = a.substr(9);
      if (t.opt.resume_from.empty()) throw_input("--resume= needs a checkpoint folder or latest-valid");
    } else if (a == "--overwrite") {
      t.opt.overwrite = true;
    } else if (a.rfind("--", 0) == 0) {
      t.overrides.push_back(parse_override(args, i));
    } else {
      if (!t.config_path.empty()) throw_input("unexpected argument '{}' (the config is {})", a, t.config_path);
      t.config_path = a;
    }
  }
  return t;
}

}  // namespace

int cmd_train(CLI::App&, int argc, char** argv, Communicator& world) {
  TrainArgs t = parse_train_args(std::vector<std::string>(argv + 2, argv + argc));
  if (t.help) {
    print_train_help();
    return 0;
  }
  if (t.config_path.empty()) throw_input("weft train: missing CONFIG.toml (usage: weft train CONFIG.toml [--key value ...])");
  if (!std::filesystem::exists(t.config_path)) throw_input("config file {} does not exist", t.config_path);
  if (t.opt.resume && t.opt.overwrite) throw_input("--resume and --overwrite exclude each other");
  RunConfig cfg = load_run_config(t.config_path, t.overrides);
  t.opt.config_path = t.config_path;
  const TrainResult res = train(cfg, t.opt, world);
  return train_exit_code(res.stop_signal, res.steps_done, cfg.steps);  // 128 + signal: stopped early (preemption)
}

}  // namespace weft
