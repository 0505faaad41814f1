// What several `weft` subcommands share: options spelled alike everywhere, and the model that
// a --checkpoint argument names.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "model/config.h"
#include "model/gpt.h"

namespace weft {

// --checkpoint DIR (required): a checkpoint folder, or a run folder (its newest checkpoint).
void add_checkpoint_option(CLI::App& app, std::string& checkpoint);
// --threads N (0: all cores).
void add_threads_option(CLI::App& app, int64_t& threads);
// --format text|json.
void add_format_option(CLI::App& app, std::string& format);

// The checkpoint folder a --checkpoint argument names: a run folder means its newest checkpoint.
std::string checkpoint_dir_arg(const std::string& path);

// A GPT on the CPU backend holding the parameters of the checkpoint folder `dir`.
struct CheckpointModel {
  explicit CheckpointModel(const std::string& dir);
  ModelConfig config;
  std::unique_ptr<Backend> backend;
  GPT model;
};

}  // namespace weft
