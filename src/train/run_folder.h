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

// TrainOptions::resume_from's value for `--resume latest-valid`: resume from the newest
// checkpoint that verifies, skipping (and logging) newer corrupt ones. A folder of that name
// is given as ./latest-valid.
inline constexpr const char* kResumeLatestValid = "latest-valid";

std::string step_dir_name(int64_t step);
// Checkpoints in a run folder, oldest first: (step, folder as resolved). Folders being written
// (step-N.tmp-*) or deleted (step-N.trash-*) are never listed.
std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& run_dir);
// Newest complete checkpoint folder "<run>/step-NNNNNN" (empty if none).
std::string find_latest_checkpoint(const std::string& run_dir);
// keep_last pruning (after a save): renames each checkpoint beyond the newest `keep_last` to
// step-N.trash-<host>-<pid> (never a checkpoint name) before deleting it, so an interruption
// leaves no half-deleted checkpoint; and removes step-N.trash-* / step-N.tmp-* leftovers (and
// step-N.old-* beside an existing step-N) whose writer is provably gone. keep_last <= 0 keeps all.
void prune_checkpoints(const std::string& run_dir, int64_t keep_last);
// Rewrites metrics.jsonl keeping only entries up to `step` (used when resuming, so that a
// crashed run's lines past its last checkpoint do not repeat). Atomic.
void truncate_metrics(const std::string& path, int64_t step);

// What the run folder holds for this run, validated (read only).
// A checkpoint's trainer.json, range-checked (resume_state.cc's rules, see
// docs/formats-checkpoint.md).
struct ResumeState {
  int64_t step = 0;
  int64_t optimizer_steps = 0;   // absent: step
  bool has_loss_scale = false;   // dynamic loss scaling state saved
  double loss_scale = 0.0;
  int64_t loss_scale_good_steps = 0;
  bool has_seed = false;
  int64_t seed = 0;
  bool has_global_batch = false;
  int64_t global_batch = 0;
  nlohmann::json raw;  // the whole object, for the keys other parts own (spike_window: train/divergence)
};
// Parses trainer.json's object; `path` names the file in errors (InputError naming the key,
// the value and the accepted range).
ResumeState parse_resume_state(const nlohmann::json& j, const std::string& path);

struct RunFolder {
  std::vector<std::pair<int64_t, std::string>> existing;  // checkpoints found
  std::string resume_dir;                                 // the checkpoint to resume from, if any
  ResumeState resume_state;                               // its trainer state
};
// Checks the folder against the options: a resume needs a checkpoint that verifies against its
// manifest and whose model, seed and global batch match the config and whose step is at most
// the run's steps; a fresh run needs an empty folder or --overwrite. InputError naming the
// values otherwise. Plain --resume takes the newest checkpoint and fails if it is corrupt;
// --resume latest-valid (kResumeLatestValid) walks back to the newest one that verifies.
RunFolder inspect_run_folder(const RunConfig& cfg, const TrainOptions& opt, const ModelConfig& mc);
// Rank 0, after every rank has validated its inputs and while holding the folder's lock
// (train/run_lock.h): creates the folder; for --overwrite removes the previous run's
// checkpoints, metrics, trace files, communication report and leftover temporary files.
void open_run_folder(const RunConfig& cfg, const TrainOptions& opt, const RunFolder& folder);

}  // namespace weft
