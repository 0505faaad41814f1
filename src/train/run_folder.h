// A run folder: its checkpoints (step-NNNNNN), metrics.jsonl and config.toml; what a new run
// or a resume may find there, checked before anything is written.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "model/config.h"
#include "train/config.h"

namespace weft {

struct TrainOptions;

std::string step_dir_name(int64_t step);
// Checkpoints in a run folder, oldest first: (step, folder as resolved).
std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& run_dir);
// Newest complete checkpoint folder "<run>/step-NNNNNN" (empty if none).
std::string find_latest_checkpoint(const std::string& run_dir);
// Rewrites metrics.jsonl keeping only entries up to `step` (used when resuming, so that a
// crashed run's lines past its last checkpoint do not repeat). Atomic.
void truncate_metrics(const std::string& path, int64_t step);

// What the run folder holds for this run, validated (read only).
struct RunFolder {
  std::vector<std::pair<int64_t, std::string>> existing;  // checkpoints found
  std::string resume_dir;                                 // the checkpoint to resume from, if any
  nlohmann::json resume_state;                            // its trainer state
};
// Checks the folder against the options: a resume needs a checkpoint whose model, seed and
// global batch match the config; a fresh run needs an empty folder or --overwrite.
// InputError naming the values otherwise.
RunFolder inspect_run_folder(const RunConfig& cfg, const TrainOptions& opt, const ModelConfig& mc);
// Rank 0, after every rank has validated its inputs and while holding the folder's lock
// (train/run_lock.h): creates the folder; for --overwrite removes the previous run's
// checkpoints, metrics, trace files, communication report and leftover temporary files.
void open_run_folder(const RunConfig& cfg, const TrainOptions& opt, const RunFolder& folder);

}  // namespace weft
