#include "cli_util.h"

#include <filesystem>

#include "ckpt/checkpoint.h"
#include "train/trainer.h"

namespace weft {

void add_checkpoint_option(CLI::App& app, std::string& checkpoint) {
  app.add_option("--checkpoint", checkpoint, "checkpoint folder (or run folder: its newest checkpoint)")->required();
}

void add_threads_option(CLI::App& app, int64_t& threads) { app.add_option("--threads", threads, "threads (0: all cores)"); }

void add_format_option(CLI::App& app, std::string& format) {
  app.add_option("--format", format, "text or json")->check(CLI::IsMember({"text", "json"}));
}

std::string checkpoint_dir_arg(const std::string& path) {
  if (std::filesystem::exists(std::filesystem::path(path) / kCheckpointConfigFile)) return path;
  std::string latest = find_latest_checkpoint(path);
  if (!latest.empty()) return latest;
  return resolve_checkpoint_dir(path);
}

CheckpointModel::CheckpointModel(const std::string& dir)
    : config(load_checkpoint_config(dir)), backend(make_cpu_backend()), model(config, *backend) {
  load_checkpoint_params(dir, model.layout(), model.params());
}

}  // namespace weft
